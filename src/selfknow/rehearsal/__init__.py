"""The rehearsal: `config/paper.yaml` run end to end on this machine, offline, with every
external resource replaced by a local stand-in (`selfknow rehearse`).

- `data`: the hub datasets as local fixtures in each dataset's own row schema, read by the
  same loaders through their `path:` key;
- `hub`: tiny random-weight models of the paper models' architecture classes, with a byte-level
  BPE tokenizer trained on the fixtures, written into a Hugging Face cache in the hub's layout
  so the real `hub_id` + `revision` loading path runs under `HF_HUB_OFFLINE=1`;
- `server`: an OpenAI-compatible server on 127.0.0.1 for the API models and the judge;
- `harness`: builds the stand-ins, starts the server, runs Snakemake, always stops the server.
"""
