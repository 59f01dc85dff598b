"""Every config error stops with one message naming the key (issue: foundation, item 2)."""
import copy
import pickle
import subprocess
import sys

import jsonschema
import pytest
import yaml

from selfknow.config import ConfigError, checkpoint_names, load_config, model_spec, resolve_paths, validate_config
from selfknow.schema import UndefinedConfigKey, load_schema, subschema
from selfknow.world.generator import DEFAULT_WORLD
from selfknow.world.trainer import DEFAULT_FAMILY

from conftest import REPO


@pytest.fixture()
def cfg():
    return yaml.safe_load((REPO / "config.yaml").read_text())


def _err(cfg) -> str:
    with pytest.raises(ConfigError) as e:
        validate_config(cfg, "cfg.yaml")
    return str(e.value)


@pytest.mark.parametrize("path", ["config.yaml", "config/test.yaml", "config/paper.yaml"])
def test_shipped_configs_validate(path):
    load_config(REPO / path)


def test_unknown_backend(cfg):
    cfg["models"][0]["backend"] = "hff"
    msg = _err(cfg)
    assert "cfg.yaml: models[0].backend" in msg and "hff" in msg


def test_missing_path(cfg):
    cfg["models"].append({"name": "x", "backend": "hf"})
    assert "models[3]: missing path" in _err(cfg)


def test_nonexistent_local_path(cfg, tmp_path):
    cfg["models"].append({"name": "x", "backend": "hf", "path": str(tmp_path / "nope")})
    assert "models[x].path" in _err(cfg) and "does not exist" in _err(cfg)  # named, not models[3]


