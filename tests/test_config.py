"""Every config error stops with one message naming the key (issue: foundation, item 2)."""
import copy

import pytest
import yaml

from selfknow.config import ConfigError, checkpoint_names, load_config, model_spec, validate_config

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
    assert "models[3].path" in _err(cfg) and "does not exist" in _err(cfg)


def test_duplicate_model_name(cfg):
    cfg["models"].append(copy.deepcopy(cfg["models"][0]))
    assert "duplicate model name 'wm-small'" in _err(cfg)


def test_empty_checkpoint_list(cfg):
    cfg["models"].append({"name": "x", "backend": "hf", "hub_id": "org/x", "checkpoints": []})
    msg = _err(cfg)
    assert "models[3].checkpoints" in msg


def test_dataset_papers_do_not_define(cfg):
    cfg["datasets"]["gsm8k"] = {"loader": "gsm8k"}
    msg = _err(cfg)
    assert "datasets.gsm8k.loader" in msg


def test_typo_key(cfg):
    cfg["persistent"]["min_contrats"] = 3
    assert "unknown key 'persistent.min_contrats'" in _err(cfg)


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


def test_gcm_model_must_have_weights(cfg):
    cfg["models"].append({"name": "api", "backend": "openai", "model": "gpt", "base_url": "http://x/v1"})
    cfg["persistent"]["gcm_model"] = "api"
    assert "persistent.gcm_model: 'api' is an openai model" in _err(cfg)


def test_world_checkpoints_and_spec(cfg):
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
