# LADDER's extension tasks (§F.1-F.2, Table 32): input functions and constants; the rules are in
# rules/ladder_extension.smk.
from selfknow.protocols.ladder.extension import TASKS as EXTENSION_TASKS

EXT = LAD["extension"]


def extension_task_setting(key):
    """One setting of each task, {task: value} (None where the task leaves it out)."""
    return {t: EXT[t][key] if key in EXT[t] else None for t in EXTENSION_TASKS}


def get_extension_items(wildcards):
    return {t: rpath(SP.ITEMS, dataset=EXT[t]["dataset"], split="test") for t in EXTENSION_TASKS}


def extension_record_files():
    return [rpath(LDP.EXTENSION, model=m) for m in EXT["models"]]


def extension_loaders():
    """Each task's dataset loader (a synthetic_* loader marks an offline analogue in the note)."""
    return {t: config["datasets"][EXT[t]["dataset"]]["loader"] for t in EXTENSION_TASKS}
