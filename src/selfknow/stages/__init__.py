"""The shared stages (SPEC §0) that all three papers feed from: datasets and item sampling
(`datasets`, `items`), answer generation (`generation`, `mcq`), judging (`judge`), their
workflow jobs (`jobs`), and the extension tasks' scorers and code sandbox (`tasks`)."""
