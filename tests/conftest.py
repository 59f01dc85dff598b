import os
from pathlib import Path

import pytest

# A stray hub download must fail fast: the machines have no hub access.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, which CI has and a newcomer's clone does not: skip cleanly without it."""
    d = SHARED / "data"
    if not d.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return d
