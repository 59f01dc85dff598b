"""LADDER (SPEC §2): domain-level self-assessment under noisy feedback.

Public API: session-turn records (`records.TURN_COLUMNS`, `import_sessions`,
`read_session_table`), feedback decoding (`decode_feedback`, rule sets `frozen` /
`expanded`), estimators (`estimators.ESTIMATORS`), metrics, `score_sessions`, `score_pooled`, `import_aggregates`
and the bootstraps in `bootstrap`.
"""
from .aggregate import (import_aggregates, read_released_aggregates, score_pooled,
                        score_sessions, session_means, session_profiles)
from .feedback import decode_feedback, decoder_precision_recall, load_rules
from .records import TURN_COLUMNS, import_sessions, read_released_sessions, read_session_table

__all__ = [
    "TURN_COLUMNS", "decode_feedback", "decoder_precision_recall", "import_aggregates",
    "import_sessions", "load_rules", "read_released_aggregates", "read_released_sessions", "read_session_table",
    "score_pooled", "score_sessions", "session_means", "session_profiles",
]
