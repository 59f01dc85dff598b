"""Shared by the task tests: an interpreter the code sandbox can run here."""
from __future__ import annotations

import sys

import pytest

from selfknow.stages.tasks import sandbox
from selfknow.stages.tasks.humaneval import CodeRun
from selfknow.stages.tasks.sandbox import Limits, SandboxError

# fast limits: every hostile snippet must end well inside a test's patience
LIMITS = Limits(wall_s=5.0, cpu_s=1, memory_mb=256, max_processes=2, max_file_mb=4, output_bytes=4000,
                max_inodes=256, max_fds=64)


def sandbox_python() -> str:
    """The first of the running interpreter and /usr/bin/python3 that the sandbox can start (a
    venv under /root is unreadable to the unprivileged uid the sandbox drops to as root)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            iso = sandbox.isolation(candidate)
        except SandboxError:
            continue
        if not iso.namespaces:  # the sandbox refuses to run code here (tested with a stand-in)
            pytest.skip(f"the sandbox's namespaces are unavailable here: {iso.why_not}")
        return candidate
    pytest.skip("no interpreter here can be run by the sandbox")


def code_run(python: str, *, unfence: bool = False, limits: Limits = LIMITS) -> CodeRun:
    """HumanEval's settings with the isolation required (never the unisolated fallback)."""
    return CodeRun(python=python, limits=limits, unfence=unfence, allow_unisolated=False)
