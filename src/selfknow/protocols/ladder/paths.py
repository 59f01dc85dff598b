"""Path templates of the LADDER jobs' files (`selfknow.paths`): the rules' outputs and the input
functions that read them (rules/ladder*.smk)."""

ANSWERS = "ladder/sessions/{model}/answers.parquet"
#: the checkpointed parts of a resumable job (`answers`: the answers job's)
PARTS = "ladder/sessions/{model}/parts"
ANSWER_PARTS = "ladder/sessions/{model}/parts/answers"
#: a run of sessions: `run` "main" (the configured user) or "alt_user" (the LLM user)
SESSIONS = "ladder/sessions/{model}/{run}.parquet"
#: the prompted levels: `part` "profiles" or "query"
PROMPTED = "ladder/prompted/{model}/{part}.parquet"
#: a score part (catalog.SCORE_PARTS) or "optimisation" (Table 18)
SCORES = "ladder/scores/{model}/{part}.parquet"
#: a cross-task suite's `part`, "answers" or "prior"
CROSSTASK = "ladder/crosstask/{suite}/{model}/{part}.parquet"
EXTENSION = "ladder/extension/{model}/records.parquet"
#: a ReAct configuration's directory, and its records (`part` "test" or "zero_shot")
REACT = "ladder/react/{model}/{react_config}"
REACT_RECORDS = "ladder/react/{model}/{react_config}/{part}.jsonl"