def test_gpus_follow_where_a_model_runs(cfg):
    """Jobs are placed by their models' `gpu` (selfknow.placement): a CUDA model must ask for
    GPUs, and an API model for none."""
    cfg["models"].append({"name": "x", "backend": "hf", "hub_id": "org/x", "device": "cuda"})
    assert "models[3]: 'device: cuda' needs 'gpu' >= 1" in _err(cfg)
    cfg["models"][-1] = {"name": "x", "backend": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m", "gpu": 1}
    assert "models[3]: an openai model holds no GPU; 'gpu' must be 0, got 1" in _err(cfg)


def test_duplicate_model_name(cfg):
    cfg["models"].append(copy.deepcopy(cfg["models"][0]))
    assert "duplicate model name 'wm-small'" in _err(cfg)


def test_empty_checkpoint_list(cfg):
    cfg["models"].append({"name": "x", "backend": "hf", "hub_id": "org/x", "checkpoints": []})
    msg = _err(cfg)
    assert "models[3].checkpoints" in msg


def test_dataset_papers_do_not_define(cfg):
    cfg["datasets"]["squad"] = {"loader": "squad"}
    msg = _err(cfg)
    assert "datasets.squad.loader" in msg


def test_typo_key(cfg):
    cfg["persistent"]["min_contrats"] = 3
    assert "unknown key 'persistent.min_contrats'" in _err(cfg)


def test_gcm_training_overrides_adapter_keys_and_refuses_others(cfg):
    cfg["persistent"]["adapter"] = {"epochs": 5, "lr": 0.1}
    cfg["persistent"]["gcm_training"] = {"lr": 0.3}
    gcm = validate_config(copy.deepcopy(cfg))["persistent"]["gcm_training"]
    assert gcm["epochs"] == 5 and gcm["lr"] == 0.3 and gcm["r"] == subschema("persistent.adapter")["properties"]["r"]["default"]
    cfg["persistent"]["gcm_training"] = {"epoch": 3}
    assert "unknown key 'persistent.gcm_training.epoch'" in _err(cfg)


def test_typo_top_level_key(cfg):
    cfg["modles"] = []
    assert "unknown key 'modles'" in _err(cfg)


def test_protocol_names_unknown_model(cfg):
    cfg["ladder"]["models"].append("gpt-9")
    assert "ladder.models[2]: unknown model 'gpt-9'" in _err(cfg)


def test_protocol_names_unknown_dataset(cfg):
    cfg["persistent"]["datasets"] = ["triviaqa"]
    assert "persistent.datasets[0]: unknown dataset 'triviaqa'" in _err(cfg)


def test_world_and_judge_datasets_must_exist(cfg):
    cfg["world"]["qa_dataset"] = "world_q"
    assert "world.qa_dataset: unknown dataset 'world_q'" in _err(cfg)
    del cfg["world"]["qa_dataset"]
    cfg["judge"]["audit_dataset"] = "trivia"
    assert "judge.audit_dataset: unknown dataset 'trivia'" in _err(cfg)


def test_domain_shard_only_on_world_qa(cfg):
    cfg["datasets"]["world_mcq"]["domain_shard"] = [0, 2]
    assert "datasets.world_mcq.domain_shard: only the world_qa loader" in _err(cfg)
    del cfg["datasets"]["world_mcq"]["domain_shard"]
    cfg["datasets"]["world_qa_a"]["domain_shard"] = [0]
    assert "datasets.world_qa_a.domain_shard" in _err(cfg)


def test_openai_needs_base_url(cfg):
    cfg["models"].append({"name": "api", "backend": "openai", "model": "gpt"})
    assert "needs 'base_url'" in _err(cfg)


def test_a_completions_mode_api_model_is_a_base_model_to_the_protocols_and_its_backend(cfg):
    from selfknow.config import is_chat
    from selfknow.models import load_lm
    from selfknow.protocols.lcae.jobs import stage2_repeats_shared

    api = {"name": "api", "backend": "openai", "model": "gpt", "base_url": "http://127.0.0.1:9/v1"}
    cfg["models"] += [api, {**api, "name": "base-api", "mode": "completions"},
                      {**api, "name": "resp", "mode": "responses"}, {**api, "name": "said", "chat": True}]
    models = {m["name"]: m for m in validate_config(cfg, "cfg.yaml")["models"]}
    assert [is_chat(models[n]) for n in ("api", "base-api", "resp", "said")] == [True, False, True, True]
    assert not is_chat(models["smollm2"] | {"chat": False}) and is_chat(models["smollm2"])
    # an entry the schema has not filled yet reads the schema's default mode, chat; hf: raw unless told
    assert is_chat({"name": "x", "backend": "openai"}) and not is_chat({"name": "x", "backend": "hf"})
    for name in ("api", "base-api"):
        lm = load_lm(dict(models[name]), cache_dir=None)
        assert lm.chat_default is is_chat(models[name])
    # the base API model's raw prompt goes to the completions endpoint, as the protocols send it
    endpoint, body = lm.request_body("Question: x\nAnswer:", chat=lm._use_chat(False), system=None,
                                     max_tokens=4, temperature=0.0, stop=None, sample_index=0)
    assert endpoint == "/completions" and body["prompt"] == "Question: x\nAnswer:"
    # LCAE: a base model's Stage-2 assessment reads log-likelihoods, so its repeats are one request
    assert stage2_repeats_shared(models["base-api"], 0.0) and not stage2_repeats_shared(models["api"], 0.0)


def test_ladder_user_models_and_tiers_are_checked(cfg):
    cfg["ladder"]["user_models"] = {"wm-small": "smollm2"}
    cfg["ladder"]["tiers"] = {"wm-small": {"strong": ["d0"], "mid": ["d1"], "weak": ["d2"]}}
    validate_config(copy.deepcopy(cfg), "cfg.yaml")
    other = copy.deepcopy(cfg)
    other["ladder"]["user_models"] = {"not-in-the-panel": "gpt-9"}   # unused outside the panel
    validate_config(other, "cfg.yaml")
    bad = copy.deepcopy(cfg)
    bad["ladder"]["user_models"] = {"wm-small": "gpt-9"}
    assert "ladder.user_models.wm-small" in _err(bad)
    cfg["ladder"]["tiers"]["wm-small"]["weak"] = ["d2", "d0"]
    assert "cfg.yaml: ladder.tiers.wm-small: domain 'd0' is in more than one tier" in _err(cfg)


def test_a_base_api_model_in_ladder_or_lcae_needs_prompt_log_probabilities(cfg):
    base = {"name": "api", "backend": "openai", "model": "gpt", "base_url": "http://x/v1", "mode": "completions"}
    cfg["models"].append(base)
    cfg["ladder"]["models"].append("api")
    k = len(cfg["ladder"]["models"]) - 1
    assert (f"cfg.yaml: ladder.models[{k}]: model 'api' (openai) has no log-probabilities for LADDER's cloze "
            f"answers (option log-likelihoods): set 'echo_logprobs: true'") in _err(copy.deepcopy(cfg))
    base["echo_logprobs"] = True
    validate_config(copy.deepcopy(cfg), "cfg.yaml")
    cfg["lcae"]["examinee_models"].append("api")
    k = len(cfg["lcae"]["examinee_models"]) - 1
    assert (f"cfg.yaml: lcae.examinee_models[{k}]: model 'api' (openai) has no log-probabilities for LCAE's "
            f"tree-of-thought branches (lcae.strategies: tot): an OpenAI-compatible API exposes no beams"
            ) in _err(copy.deepcopy(cfg))
    cfg["lcae"]["strategies"] = ["standard", "cot"]
    validate_config(cfg, "cfg.yaml")


@pytest.mark.parametrize("entry, said", [
    ({"mode": "completions", "chat": True}, "'chat: true' contradicts 'mode: completions'"),
    ({"chat": False}, "'chat: false' contradicts 'mode: chat'")])
def test_an_api_models_chat_must_agree_with_its_endpoint(cfg, entry, said):
    cfg["models"].append({"name": "api", "backend": "openai", "model": "gpt", "base_url": "http://x/v1", **entry})
    assert f"cfg.yaml: models[{len(cfg['models']) - 1}]: {said}" in _err(cfg)


def test_gcm_model_must_have_weights(cfg):
    cfg["models"].append({"name": "api", "backend": "openai", "model": "gpt", "base_url": "http://x/v1"})
    cfg["persistent"]["gcm_model"] = "api"
    assert "persistent.gcm_model: 'api' is an openai model" in _err(cfg)


def test_a_log_probability_method_on_a_model_without_them_stops_at_load(cfg):
    api = {"name": "api", "backend": "openai", "model": "gpt", "base_url": "http://x/v1",
           "checkpoints": [{"name": f"c{k}"} for k in range(6)]}
    judged = copy.deepcopy(cfg)
    cfg["models"].append(api)
    cfg["persistent"]["models"] = ["api"]
    assert ("cfg.yaml: persistent.models[0]: model 'api' (openai) has no log-probabilities for "
            "self-consistency over beam search: an OpenAI-compatible API exposes no beams") in _err(cfg)
    # an API judge that generates its labels needs none; constrained labels read label scores
    judged["models"].append(api)
    judged["judge"]["llm_judge"] = "api"
    judged["judge"]["audit_labels"] = ["generate"]
    validate_config(copy.deepcopy(judged), "cfg.yaml")
    judged["judge"]["audit_labels"] = ["generate", "constrained"]
    assert "judge.llm_judge: model 'api' (openai) has no log-probabilities for constrained judge labels" \
        in _err(judged)


def test_model_request_options_in_the_schema_match_the_backend():
    from selfknow.models.base import BUDGET_STAGES
    from selfknow.models.openai_api import REQUEST_OPTION_DEFAULTS, REQUEST_PRESETS

    model = subschema("models.*")["properties"]
    assert set(model["token_budgets"]["properties"]) == set(BUDGET_STAGES)
    assert model["request_preset"]["enum"] == sorted(REQUEST_PRESETS)
    assert set(REQUEST_OPTION_DEFAULTS) <= set(model)
    for preset in REQUEST_PRESETS.values():
        jsonschema.validate(preset, {"type": "object", "properties": {k: model[k] for k in preset}})


def test_world_checkpoints_and_spec(cfg):
    cfg = validate_config(cfg)
    names = checkpoint_names(cfg, "wm-small")
    assert names == ["phase1", "phase2", "phase3", "phase4", "phase5", "phase6"]  # one per curriculum phase
    cfg["world"]["generator"]["n_phases"] = 4
    assert checkpoint_names(cfg, "wm-small")[-1] == "phase4"
    spec = model_spec(cfg, "wm-small", "out")
    assert spec["checkpoints"][0]["path"] == "out/world/models/wm-small/phase1"
    assert "source" not in spec


def test_world_typo_keys(cfg):
    cfg["world"]["families"]["wm-small"]["n_layers"] = 3
    assert "unknown key 'world.families.wm-small.n_layers'" in _err(cfg)
    del cfg["world"]["families"]["wm-small"]["n_layers"]
    cfg["world"]["generator"]["n_domain"] = 3
    assert "unknown key 'world.generator.n_domain'" in _err(cfg)


def test_bad_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("models: [\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(p)


# -- one source of defaults: the schema --------------------------------------------------------

def test_defaults_are_filled_from_the_schema_and_derived_ones_from_their_key(cfg):
    minimal = {"seed": 1, "models": cfg["models"], "datasets": cfg["datasets"],
               "world": {"seed": 0, "families": cfg["world"]["families"]},
               "persistent": {"models": ["wm-small"], "datasets": ["world_qa_a"], "seeds": [3, 4],
                              "bootstrap_replicates": 77},
               "ladder": {"models": ["wm-small"], "dataset": "world_mcq", "n_sessions": 9}}
    out = validate_config(copy.deepcopy(minimal))
    for key in ("n_train", "min_contrast", "min_contrast_transfer", "train_checkpoints", "num_beams"):
        assert out["persistent"][key] == subschema(f"persistent.{key}")["default"]
    assert out["persistent"]["variance_seeds"] == [3, 4]            # default: seeds
    assert out["persistent"]["bootstrap_ece_replicates"] == 77      # default: bootstrap_replicates
    assert out["persistent"]["gcm_training"] == out["persistent"]["adapter"]   # default: adapter
    assert out["ladder"]["lsa_query_sessions"] == 9                 # default: n_sessions
    assert out["judge"]["audit_dataset"] == "world_qa_a"            # default: the first persistent dataset
    assert out["world"]["qa_dataset"] == "world_qa_a"
    assert out["report"]["decimals"] == 3 and out["results"] == "results"
    assert out["world"]["generator"] == {k: v for k, v in DEFAULT_WORLD.items() if k != "seed"}
    assert out["world"]["families"]["wm-small"] == {**DEFAULT_FAMILY, **cfg["world"]["families"]["wm-small"]}
    assert "transfer_dataset" not in out["persistent"] and "lcae" not in out   # no default: stays absent


@pytest.mark.parametrize("path", ["config.yaml", "config/test.yaml", "config/paper.yaml"])
def test_filled_configs_still_satisfy_the_schema(path):
    filled = load_config(REPO / path)
    jsonschema.Draft202012Validator(load_schema()).validate(pickle.loads(pickle.dumps(filled)))


def test_code_reading_a_key_the_schema_does_not_define_fails(cfg):
    out = validate_config(cfg)
    with pytest.raises(UndefinedConfigKey, match="'persistent.n_tset'"):
        out["persistent"]["n_tset"]
    with pytest.raises(UndefinedConfigKey, match="'ladder.n_session'"):
        out["ladder"].get("n_session", 50)
    with pytest.raises(UndefinedConfigKey, match="'generations'"):
        "generations" in out
    with pytest.raises(UndefinedConfigKey, match="'models\\[0\\].gpus'"):
        out["models"][0]["gpus"]
    assert "gcm_model" in out["persistent"] and "partition" not in out["ladder"]   # defined keys
    assert "any-name" not in out["datasets"]                                     # a mapping of names
    for copy_ in (copy.deepcopy(out), pickle.loads(pickle.dumps(out))):         # as rules pass it to jobs
        with pytest.raises(UndefinedConfigKey):
            copy_["lcae"]["n_item"]
        assert copy_ == out


def test_a_rule_reading_a_key_the_schema_does_not_define_stops_the_workflow(tmp_path):
    (tmp_path / "Snakefile").write_text(f"""
configfile: "{REPO / 'config' / 'test.yaml'}"
include: "{REPO / 'rules' / 'common.smk'}"
rule typo:
    output: "x"
    params: n=config["persistent"]["n_tset"]
    shell: "touch {{output}}"
""")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", str(tmp_path / "Snakefile"),
                           "--directory", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "config key 'persistent.n_tset' is read by the code but not defined" in proc.stdout + proc.stderr


def test_stand_ins_keep_the_named_models_with_their_changes_and_every_other_setting(cfg):
    """An overlay's `stand_ins` (config/rehearsal.yaml) keeps only the models it names, in the
    base config's order, each with its changed keys; a null key takes the schema's default."""
    gpu = {"backend": "hf", "hub_id": "org/x", "device": "cuda", "gpu": 1, "dtype": "bfloat16",
           "checkpoints": [{"name": "a", "revision": "ra"}, {"name": "b", "revision": "rb"}]}
    cfg["models"] += [{"name": "x", **gpu}, {"name": "y", **gpu}]
    kept = [m["name"] for m in cfg["models"] if m["name"] != "y"]
    cfg["stand_ins"] = {"x": {"device": None, "gpu": None, "checkpoints": gpu["checkpoints"][:1]},
                        **{n: {} for n in reversed(kept[:-1])}}
    out = validate_config(cfg, "overlay.yaml")
    assert [m["name"] for m in out["models"]] == kept
    x = out["models"][-1]
    assert (x["device"], x["gpu"], x["dtype"], x["hub_id"]) == ("cpu", 0, "bfloat16", "org/x")
    assert [c["name"] for c in x["checkpoints"]] == ["a"]
    assert "stand_ins" not in out


@pytest.mark.parametrize("stand_ins, said", [
    ({"nope": {}}, "overlay.yaml: stand_ins.nope: no model of that name in models"),
    ({"smollm2": {"name": "smollm3"}}, "overlay.yaml: stand_ins: a stand-in cannot rename its model"),
    ({"smollm2": "local"}, "overlay.yaml: stand_ins: must map model names to mappings"),
])
def test_a_bad_stand_in_names_the_key(cfg, stand_ins, said):
    cfg["stand_ins"] = stand_ins
    with pytest.raises(ConfigError, match=said):
        validate_config(cfg, "overlay.yaml")


# ----------------------------------------------------------------------------- relative paths
def _with_local_model(model: dict, **datasets) -> dict:
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["models"].append({"name": "local", "backend": "hf", **model})
    cfg["datasets"].update(datasets)
    return cfg


def test_a_relative_path_is_read_from_its_config_files_folder(tmp_path, monkeypatch):
    """Issue 50: a relative `path:` in a config file names a file beside that config, wherever
    the command runs; an absolute one is kept."""
    mine = tmp_path / "mine"
    for d in ("weights/early", "weights/late", "data", "elsewhere"):
        (mine / d).mkdir(parents=True)
    cfg = _with_local_model({"path": "weights/late", "checkpoints": [
        {"name": "early", "path": str(mine / "weights" / "early")}, {"name": "late", "path": "./data/../weights/late"}]},
        own_mcq={"loader": "mmlu", "path": "data/mcq.jsonl", "subjects": ["x"], "subject_range": [0, 5]})
    (mine / "mine.yaml").write_text(yaml.safe_dump(cfg))

    monkeypatch.chdir(mine / "elsewhere")
    out = load_config("../mine.yaml")
    local = out["models"][-1]
    assert local["path"] == str(mine / "weights" / "late")
    assert [c["path"] for c in local["checkpoints"]] == [str(mine / "weights" / "early"), str(mine / "weights" / "late")]
    assert out["datasets"]["own_mcq"]["path"] == str(mine / "data" / "mcq.jsonl")
    # inside the working directory a path stays relative to it: a clone elsewhere (a copied
    # results directory beside it) gives its jobs the same params
    monkeypatch.chdir(tmp_path)
    assert load_config("mine/mine.yaml")["models"][-1]["path"] == "mine/weights/late"


def test_a_missing_relative_path_names_the_key_and_where_it_was_looked_for(tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(_with_local_model({"path": "weights/nope"})))
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "mine.yaml")
    assert str(e.value) == f"{tmp_path / 'mine.yaml'}: models[local].path: {tmp_path / 'weights' / 'nope'} does not exist"


def test_a_path_given_on_the_command_line_stays_relative_to_the_working_directory(tmp_path):
    """Snakemake's --config values come from no file: only the values a file set are read from
    its folder (a later file's value wins, as in Snakemake's merge)."""
    first, second = tmp_path / "a" / "c.yaml", tmp_path / "b" / "c.yaml"
    for f, value in ((first, "sessions"), (second, "released")):
        f.parent.mkdir()
        f.write_text(yaml.safe_dump({"ladder_import_dir": value}))
    assert resolve_paths({"ladder_import_dir": "released"}, [first, second]) == \
        {"ladder_import_dir": str(tmp_path / "b" / "released")}
    assert resolve_paths({"ladder_import_dir": "sessions"}, [first, second]) == {"ladder_import_dir": "sessions"}
    assert resolve_paths({"ladder_import_dir": "mine"}, [first, second]) == {"ladder_import_dir": "mine"}


def test_the_checked_in_configs_point_at_the_files_they_did(tmp_path, monkeypatch):
    """config/paper.yaml's and config/rehearsal.yaml's paths, read from their folder, name the
    files in the repository they named before; the merged config the rehearsal writes under
    another folder names them too."""
    from selfknow.rehearsal.harness import CONFIGFILES, load_config as load_merged, resolved_config

    monkeypatch.chdir(REPO)
    assert load_config("config/paper.yaml", check_paths=False)["datasets"]["bioasq"]["path"] == \
        "data/bioasq/training14b.json"
    merged = {n: d["path"] for n, d in load_merged(check_paths=False)["datasets"].items()}
    overlay = yaml.safe_load((REPO / CONFIGFILES[-1]).read_text())["datasets"]
    assert merged == {n: d["path"].replace("../.rehearsal/", ".rehearsal/", 1) for n, d in overlay.items()}
    assert all(p.startswith(".rehearsal/data/") for p in merged.values())
    written = tmp_path / "config.yaml"
    written.write_text(yaml.safe_dump(resolved_config(CONFIGFILES, 18431, "http://127.0.0.1:1/v1", tmp_path)))
    assert {n: d["path"] for n, d in load_config(written, check_paths=False)["datasets"].items()} == merged


def test_the_workflow_reads_each_config_files_paths_from_that_files_folder(tmp_path):
    """`snakemake --configfile a/base.yaml b/over.yaml`, run from another directory than the
    workflow's: the model `path:` the second file sets is looked for beside it."""
    base = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    for name, content in (("a/base.yaml", {**base, "results": str(tmp_path / "results")}),
                          ("b/over.yaml", {"models": base["models"] + [{"name": "local", "backend": "hf",
                                                                         "path": "weights"}]})):
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(yaml.safe_dump(content))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(REPO), "--configfile", "a/base.yaml", "b/over.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"models[local].path: {tmp_path / 'b' / 'weights'} does not exist" in proc.stdout + proc.stderr
