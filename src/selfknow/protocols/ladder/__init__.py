"""LADDER (SPEC §2): domain-level self-assessment under noisy feedback.

Session-turn records (`records`), feedback decoding (`feedback`), estimators (`estimators`),
metrics (`metrics`), session scoring and released aggregates (`aggregate`) and the bootstraps
(`bootstrap`). The package itself imports nothing: the Snakefile reads `catalog` when it is
parsed, which happens twice per job on a cluster, and the scoring modules pull in scipy and
pandas.
"""
