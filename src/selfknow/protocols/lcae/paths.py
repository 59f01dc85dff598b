"""Path templates of the LCAE jobs' files (`selfknow.paths`): the rules' outputs and the input
functions that read them (rules/lcae.smk, rules/common.smk)."""

ITEMS = "lcae/items.parquet"
#: one examinee's records of `stage` "stage1" or "stage2"
STAGE = "lcae/{stage}/{model}/{ckpt}.parquet"
#: the joint Rasch fit: `part` "persons" or "items"
IRT = "lcae/irt/{part}.parquet"
STAGE3 = "lcae/stage3.parquet"
