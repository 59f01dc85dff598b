"""Latent Confidence Alignment (LCAE paper; SPEC §3): examinees = models x prompting strategies,
Rasch ability (Stage 1), metacognitive self-assessment under IDS/DPR (Stage 2), re-estimated
ability and LCAE (Stage 3)."""
