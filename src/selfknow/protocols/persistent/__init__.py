"""Persistent calibration (Wang et al.): confidence methods and protocol steps.

Confidence methods (§3.1.1, §A.6, §A.7): `self_consistency` (weighted beams, grouped by an
`equivalence`), `verbalized` (LoRA digit confidence and its training variants), `baselines`
(end-correct, copy ablation, GCM); prompts in `prompts`. `catalog` lists every method and
table once; `methods` holds the model-free methods, `metrics` assembles and scores them.
Modules import torch/transformers only inside the functions that need them.
"""
