"""Figures with one consistent, colour-blind-safe style (Okabe-Ito palette), saved atomically."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from selfknow.records import atomic_path  # noqa: E402

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
plt.rcParams.update({"axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO), "figure.dpi": 120,
                     "axes.spines.top": False, "axes.spines.right": False, "font.size": 9})


def save(fig, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    plt.close(fig)


def ability_lcae_ce(df: pd.DataFrame, path: str | Path, *, title: str) -> None:
    """LCAE Figure 2: ability (x) against LCAE (y), marker area by cost efficiency (CE).
    `df` has columns label, theta, lcae, ce."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ce = df["ce"].to_numpy(float)
    size = 40 + 260 * (ce - ce.min()) / (np.ptp(ce) or 1.0)
    for k, (_, r) in enumerate(df.iterrows()):
        ax.scatter(r["theta"], r["lcae"], s=size[k], color=OKABE_ITO[k % len(OKABE_ITO)], alpha=0.8,
                   edgecolor="black", linewidth=0.5, label=f"{r['label']} (CE {r['ce'] / 1e6:.2f}M)")
    ax.set_xlabel("ability θ (logits, Stage 3)")
    ax.set_ylabel("LCAE (BCE, lower is better)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best", frameon=False)
    save(fig, path)
