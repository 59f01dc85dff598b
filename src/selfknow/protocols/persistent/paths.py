"""Path templates of the persistent jobs' files (`selfknow.paths`): the rules' outputs and the
input functions that read them (rules/persistent.smk, rules/persistent_common.smk)."""

#: a self-consistency table; `stage` "sc" (labelled) or "candidates" (before the LLM judge)
SC = "persistent/{stage}/{model}/{ckpt}/{dataset}/{split}.parquet"
BEAMS = "persistent/beams/{model}/{ckpt}/{dataset}/{split}.parquet"
CONF = "persistent/conf/{model}/{dataset}/{variant}/seed{seed}.parquet"
#: a variant's adapters ("gcm": our own GCM's)
ADAPTERS = "persistent/adapters/{model}/{dataset}/{variant}/seed{seed}"
HIDDEN = "persistent/hidden/{model}/{dataset}/seed{seed}.npz"
GCM = "persistent/gcm/{model}/{dataset}/seed{seed}.parquet"
GCM_RELEASED = "persistent/gcm/{model}/{dataset}/released.parquet"
METRICS = "persistent/metrics/{model}/{dataset}/{evalset}.parquet"
REPLICATES = "persistent/metrics/{model}/{dataset}/{evalset}.replicates.npz"
CONTRAST = "persistent/contrast/{model}/{dataset}/{evalset}.parquet"
#: the confidences evaluated, as plain records (`selfknow export-records`)
RECORDS = "persistent/records/{model}/{dataset}/{evalset}.parquet"
JUDGE_COUNTS = "persistent/judge/{model}/{dataset}/{evalset}.csv"
