"""The papers' datasets, one module per source, each doing what the paper and the authors'
public code do (persistent §A.4 and `conset/dataset_configs/`; LADDER's released MMLU pool;
MedXpertQA for LCAE).

Every loader reads its rows either from the Hugging Face hub (`hub_id`, `config_name`,
pinned `revision`) or from a local copy in the hub's own row schema (`path`), and returns
items in the item schema with `split` set to "icl" (reserved in-context examples, in the
order the prompt shows them), "train" or "test".
"""
