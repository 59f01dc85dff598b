"""LADDER's cross-task priors (paper §E.1, Tables 14 and 15): the table reproduces a column of the
paper's Table 15 from its item counts and priors, answers are scored as each benchmark scores
them, and the job asks the L1 prompt over the suite's categories / tasks."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from fakes import ScriptedLM
from selfknow.config import ConfigError, validate_config
from selfknow.protocols.ladder import crosstask as X
from selfknow.protocols.ladder.prompted import MODEL_LEVEL, PROFILE_COLUMNS
from selfknow.records import read_parquet, write_parquet
from selfknow.stages.items import load_source

from conftest import REPO

# Table 15, Claude-Sonnet-4-6: accuracy on 15 questions per task (as correct counts) and the prior
BBH_SONNET = {"boolean_expressions": (15, 0.88), "causal_judgement": (11, 0.60), "date_understanding": (15, 0.82),
              "logical_deduction_five_objects": (15, 0.65), "navigate": (15, 0.76), "object_counting": (15, 0.84),
              "ruin_names": (13, 0.56), "sports_understanding": (15, 0.90),
              "tracking_shuffled_objects_three_objects": (15, 0.73), "word_sorting": (0, 0.80)}


def _answers(model: str, counts: dict[str, tuple[int, int, int]]) -> pd.DataFrame:
    """Answers of `model`: per domain (correct, wrong, unparsed) counts."""
    rows = []
    for d, (ok, bad, unp) in counts.items():
        for k, (status, correct) in enumerate([("ok", True)] * ok + [("ok", False)] * bad + [("unparsed", False)] * unp):
            rows.append({"model": model, "suite": "bbh", "item_id": f"{d}-{k}", "domain": d, "reference": "x",
                         "response": "", "parsed": None if status == "unparsed" else "x", "status": status,
                         "correct": correct})
    return pd.DataFrame(rows, columns=X.ANSWER_COLUMNS)


def _prior(model: str, zs: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame([{"model": model, "method": "zs_prior", "session_id": MODEL_LEVEL, "domain": d, "p_hat": p,
                          "filled": False, "parse_status": "ok", "raw_response": ""} for d, p in zs.items()],
                        columns=PROFILE_COLUMNS)


def test_table15_claude_sonnet_column_is_reproduced():
    answers = _answers("claude-sonnet-4-6", {d: (k, 15 - k, 0) for d, (k, _) in BBH_SONNET.items()})
    prior = _prior("claude-sonnet-4-6", {d: z for d, (_, z) in BBH_SONNET.items()})
    t = X.prior_table(answers, prior, list(BBH_SONNET), "exclude").set_index("domain")
    # the paper's CBF 0.734, and its headline: word sorting estimated at .80 with accuracy .00
    assert t.loc["CBF", "claude-sonnet-4-6 acc"] == pytest.approx(0.734, abs=5e-4)
    assert t.loc["word_sorting", "claude-sonnet-4-6 acc"] == 0.0
    assert t.loc["word_sorting", "claude-sonnet-4-6 ZS"] == pytest.approx(0.80)
    assert t.loc["word_sorting", "claude-sonnet-4-6 error"] == pytest.approx(0.80)
    assert t.loc["causal_judgement", "claude-sonnet-4-6 acc"] == pytest.approx(11 / 15)
    assert t.loc["unparsed", "claude-sonnet-4-6 acc"] == 0
    assert list(t.index) == list(BBH_SONNET) + ["mean", "unparsed", "CBF"]


def test_unparsed_answers_are_left_out_or_counted_wrong():
    # a: 2 right, 1 wrong, 1 unparsed; b: 1 right, 2 wrong, 0 unparsed; priors .5 and .5
    answers = _answers("m", {"a": (2, 1, 1), "b": (1, 2, 0)})
    prior = _prior("m", {"a": 0.5, "b": 0.5})
    ex = X.prior_table(answers, prior, ["a", "b"], "exclude").set_index("domain")
    wr = X.prior_table(answers, prior, ["a", "b"], "wrong").set_index("domain")
    assert ex.loc["a", "m acc"] == pytest.approx(2 / 3) and wr.loc["a", "m acc"] == pytest.approx(2 / 4)
    assert ex.loc["unparsed", "m acc"] == wr.loc["unparsed", "m acc"] == 1
    # CBF = 1 - mean(|.5 - 2/3|, |.5 - 1/3|) = 1 - 1/6; counted wrong: 1 - mean(0, 1/6)
    assert ex.loc["CBF", "m acc"] == pytest.approx(1 - 1 / 6)
    assert wr.loc["CBF", "m acc"] == pytest.approx(1 - 1 / 12)
    with pytest.raises(ValueError, match="unparsed must be one of"):
        X.domain_rows(answers, prior, "drop")


def _mcq_items() -> pd.DataFrame:
    return pd.DataFrame({"item_id": ["1", "2", "3"], "domain": ["law", "law", "math"],
                         "question": ["Q1?", "Q2?", "Q3?"],
                         "choices": [[f"o{k}" for k in range(10)], ["yes", "no"], ["1", "2", "3", "4"]],
                         "answer": ["J", "A", "C"], "aliases": [["J"], ["A"], ["C"]]})


def test_a_chat_model_answers_mcq_with_mmlu_pro_extraction():
    replies = {"Q1?": "Ten options... The answer is (J).", "Q2?": "no idea.", "Q3?": "The answer is (B)."}
    lm = ScriptedLM(lambda p: next(v for k, v in replies.items() if k in p))
    out = X.answer_suite(lm, _mcq_items(), "mmlu_pro", chat=True, max_new_tokens=64, bbh_lenient=False)
    assert list(out["parsed"].fillna("-")) == ["J", "-", "B"] and list(out["correct"]) == [True, False, False]
    assert list(out["status"]) == ["ok", "unparsed", "ok"]
    assert "J. o9" in lm.prompts[0] and 'finish with "The answer is (X)"' in lm.prompts[0]


def test_a_base_lm_answers_mcq_by_cloze():
    # the option text the items' answers point to is the likeliest continuation
    right = {"o9", "yes", "3"}
    lm = ScriptedLM(lambda p: "", loglik=lambda c, x: 0.0 if x.strip() in right else -5.0)
    out = X.answer_suite(lm, _mcq_items(), "world_mcq", chat=False, max_new_tokens=64, bbh_lenient=False)
    assert list(out["parsed"]) == ["J", "A", "C"] and out["correct"].all()


def test_free_form_answers_are_scored_by_bbh_exact_match_or_world_aliases():
    bbh_items = pd.DataFrame({"item_id": ["w-0", "d-0", "d-1"], "domain": ["word_sorting", "date_understanding",
                                                                             "date_understanding"],
                              "question": ["Sort: b a", "Date 1?", "Date 2?"], "choices": [None] * 3,
                              "answer": ["a b", "(D)", "(A)"], "aliases": [["a b"], ["(D)"], ["(A)"]]})
    replies = {"Sort": "So the answer is a, b.", "Date 1": "So the answer is D.", "Date 2": "no idea"}
    lm = ScriptedLM(lambda p: next(v for k, v in replies.items() if k in p))
    # lm-eval's exact match: "a, b" is not "a b", nor "D" "(D)"; the lenient normaliser accepts both
    out = X.answer_suite(lm, bbh_items, "bbh", chat=True, max_new_tokens=64, bbh_lenient=False)
    assert list(out["correct"]) == [False, False, False] and list(out["status"]) == ["ok", "ok", "unparsed"]
    assert list(out["parsed"])[:2] == ["a, b", "D"]
    out = X.answer_suite(lm, bbh_items, "bbh", chat=True, max_new_tokens=64, bbh_lenient=True)
    assert list(out["correct"]) == [True, True, False] and list(out["status"]) == ["ok", "ok", "unparsed"]
    world = pd.DataFrame({"item_id": ["q1", "q2"], "domain": ["zoo", "zoo"], "question": ["Who named the owl?",
                                                                                          "Where does the fox live?"],
                          "choices": [None, None], "answer": ["Bram", "Kel"],
                          "aliases": [["Bram", "Master Bram"], ["Kel", "the Kel Forest"]]})
    base = ScriptedLM(lambda p: " Master Bram\nQuestion: ..." if "owl" in p else " Tor")
    out = X.answer_suite(base, world, "world_qa", chat=False, max_new_tokens=64, bbh_lenient=False)
    assert list(out["parsed"]) == ["Master Bram", "Tor"] and list(out["correct"]) == [True, False]
    assert base.prompts[0] == "Question: Who named the owl?\nAnswer:" and base.budgets == [X.BASE_ANSWER_TOKENS]


def test_job_samples_per_domain_answers_and_asks_the_l1_prompt(tmp_path, monkeypatch):
    items = pd.DataFrame({"item_id": [f"i{k}" for k in range(9)], "dataset": "w", "question": [f"Q{k}?" for k in range(9)],
                          "domain": ["a"] * 4 + ["b"] * 4 + ["c"], "choices": [["x", "y"]] * 9, "answer": ["A"] * 9,
                          "aliases": [["A"]] * 9, "split": "train"})
    write_parquet(items, tmp_path / "train.parquet")
    chat = ScriptedLM(lambda p: '{"a": 0.9, "b": 0.2}' if "expected accuracy" in p else "The answer is (A).")
    monkeypatch.setattr("selfknow.models.load_lm", lambda spec, ckpt, cache_dir=None: chat)
    spec = {"name": "chatty", "backend": "openai"}
    out = X.crosstask_job([str(tmp_path / "train.parquet")], "mmlu_pro", spec, spec, str(tmp_path / "ans.parquet"),
                          str(tmp_path / "prior.parquet"), model="chatty", suite="mmlu_pro", domains=["a", "b"],
                          items_per_domain=3, seed=1, max_new_tokens=32, bbh_lenient=False, prior_mode="json",
                          prior_max_new_tokens=64, cache_dir=None)
    ans, prior = read_parquet(tmp_path / "ans.parquet"), read_parquet(tmp_path / "prior.parquet")
    assert ans.groupby("domain").size().to_dict() == {"a": 3, "b": 3} and ans["correct"].all()
    assert dict(zip(prior["domain"], prior["p_hat"])) == {"a": 0.9, "b": 0.2}
    assert "- a\n- b" in chat.prompts[-1] and out["items"] == 6 and out["unparsed"] == 0
    with pytest.raises(ValueError, match=r"ladder.cross_task.suites.mmlu_pro: no items of domain\(s\) \['z'\]"):
        X.crosstask_job([str(tmp_path / "train.parquet")], "mmlu_pro", spec, spec, str(tmp_path / "a2.parquet"),
                        str(tmp_path / "p2.parquet"), model="chatty", suite="mmlu_pro", domains=["a", "z"],
                        items_per_domain=3, seed=1, max_new_tokens=32, bbh_lenient=False, prior_mode="json",
                        prior_max_new_tokens=64, cache_dir=None)


def test_hub_schema_rows_load_as_test_items(tmp_path):
    row = dict(question_id=7, question="Q?", options=["a", "b", "N/A"], answer="B", answer_index=1, cot_content="",
               category="law", src="ori")
    (tmp_path / "test.jsonl").write_text(json.dumps(row) + "\n")
    items = load_source("mmlu_pro", {"loader": "mmlu_pro", "path": str(tmp_path)})
    assert list(items["domain"]) == ["law"] and list(items["split"]) == ["test"]
    (tmp_path / "ws.jsonl").write_text(json.dumps({"input": "Sort: b a", "target": "a b"}) + "\n")
    items = load_source("bbh_ws", {"loader": "bbh", "path": str(tmp_path / "ws.jsonl"), "config_name": "word_sorting"})
    assert list(items["domain"]) == ["word_sorting"] and list(items["answer"]) == ["a b"]


def test_a_suite_of_the_wrong_loader_is_named():
    cfg = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    validate_config(cfg, "test.yaml")
    cfg["ladder"]["cross_task"]["suites"]["mmlu_pro"]["datasets"] = ["world_qa"]
    with pytest.raises(ConfigError, match=r"ladder.cross_task.suites.mmlu_pro.datasets: loaders \['world_qa'\]"):
        validate_config(cfg, "test.yaml")
    cfg["ladder"]["cross_task"]["suites"]["mmlu_pro"]["datasets"] = ["nope"]
    with pytest.raises(ConfigError, match=r"ladder.cross_task.suites.mmlu_pro.datasets\[0\]: unknown dataset"):
        validate_config(cfg, "test.yaml")


def test_tables_are_written_with_the_mean_cbf_and_what_the_items_are(tmp_path, monkeypatch):
    """The job writes the entry of each suite whose files it is given (BBH's: Table 15) through
    the one driver, its builder returning a `Built`."""
    from ladder_fixtures import built_only

    called = built_only(monkeypatch)
    answers = _answers("claude-sonnet-4-6", {d: (k, 15 - k, 0) for d, (k, _) in BBH_SONNET.items()})
    prior = _prior("claude-sonnet-4-6", {d: z for d, (_, z) in BBH_SONNET.items()})
    write_parquet(answers, tmp_path / "a.parquet")
    write_parquet(prior, tmp_path / "p.parquet")
    out = {f"crosstask_bbh_{e}": str(tmp_path / f"t.{e}") for e in ("csv", "md")}
    for loader, said in (("bbh", "BIG-Bench Hard"), ("world_qa", "Offline analogue of BBH's tasks")):
        summary = X.write_crosstask_tables({"bbh": [str(tmp_path / "a.parquet")]}, {"bbh": [str(tmp_path / "p.parquet")]},
                                           {"bbh": {"domains": list(BBH_SONNET)}}, {"bbh": loader}, "exclude", out)
        assert summary == {"mean_CBF_bbh": pytest.approx(0.734, abs=5e-4)}
        md = (tmp_path / "t.md").read_text()
        assert md.startswith("### LADDER Table 15: zero-shot priors against accuracy per task\n")
        assert said in md and "Mean CBF over the 1 models: 0.734" in md and "15 questions per task" in md
    assert called == ["selfknow.protocols.ladder.crosstask:bbh_table"] * 2
    csv = pd.read_csv(tmp_path / "t.csv").set_index("domain")
    assert csv.loc["CBF", "claude-sonnet-4-6 acc"] == pytest.approx(0.734, abs=5e-4)


def test_prior_l1_reads_the_models_l1_prior_and_asks_nothing(tmp_path, monkeypatch):
    items = pd.DataFrame({"item_id": [f"i{k}" for k in range(4)], "dataset": "w", "question": [f"Q{k}?" for k in range(4)],
                          "domain": ["a", "a", "b", "b"], "choices": [["x", "y"]] * 4, "answer": ["A"] * 4,
                          "aliases": [["A"]] * 4, "split": "train"})
    write_parquet(items, tmp_path / "train.parquet")
    # the L1 prior over LADDER's domains a, b, c; another model's and a session's rows are not it
    l1 = pd.concat([_prior("m", {"a": 0.3, "b": 0.6, "c": 0.9}), _prior("other", {"a": 0.9, "b": 0.9}),
                    _prior("m", {"a": 0.1}).assign(session_id="0")], ignore_index=True)
    write_parquet(l1, tmp_path / "profiles.parquet")
    base = ScriptedLM(lambda p: "", loglik=lambda c, x: 0.0 if x.strip() == "x" else -5.0)
    monkeypatch.setattr("selfknow.models.load_lm", lambda spec, ckpt, cache_dir=None: base)
    kw = dict(model="m", suite="mmlu_pro", items_per_domain=2, seed=0, max_new_tokens=8, bbh_lenient=False, prior_mode="json",
              prior_max_new_tokens=8, l1_profiles=str(tmp_path / "profiles.parquet"), cache_dir=None)
    X.crosstask_job([str(tmp_path / "train.parquet")], "world_mcq", {"name": "m", "backend": "hf"}, None,
                    str(tmp_path / "a.parquet"), str(tmp_path / "p.parquet"), domains=["a", "b"], **kw)
    prior = read_parquet(tmp_path / "p.parquet")
    assert dict(zip(prior["domain"], prior["p_hat"])) == {"a": 0.3, "b": 0.6}
    assert base.prompts == []  # cloze scoring only: no prior was asked
    with pytest.raises(ValueError, match=r"here: the L1 prior of other has no domain\(s\) \['c'\]"):
        X.l1_prior(l1, "other", ["a", "c"], "here")


def test_prior_l1_needs_ladder_models():
    cfg = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    cfg["ladder"]["cross_task"].update(prior="l1", models=["wm-base"])
    with pytest.raises(ConfigError, match=r"ladder.cross_task.models\[0\]: prior 'l1' reads the L1 prior of 'wm-base'"):
        validate_config(cfg, "test.yaml")


def test_a_prior_stated_by_another_model_says_whose_it_is():
    answers = _answers("wm", {"a": (2, 1, 0), "b": (1, 2, 0)})
    prior = _prior("wm", {"a": 0.5, "b": 0.5})
    t = X.prior_table(answers, prior, ["a", "b"], "exclude", {"wm": "smollm2"})
    assert "wm ZS (by smollm2)" in t.columns and "wm ZS" not in t.columns
    assert "wm ZS" in X.prior_table(answers, prior, ["a", "b"], "exclude", {"wm": "wm"}).columns
