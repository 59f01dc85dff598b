"""Typed named inputs (`selfknow.protocols.persistent.inputs`): keys and paths survive the trip
into a script, the params Snakemake records for them are a function of their values only, and
in every job the input of a name lists exactly the paths of the mapping its script receives
under that name."""
import pickle

import pandas as pd

from conftest import REPO, dag_jobs
from selfknow.protocols.persistent import inputs as I
from selfknow.protocols.persistent.inputs import EvalFiles, Evaluation, MetricFiles, ScInput, ScTable
from selfknow.protocols.persistent.jobs import pooled_transfer

MIXED = {
    ScInput("main", "train", "c1"): "r/persistent/sc/m/c1/d/train.parquet",
    ScTable("m", "c2", "t", "test"): "r/persistent/sc/m/c2/t/test.parquet",
    Evaluation("m", "d", "transfer"): EvalFiles("r/metrics.parquet", "r/metrics.replicates.npz",
                                                "r/contrast.parquet", "r/judge.csv"),
    "m": MetricFiles("r/m.parquet", "r/m.replicates.npz"),
}


def test_keys_and_paths_round_trip_through_the_pickle_of_the_script_preamble():
    back = pickle.loads(pickle.dumps(MIXED))
    assert back == MIXED
    assert [type(k) for k in back] == [type(k) for k in MIXED]
    assert [type(v) for v in back.values()] == [type(v) for v in MIXED.values()]
    key = next(iter(back))
    assert (key.dataset, key.split, key.checkpoint) == ("main", "train", "c1")
    assert back[Evaluation("m", "d", "transfer")].judge == "r/judge.csv"


def test_recorded_params_are_the_repr_of_the_values_alone():
    """Snakemake records a param as its repr and reruns a job whose recorded params differ: the
    repr must rebuild an equal mapping (no object identity in it), so an unchanged config
    records the same params on every run."""
    text = repr(MIXED)
    assert eval(text, vars(I)) == MIXED  # noqa: S307 (our own repr, the point of the test)
    assert " at 0x" not in text
    changed = {**MIXED, ScInput("main", "train", "c1"): "r/elsewhere.parquet"}
    assert repr(changed) != text


def test_input_paths_flattens_the_mapping_the_params_get():
    seen = []

    def get_inputs(wildcards):
        seen.append(wildcards)
        return MIXED

    assert I.input_paths(get_inputs)("w") == [
        "r/persistent/sc/m/c1/d/train.parquet", "r/persistent/sc/m/c2/t/test.parquet", "r/metrics.parquet",
        "r/metrics.replicates.npz", "r/contrast.parquet", "r/judge.csv", "r/m.parquet", "r/m.replicates.npz"]
    assert seen == ["w"]
    assert I.paths_of({}) == []


def test_pooled_transfer_concatenates_each_checkpoint_splits_in_the_given_order():
    def sc(*ids):
        return pd.DataFrame({"item_id": list(ids)})

    got = pooled_transfer({ScInput("main", "test", "c1"): sc("m1"), ScInput("transfer", "train", "c1"): sc("a", "b"),
                           ScInput("transfer", "test", "c2"): sc("e"), ScInput("transfer", "test", "c1"): sc("c")})
    assert list(got) == ["c1", "c2"]
    assert got["c1"]["item_id"].tolist() == ["a", "b", "c"] and got["c2"]["item_id"].tolist() == ["e"]


def _typed(value) -> bool:
    return isinstance(value, dict) and any(hasattr(x, "_fields") for kv in value.items() for x in kv)


def test_every_typed_param_lists_exactly_the_input_of_its_name(tmp_path):
    checked = set()
    for job in dag_jobs(REPO / "config" / "test.yaml", tmp_path / "results"):
        for name, value in job.params.items():
            if _typed(value):
                assert name in job.input.keys(), f"{job}: params.{name} without an input {name}"
                assert list(getattr(job.input, name)) == I.paths_of(value), f"{job}: input {name} != params {name}"
                checked.add(job.rule.name)
    assert checked >= {"persistent_variant", "persistent_transfer_variant", "persistent_variance_adapters",
                       "persistent_gcm", "persistent_metrics", "persistent_judge_counts", "persistent_reliability",
                       "persistent_table1", "persistent_table10", "persistent_table7", "persistent_figure2",
                       "knowledge_card"}
