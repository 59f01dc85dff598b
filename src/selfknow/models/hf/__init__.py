"""`hf` backend: local Hugging Face `transformers` causal LMs (SPEC §0.4; docs/hf-backend.md).

- `lm`: `HFLM`, one checkpoint (+ LoRA adapter) behind the `LM` interface and the request cache;
- `loading`: where weights come from, GPU sharding, the one resident copy of a base per process;
- `generation`: greedy and seeded sampled replies, stop strings, JSON-schema constraints;
- `beam`: the batched beam search with stop strings (persistent §3.1.1);
- `scoring`: log-likelihoods and next-token log-probabilities;
- `compat` and `prefix_attention`: what the backend needs of transformers beyond its documented
  calls, each checked before use with a plain path as the fallback.

The names below are what the rest of the package uses; importing this package registers the
backend (`registry.backend_class`).
"""
from selfknow.models.hf.lm import HFLM
from selfknow.models.hf.loading import hub_resolution, release_bases, shard_kwargs
from selfknow.models.hf.scoring import last_position_logits

__all__ = ["HFLM", "hub_resolution", "last_position_logits", "release_bases", "shard_kwargs"]
