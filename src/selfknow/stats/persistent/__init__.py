"""Statistics of the persistent-confidence paper (contrast sets, Eq. 1 normalisers, the paired bootstrap)."""
