"""`selfknow plan`'s printed report: the plan (`selfknow.plan.plan_frame`) as a Markdown
table with its notes, and the price table of its API models."""
from __future__ import annotations

import numpy as np
import pandas as pd

from selfknow.config import model_entry
from selfknow.plan import price_per_mtok, reasoning_per_request


def _human(x: float) -> str:
    if not np.isfinite(x):
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def render_plan(df: pd.DataFrame, datasets: dict[str, str]) -> str:
    """The plan as a Markdown table with a total row, then the notes on estimated rows."""
    notes: list[str] = []
    lines = ["| model | stage | jobs (done) | requests | cached | prompt tok | completion tok | reasoning tok | USD | "
             "device | hours |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples(index=False):
        mark = ""
        if r.basis:
            if r.basis not in notes:
                notes.append(r.basis)
            mark = f" [{notes.index(r.basis) + 1}]"
        usd = "-" if not np.isfinite(r.usd) else f"{r.usd:,.2f}"
        hours = "-" if not np.isfinite(r.device_hours) else f"{r.device_hours:,.2f}"
        lines.append(f"| {r.model} | {r.stage}{mark} | {r.jobs} ({r.done_jobs}) | {r.requests:,} | {r.cached:,} | "
                     f"{_human(r.prompt_tokens)} | {_human(r.completion_tokens)} | {_human(r.reasoning_tokens)} | "
                     f"{usd} | {r.device} | {hours} |")
    priced = df["usd"].notna()
    hours = "; ".join(f"{name} {df.loc[df['device'].str.endswith(kind), 'device_hours'].sum():,.2f}"
                      for kind, name in (("GPU", "GPU"), ("CPU", "CPU"), ("batch", "batch wait"))
                      if df["device"].str.endswith(kind).any())
    lines.append(f"| **total** | | {df['jobs'].sum()} ({df['done_jobs'].sum()}) | {df['requests'].sum():,} | "
                 f"{df['cached'].sum():,} | {_human(df['prompt_tokens'].sum())} | "
                 f"{_human(df['completion_tokens'].sum())} | {_human(df['reasoning_tokens'].sum())} | "
                 f"{df.loc[priced, 'usd'].sum():,.2f} | | {hours} |")
    out = "\n".join(lines)
    unpriced = sorted(set(df.loc[df["device"].str.startswith("API") & ~priced, "model"]))
    foot = [f"[{i + 1}] estimate: {n}" for i, n in enumerate(notes)]
    foot += [f"items: {name}: {basis}" for name, basis in sorted(datasets.items())]
    if unpriced:
        foot.append("no published price found, USD not counted (no `price` in the model entry nor in "
                    "lcae.prices): " + ", ".join(unpriced))
    foot.append("completion tokens are the requests' budgets (upper bounds); reasoning tokens are the hidden "
                "reasoning of reasoning models, billed as output (see the price table); "
                "hours = (prompt + completion + 3 x adapter-training tokens) / throughput_tok_s x GPUs; "
                "API batch hours = jobs x the batch completion window, time waited (upper bound), no device")
    return out + "\n\n" + "\n".join(f"- {line}" for line in foot) + "\n"


def render_prices(cfg: dict, df: pd.DataFrame) -> str:
    """Per API model of the plan: the price it is counted at and where it comes from, the
    hidden reasoning tokens per request and their basis, and its dollars in total; then one
    `unpriced: <model> (<why>)` line per API model whose dollars are not counted."""
    lines = ["| API model | USD / 1M in | USD / 1M out | batch | price source | reasoning tok / request | "
             "reasoning basis | USD |", "|---|---|---|---|---|---|---|---|"]
    api = df[df["device"].str.startswith("API")]
    unpriced = []
    for model in sorted(set(api["model"])):
        spec = model_entry(cfg, model)
        price = price_per_mtok(cfg, model)
        if "price" in spec:
            source = spec["price"]["source"]
        elif price is not None:
            source = "lcae.prices (the LCAE paper's price)"
        else:
            source = "**no published price found**: USD not counted"
            why = spec.get("unpriced", "no `price` in its model entry nor in lcae.prices")
            unpriced.append(f"unpriced: {model} ({why})")
        batch = "yes" if spec["batch"] and "batch_discount" in spec.get("price", {}) else "-"
        reasoning = reasoning_per_request(spec)
        usd = api.loc[api["model"] == model, "usd"].sum() if price else float("nan")
        cells = [f"{price[0]:g}", f"{price[1]:g}"] if price else ["-", "-"]
        lines.append(f"| {model} | {cells[0]} | {cells[1]} | {batch} | {source} | "
                     f"{reasoning[0] if reasoning else 0:,} | {reasoning[1] if reasoning else 'no reasoning'} | "
                     f"{'-' if not np.isfinite(usd) else f'{usd:,.2f}'} |")
    return "\n".join(lines + ([""] + unpriced if unpriced else [])) + "\n"
