"""LADDER's cross-task suite (§3, §A, §E.1, §F): one module per benchmark, each loading the
hub's row schema (or a local copy of it, through `selfknow.stages.datasets.source.read_rows`) and
scoring a response the way that benchmark's own evaluation code does; the sandbox that runs
model-written code (`sandbox.py`, used by HumanEval); one entry point that scores a
response to any task's item (`score.score_item`); and offline analogues of GSM8K, HumanEval
and BFCL in their row schemas (`analogues.py`).
"""
