"""The `hf` backend on every minor transformers release pyproject.toml allows besides the
installed one (the newest), so that the whole range is tested (docs/hf-backend.md).

pip puts each such release, without dependencies (the range's releases take the same
tokenizers and huggingface_hub), in a directory of the pytest cache (once per checkout: ~13 MB
each from PyPI, as the install commands fetch), and the backend's tests on the tiny models run
again in a subprocess that imports it ahead of the installed one: generation, sampling, the
beam search on both attention paths, scoring, adapters (~1 minute a release)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO

#: test_models_hf.py without SmolLM2 (converting it again under another release takes minutes)
#: and without the hub-error tests (huggingface_hub's behaviour, not transformers')
SELECTION = "not smol and not byte_table and not gguf and not unresolvable"


def allowed_range() -> tuple[str, str]:
    """(lowest allowed, first excluded) transformers version of pyproject's dependencies."""
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'^\s*"transformers>=([\d.]+),<([\d.]+)"', text, re.M)
    assert m, "pyproject.toml: no 'transformers>=LOW,<HIGH' dependency"
    return m.group(1), m.group(2)


def _minor(version: str) -> tuple[int, int]:
    return tuple(int(x) for x in version.split(".")[:2])


def other_releases() -> list[str]:
    """A pip requirement for each minor release of the range older than the installed one:
    the lower bound itself, then the newest patch of each later minor."""
    import transformers

    low, high = allowed_range()
    (major, first), installed = _minor(low), _minor(transformers.__version__)
    assert _minor(low) < installed < _minor(high), \
        f"transformers {transformers.__version__} is installed: the range {low}..{high} must " \
        "hold it and an older minor release"
    return [f"=={low}"] + [f"=={major}.{m}.*" for m in range(first + 1, installed[1])]


@pytest.mark.parametrize("requirement", other_releases())
def test_the_backend_on_an_older_allowed_transformers(requirement, pytestconfig):
    target = pytestconfig.cache.mkdir(f"transformers{requirement.replace('*', 'x')}")
    if not (target / "transformers").is_dir():
        tmp = tempfile.mkdtemp(dir=target.parent)  # whole or not at all: a kill leaves no half
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--target", tmp, f"transformers{requirement}"], check=True, timeout=600)
        shutil.rmtree(target)
        os.replace(tmp, target)
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(target), str(REPO / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    seen = subprocess.run([sys.executable, "-c", "import transformers; print(transformers.__version__)"],
                          env=env, capture_output=True, text=True, timeout=300, check=True)
    version = seen.stdout.strip()
    assert re.fullmatch(requirement[2:].replace(".", r"\.").replace("*", r"\d+"), version), version
    # no cache provider: the inner run must not overwrite this run's record of failed tests
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_models_hf.py", "-q",
                           "-p", "no:cacheprovider", "-k", SELECTION], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"test_models_hf.py under transformers {version}:\n{tail}"
    passed = int(re.search(r"(\d+) passed", proc.stdout).group(1))
    assert passed >= 40 and " skipped" not in proc.stdout.splitlines()[-1], tail
