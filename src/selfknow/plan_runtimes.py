"""How long a job runs by the plan, and the time limit that follows: the scheduler's side of
`selfknow.plan`, which counts each job's work (`Ledger.snapshot`) and reads these."""

from __future__ import annotations

from selfknow.config import model_entry

#: a job's time limit: the plan's wall time x RUNTIME_MARGIN + RUNTIME_STARTUP_MIN (loading the
#: model, reading items), at most MAX_RUNTIME_MIN (48 h, a common partition maximum: a job
#: planned past it is named by `runtime_limits`; generation resumes from what it wrote)
RUNTIME_MARGIN = 1.5
RUNTIME_STARTUP_MIN = 30
MAX_RUNTIME_MIN = 48 * 60


def job_hours(cfg: dict, before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> float:
    """The wall hours of one job from `Ledger.snapshot`s around its counting: each local model's
    work at its `throughput_tok_s` (a model sharded over several GPUs runs at that rate on all of
    them), a batched API model's completion window per job; an API model answering at once
    adds nothing (its rate limits decide, not the plan)."""
    hours = 0.0
    for model, (jobs, work) in after.items():
        d_jobs, d_work = jobs - before.get(model, (0, 0))[0], work - before.get(model, (0, 0))[1]
        if not d_jobs and not d_work:
            continue
        spec = model_entry(cfg, model)
        if spec["backend"] == "hf":
            hours += d_work / spec["throughput_tok_s"] / 3600
        elif spec["batch"] and d_jobs:
            hours += batch_window_hours(spec)
    return hours


def batch_window_hours(spec: dict) -> float:
    """The hours one Batch API job may take (`batch_completion_window`, e.g. "24h")."""
    window = str(spec["batch_completion_window"])
    if not window.endswith("h") or not window[:-1].isdigit():
        raise ValueError(f"model {spec['name']!r}: batch_completion_window {window!r} is not '<hours>h'")
    return float(window[:-1])
