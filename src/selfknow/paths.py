"""Path templates of the workflow's files, relative to the config's `results`.

A template names its wildcards in braces ("{model}"). A rule's `output` keeps those it does
not fill (they are Snakemake's wildcards) and its input functions fill them all (`fill`), so
a path is written once: here for the shared stages, in `selfknow.protocols.<paper>.paths` for
each paper's files."""
from __future__ import annotations

import re

_FIELD = re.compile(r"\{(\w+)\}")

ITEMS = "items/{dataset}/{split}.parquet"
GENERATIONS = "generations/{model}/{ckpt}/greedy/{dataset}.parquet"
WORLD_DATA = "world/data/{name}.parquet"
WORLD_MODELS = "world/models/{family}"
JUDGMENTS = "judgments/llm_judge_audit.parquet"
SMOLLM2 = "models/smollm2"
#: a table's file (`ext`: csv, md, tex, html, json) and a figure
TABLE = "tables/{paper}/{name}.{ext}"
FIGURE = "figures/{paper}/{name}.png"


def fill(template: str, **values) -> str:
    """`template` with the fields `values` name filled in, the others left as wildcards; a
    value for a field the template lacks is an error (a path written for another template)."""
    unknown = set(values) - set(_FIELD.findall(template))
    if unknown:
        raise KeyError(f"{template!r} has no field {sorted(unknown)}")
    return _FIELD.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], template)
