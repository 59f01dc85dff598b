"""The HTTP retry policy shared by the `openai` backend's synchronous requests
(`openai_transport.Direct.send`) and its Batch API jobs (`openai_batch`): which statuses are
retried, a server's Retry-After, and the error of a request that still failed.
"""
from __future__ import annotations

import email.utils
import time

#: statuses a request is retried on: timeout, conflict, too early, rate limit, server errors
RETRY_STATUS = {408, 409, 425, 429} | set(range(500, 600))


class RequestFailed(RuntimeError):
    """An HTTP request still failed after all retries (or failed with a non-retryable
    status)."""


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
