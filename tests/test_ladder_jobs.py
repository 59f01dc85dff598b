"""LADDER workflow jobs (sessions, prompted levels, scoring, tables) on small inputs with a
scripted LM, the controls (noise x coverage, partitions, held-out split), R4 selection and
table assembly with hand-checkable cells."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

import ladder_fixtures
from fakes import ScriptedLM
from selfknow.protocols.ladder import controls as C
from selfknow.protocols.ladder import jobs as J
from selfknow.protocols.ladder import tables as T
from selfknow.protocols.ladder.catalog import SCORE_PARTS, TABLES_ENTRIES
from selfknow.protocols.ladder.feedback import decode_feedback
from selfknow.records import write_parquet
from selfknow.world.generator import domain_names

#: the tables and figures of the tables job
TABLES = [t.name for t in TABLES_ENTRIES if not t.figure]
FIGURES = [t.name for t in TABLES_ENTRIES if t.figure]

DOMAINS = domain_names(20)


def make_items(n_per_domain: int = 6) -> pd.DataFrame:
    return ladder_fixtures.make_items(DOMAINS, n_per_domain, aliases=["x"])


def answering_lm(items: pd.DataFrame) -> ScriptedLM:
    """Accuracy rising with the domain."""
    return ladder_fixtures.answering_lm(items, {d: 0.1 + 0.04 * i for i, d in enumerate(DOMAINS)},
                                        model_id="answerer")


def prompted_lm() -> ScriptedLM:
    """Replies a JSON profile (0.6 for every requested domain) except to GT-SelfStats, which
    it echoes exactly, and to every third LSA prompt, which gets prose (unparsable)."""
    count = {"lsa": 0}

    def respond(prompt):
        doms = re.findall(r"^- (\S+)", prompt, flags=re.M)
        if re.search(r"you answered \d", prompt):
            stats = re.findall(r"^- (\S+): you answered (\d+) out of (\d+)", prompt, flags=re.M)
            return json.dumps({d: int(k) / int(n) for d, k, n in stats})
        if "probability" in prompt.lower() and "next question" in prompt.lower():
            return "70"
        if "User reaction" in prompt:
            count["lsa"] += 1
            if count["lsa"] % 3 == 0:
                return "I cannot say."
        return json.dumps({d: 0.6 for d in doms})
    return ScriptedLM(respond, model_id="prompted")


def two_jobs(tmp, spec: dict, *, user: str = "rule", user_spec: dict | None = None, answering=None,
             tiers=None, **kw) -> dict:
    """The workflow's two LADDER session jobs on `tmp`/items.parquet: the answering model's
    `answers_job`, then the simulated users' `sessions_job` (main.parquet, alt.parquet);
    `kw`: n_sessions, n_turns, items_per_domain, seed, alt_sessions."""
    a = J.answers_job(str(tmp / "items.parquet"), spec, str(tmp / "answers.parquet"),
                      parts_dir=str(tmp / "parts" / "answers"), cache_dir=None, answering=answering,
                      tiers=tiers, **kw)
    s = J.sessions_job(str(tmp / "answers.parquet"), str(tmp / "items.parquet"), str(tmp / "main.parquet"),
                       str(tmp / "alt.parquet"), model=spec["name"], user=user, user_spec=user_spec,
                       user_max_new_tokens=150, parts_dir=str(tmp / "parts"), cache_dir=None, **kw)
    return {**a, **s}


@pytest.fixture(scope="module")
def run(tmp_path_factory, monkeypatch_module):
    """sessions -> prompted -> score -> tables on 6 sessions x 20 turns, rule user, with the
    LLM-user replay of 2 sessions played by a scripted chat model."""
    tmp = tmp_path_factory.mktemp("ladder")
    items = make_items()
    write_parquet(items, tmp / "items.parquet")
    lms = {"answerer": answering_lm(items), "prompted": prompted_lm(),
           "user": ScriptedLM(lambda p: "Hmm, maybe. Thanks!", model_id="user")}
    monkeypatch_module.setattr(J, "load_lm", lambda spec, ck=None, cache_dir=None: lms[spec["name"]])
    spec = {"name": "answerer", "backend": "hf", "path": "x"}
    s = two_jobs(tmp, spec, n_sessions=6, n_turns=20, items_per_domain=4, seed=3, alt_sessions=2,
                 user_spec={"name": "user", "backend": "hf", "path": "x", "chat": True})
    p = J.prompted_job(str(tmp / "main.parquet"), {"name": "prompted", "backend": "hf",
                                                   "path": "x", "chat": True},
                       str(tmp / "profiles.parquet"), str(tmp / "query.parquet"),
                       model="answerer", lsa_query_sessions=2, seed=3)
    outs = {k: str(tmp / f"{k}.parquet") for k in SCORE_PARTS}
    sc = J.score_job(str(tmp / "main.parquet"), str(tmp / "alt.parquet"),
                     str(tmp / "profiles.parquet"), str(tmp / "query.parquet"), outs, seed=3,
                     latent_query=False, session_bootstrap_draws=200, cluster_bootstrap_draws=5,
                     cluster_estimators=["Count"], flips=[0.0, 0.5], coverages=[1.0, 0.25],
                     grid_estimators=["Global", "Count"], random_partitions=2, prefix_step=10,
                     prefix_estimators=["Global", "Count"])
    tables = {f"{n}_{e}": str(tmp / "tables" / f"{n}.{e}") for n in TABLES for e in ("csv", "md")}
    figs = {f: str(tmp / "figs" / f"{f}.png") for f in FIGURES}
    called = ladder_fixtures.built_only(monkeypatch_module)
    t = T.write_tables({k: [v] for k, v in outs.items()}, {**tables, **figs})
    return {"tmp": tmp, "sessions": s, "prompted": p, "score": sc, "tables": tables,
            "figs": figs, "items": items, "t": t, "called": list(called)}


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


# ----------------------------------------------------------------------------- jobs
def test_sessions_jobs_write_main_and_alt_user_sessions(run):
    main = pd.read_parquet(run["tmp"] / "main.parquet")
    alt = pd.read_parquet(run["tmp"] / "alt.parquet")
    assert main["session_id"].nunique() == 6 and len(main) == 6 * 20
    assert alt["session_id"].nunique() == 2 and len(alt) == 2 * 20
    assert set(main["user_model"]) == {"rules"} and set(alt["user_model"]) == {"user"}
    # the replay shows the same questions to the other user
    m2 = main[main["session_id"].isin(["0", "1"])].sort_values(["session_id", "turn"])
    a2 = alt.sort_values(["session_id", "turn"])
    assert list(m2["item_id"]) == list(a2["item_id"])
    assert run["sessions"]["pool"] == 20 * 4
    assert (run["tmp"] / "parts" / "main" / "session_0005.parquet").is_file()
    assert (run["tmp"] / "parts" / "answers" / "session_0005.parquet").is_file()


def test_sessions_jobs_resume_and_discard_stale_chunks(run, monkeypatch_module, tmp_path):
    items = run["items"]
    write_parquet(items, tmp_path / "items.parquet")
    lm = answering_lm(items)
    monkeypatch_module.setattr(J, "load_lm", lambda spec, ck=None, cache_dir=None: lm)
    kw = dict(n_sessions=3, n_turns=10, items_per_domain=4, seed=1, alt_sessions=0)
    spec = {"name": "answerer", "backend": "hf", "path": "x"}
    two_jobs(tmp_path, spec, **kw)
    chunks = [tmp_path / "parts" / sub / "session_0001.parquet" for sub in ("answers", "main")]
    mtimes = [c.stat().st_mtime_ns for c in chunks]
    two_jobs(tmp_path, spec, **kw)
    assert [c.stat().st_mtime_ns for c in chunks] == mtimes   # resumed, not rewritten
    main = pd.read_parquet(tmp_path / "main.parquet")
    # other answers upstream (another seed) discard the user's chunks, though its own
    # settings are the same
    two_jobs(tmp_path, spec, **{**kw, "seed": 2})
    assert not pd.read_parquet(tmp_path / "main.parquet")["item_id"].equals(main["item_id"])
    two_jobs(tmp_path, spec, **{**kw, "n_turns": 8})
    assert len(pd.read_parquet(tmp_path / "main.parquet")) == 3 * 8   # stale chunks discarded
    with pytest.raises(ValueError, match="session 0 has 8 answered turns, 10 expected"):
        J.sessions_job(str(tmp_path / "answers.parquet"), str(tmp_path / "items.parquet"),
                       str(tmp_path / "main.parquet"), str(tmp_path / "alt.parquet"), model="answerer",
                       user="rule", user_spec=None, user_max_new_tokens=150, parts_dir=str(tmp_path / "parts"),
                       cache_dir=None, **kw)


def test_answers_job_chat_model_answers_each_turn_with_given_tiers(run, monkeypatch_module, tmp_path):
    """A chat answerer in the authors' format: one call per session turn (no pool pass when
    the tiers are given), their tiers on every turn; other answer settings discard the chunks."""
    items = run["items"]
    write_parquet(items, tmp_path / "items.parquet")
    lm = ScriptedLM(lambda p: "Answer: B\nConfidence: 62", model_id="chat")
    monkeypatch_module.setattr(J, "load_lm", lambda spec, ck=None, cache_dir=None: lm)
    doms = sorted(items["domain"].unique())
    tiers = {"strong": doms[:2], "mid": doms[2:4], "weak": doms[4:]}
    answering = {"format": "authors", "temperature": 0.3, "max_new_tokens": 200, "per_turn": True}
    kw = dict(n_sessions=3, n_turns=10, items_per_domain=4, seed=1, alt_sessions=0, answering=answering,
              tiers=tiers)
    spec = {"name": "chat", "backend": "hf", "path": "x", "chat": True}
    out = two_jobs(tmp_path, spec, **kw)
    main = pd.read_parquet(tmp_path / "main.parquet")
    assert len(lm.prompts) == 3 * 10 and out["per_turn"] and out["answer_mode"] == "authors"
    assert set(lm.budgets) == {200} and (main["confidence"] == 0.62).all()
    tier_of = {d: t for t, ds in tiers.items() for d in ds}
    assert (main["tier"] == main["domain"].map(tier_of)).all()
    two_jobs(tmp_path, spec, **kw)
    assert len(lm.prompts) == 3 * 10                          # resumed from the chunks
    two_jobs(tmp_path, spec, **{**kw, "answering": {**answering, "temperature": 0.0}})
    assert len(lm.prompts) == 2 * 3 * 10                      # other settings: answered again
    with pytest.raises(ValueError, match="chat model: pass the ladder answer settings"):
        two_jobs(tmp_path, spec, **{**kw, "answering": None})


def test_authors_failed_call_policy_keeps_the_error_as_the_reply(run, monkeypatch_module, tmp_path):
    """`ladder.failed_answer_call: authors`: an openai-backend answerer gets the authors' one
    30 s try, and a call that fails is recorded as their runner records it (the "[ERROR: ...]"
    reply read by their parser: no answer, confidence 0.5), marked "error"; "fail" fails the job."""
    from selfknow.models.http_retry import RequestFailed

    items = run["items"]
    write_parquet(items, tmp_path / "items.parquet")

    class Flaky(ScriptedLM):
        def generate(self, prompts, **kw):  # a third of the questions time out
            if any(ladder_fixtures.stable_hash(p) % 3 == 0 for p in prompts):
                raise RequestFailed("model 'chat': POST /chat/completions request 0 failed after "
                                    "1 attempt(s): ReadTimeout: timed out")
            return super().generate(prompts, **kw)

    lm = Flaky(lambda p: "Answer: B\nConfidence: 62", model_id="chat")
    specs = []
    monkeypatch_module.setattr(J, "load_lm", lambda spec, ck=None, cache_dir=None: specs.append(spec) or lm)
    doms = sorted(items["domain"].unique())
    tiers = {"strong": doms[:2], "mid": doms[2:4], "weak": doms[4:]}
    answering = {"format": "authors", "temperature": 0.3, "max_new_tokens": 200, "per_turn": True,
                 "failed_call": "authors"}
    spec = {"name": "chat", "backend": "openai", "chat": True, "timeout_s": 120, "max_retries": 5}
    out = J.answers_job(str(tmp_path / "items.parquet"), spec, str(tmp_path / "answers.parquet"),
                        n_sessions=3, alt_sessions=0, n_turns=10, items_per_domain=4, seed=1,
                        parts_dir=str(tmp_path / "parts"), cache_dir=None, answering=answering, tiers=tiers)
    assert (specs[-1]["timeout_s"], specs[-1]["max_retries"]) == (30.0, 0)
    ans = pd.read_parquet(tmp_path / "answers.parquet")
    err = ans["answer_status"] == "error"
    assert 0 < err.sum() < len(ans) and out["failed_answer_calls"] == int(err.sum())
    assert ans.loc[err, "answer"].isna().all() and (ans.loc[err, "confidence"] == 0.5).all()
    assert not ans.loc[err, "correct"].astype(bool).any()
    assert ((ans.loc[~err, "answer"] == "B") & (ans.loc[~err, "confidence"] == 0.62)).all()
    with pytest.raises(RequestFailed, match="ReadTimeout"):
        J.answers_job(str(tmp_path / "items.parquet"), spec, str(tmp_path / "answers2.parquet"),
                      n_sessions=3, alt_sessions=0, n_turns=10, items_per_domain=4, seed=1,
                      parts_dir=str(tmp_path / "parts2"), cache_dir=None,
                      answering={**answering, "failed_call": "fail"}, tiers=tiers)
    assert (specs[-1]["timeout_s"], specs[-1]["max_retries"]) == (120, 5)


def test_the_answers_part_counts_failed_answer_calls(run):
    """The score job's `answers` part (the LADDER `answers` table) counts the turns recorded
    with answer_status "error" beside the unparsed ones: none here."""
    answers = pd.read_parquet(run["tmp"] / "answers.parquet")
    assert {"unparsed_answers", "failed_answer_calls"} <= set(answers.columns)
    assert answers["failed_answer_calls"].tolist() == [0]


def test_the_two_jobs_record_what_one_process_records(run, monkeypatch_module, tmp_path):
    """The workflow splits a session's answering (the model's job) from the simulated user's
    replies (the user's job); the records are those of `run_sessions`, which runs both halves
    in one process, for the main (rule) user and the LLM user's replay alike. Each job loads
    its own model only."""
    from selfknow.protocols.ladder.session import run_sessions
    from selfknow.protocols.ladder.simulators import make_user

    items = run["items"]
    write_parquet(items, tmp_path / "items.parquet")
    lms = {"answerer": answering_lm(items),
           "user": ScriptedLM(lambda p: f"Reply {ladder_fixtures.stable_hash(p) % 97}.", model_id="user")}
    loaded = []

    def load(spec, ck=None, cache_dir=None):
        loaded.append(spec["name"])
        return lms[spec["name"]]
    monkeypatch_module.setattr(J, "load_lm", load)
    kw = dict(n_sessions=4, n_turns=12, items_per_domain=4, seed=5, alt_sessions=2)
    user_spec = {"name": "user", "backend": "hf", "path": "x", "chat": True}
    J.answers_job(str(tmp_path / "items.parquet"), {"name": "answerer", "backend": "hf", "path": "x"},
                  str(tmp_path / "answers.parquet"), parts_dir=str(tmp_path / "parts" / "answers"), cache_dir=None,
                  **kw)
    assert loaded == ["answerer"]
    J.sessions_job(str(tmp_path / "answers.parquet"), str(tmp_path / "items.parquet"), str(tmp_path / "main.parquet"),
                   str(tmp_path / "alt.parquet"), model="answerer", user="rule", user_spec=user_spec,
                   user_max_new_tokens=150, parts_dir=str(tmp_path / "parts"), cache_dir=None, **kw)
    assert loaded == ["answerer", "user"]
    pool = J._pool(str(tmp_path / "items.parquet"), 4, 5)
    one = {"main": run_sessions(pool, lms["answerer"], make_user("rule"), n_sessions=4, n_turns=12, seed=5,
                                model="answerer"),
           "alt": run_sessions(pool, lms["answerer"], make_user("llm", lms["user"], max_new_tokens=150),
                               n_sessions=2, n_turns=12, seed=5, model="answerer")}
    for name, want in one.items():
        got = pd.read_parquet(tmp_path / f"{name}.parquet")
        assert len(got) == len(want) > 0 and got["feedback_text"].str.len().gt(0).all()
        pd.testing.assert_frame_equal(got, want.astype(got.dtypes.to_dict()))


def test_prompted_job_counts_unparsable_profiles_without_dropping(run):
    prof = pd.read_parquet(run["tmp"] / "profiles.parquet")
    assert set(prof["method"]) == {"zs_prior", "lsa", "lsa_clean", "lsa_train", "gt_selfstats"}
    lsa = prof[prof["method"].isin(["lsa", "lsa_clean", "lsa_train"])]
    per = lsa.drop_duplicates(["method", "session_id"])
    n_bad = int((per["parse_status"] == "unparsable").sum())
    assert n_bad == len(per) // 3 and n_bad >= 4               # every third LSA reply
    assert (lsa.loc[lsa["parse_status"] == "unparsable", "p_hat"] == 0.5).all()
    assert run["prompted"]["unparsable"]["lsa"] + run["prompted"]["unparsable"]["lsa_clean"] \
        + run["prompted"]["unparsable"]["lsa_train"] == n_bad
    q = pd.read_parquet(run["tmp"] / "query.parquet")
    assert set(q["session_id"]) == {"0", "1"}
    assert (q.loc[q["query_status"] == "model", "query_confidence"] == 0.7).all()


def test_score_job_settings_default_to_the_schema_and_the_rule_passes_each():
    """The schema's `ladder` defaults are the only ones (score_job's signature repeats none), an
    unknown setting is an error naming it, and the rule passes every setting by its name."""
    from conftest import REPO
    from selfknow.schema import defaults

    lad = defaults("ladder")
    got = J._score_settings({"prefix_step": 3})
    assert got["prefix_step"] == 3 and got["partition"] is None
    assert {k: got[k] for k in J.SCORE_SETTINGS if k not in ("prefix_step", "partition")} == {
        k: lad[key] for k, key in J.SCORE_SETTINGS.items() if k not in ("prefix_step", "partition")}
    with pytest.raises(TypeError, match=r"unknown settings \['noise_flip'\]"):
        J._score_settings({"noise_flip": [0.1]})
    rule = (REPO / "rules" / "ladder.smk").read_text(encoding="utf-8").split("rule ladder_score:")[1]
    params = rule.split("params:")[1].split("threads:")[0]
    assert set(re.findall(r"^ {8}(\w+)=", params, re.M)) == {"job", "seed", *J.SCORE_SETTINGS}


def test_score_job_levels_match_their_definitions(run):
    sess = pd.read_parquet(run["tmp"] / "sessions.parquet")
    m = sess.groupby("estimator")["CBF"].mean()
    assert m["OraclePDC"] == pytest.approx(1.0)
    assert m["GT-SelfStats"] == pytest.approx(1.0)            # the scripted model echoes exactly
    main = pd.read_parquet(run["tmp"] / "main.parquet")
    # ZS is 0.6 on every eligible domain: CBF = 1 - mean |0.6 - a_d| by hand, session 0
    s0 = main[main["session_id"] == "0"]
    a = s0.groupby("domain")["correct"].agg(["mean", "size"])
    a = a[a["size"] >= 2]["mean"]
    zs0 = sess[(sess["estimator"] == "ZS") & (sess["session_id"] == "0")]["CBF"].item()
    assert zs0 == pytest.approx(1 - np.abs(0.6 - a).mean())
    nm0 = sess[(sess["estimator"] == "NoMemory") & (sess["session_id"] == "0")]["CBF"].item()
    assert nm0 == pytest.approx(1 - np.abs(0.5 - a).mean())
    # LSA answer metrics exist only for the sessions with asked query confidences
    lsa = sess[sess["estimator"] == "LSA"].set_index("session_id")
    assert lsa["ECE"].notna().sum() == 2
    assert set(sess["level"]) >= {"L0", "L1", "L2", "L3", "L4"}


def test_lsa_clean_turn_metrics_are_not_the_recorded_confidences(run):
    """Issue 15: LSA-clean's ECE/AUROC equalled GT-SelfStats' to three decimals. GT-SelfStats
    (like ZS) scores the recorded answer confidence, as the authors' baselines do, so its
    ECE/AUROC are those of the answers (checked against scikit-learn); LSA-clean had been given
    the same recorded confidences although nothing of LSA produced them. It has no turn
    confidences (LSA is queried on observed histories only; the paper's Table 24 reports its
    CBF), so its answer metrics are empty while its profile is scored."""
    from sklearn.metrics import roc_auc_score

    sess = pd.read_parquet(run["tmp"] / "sessions.parquet")
    main = pd.read_parquet(run["tmp"] / "main.parquet")
    by = {e: g.set_index("session_id").sort_index() for e, g in sess.groupby("estimator")}
    gt, zs, clean = by["GT-SelfStats"], by["ZS"], by["LSA-clean"]
    for sid, g in main.groupby("session_id"):
        y, c = g["correct"].astype(bool), g["confidence"].astype(float)
        ref = roc_auc_score(y, c) if y.nunique() == 2 else 0.5
        assert gt.loc[sid, "AUROC"] == pytest.approx(ref, abs=5e-4)   # authors round to 3
    assert np.allclose(gt[["ECE", "AUROC"]], zs[["ECE", "AUROC"]])
    assert clean[["ECE", "AUROC"]].isna().all().all() and len(clean) == 6
    assert clean["CBF"].notna().all() and (clean["CBF"] < gt["CBF"] - 0.05).all()
    table = pd.read_csv(run["tables"]["main_csv"]).set_index("estimator")
    assert np.isnan(table.loc["LSA-clean", "ECE"]) and np.isnan(table.loc["LSA-clean", "AUROC"])
    assert table.loc["GT-SelfStats", "AUROC"] == pytest.approx(table.loc["ZS", "AUROC"])


def test_controls_clean_labels_make_count_exact(run):
    ctrl = pd.read_parquet(run["tmp"] / "controls.parquet")
    clean = ctrl[(ctrl["condition"] == "clean") & (ctrl["estimator"] == "Count")]
    assert np.allclose(clean["CBF"], 1.0)
    assert (ctrl.loc[ctrl["condition"] == "clean", "coverage"] == 1.0).all()
    grid = pd.read_parquet(run["tmp"] / "grid.parquet")
    full = grid[(grid["flip"] == 0) & (grid["coverage"] == 1) & (grid["estimator"] == "Count")]
    assert np.allclose(full["CBF"], 1.0)
    flipped = grid[(grid["flip"] == 0.5) & (grid["coverage"] == 1.0) & (grid["estimator"] == "Count")]
    assert flipped["CBF"].mean() < 0.9


# ----------------------------------------------------------------------------- controls
@pytest.mark.parametrize("flip, coverage", [(0.0, 1.0), (0.2, 0.5), (0.3, 0.25), (0.1, 0.125)])
def test_noisy_labels_flip_and_drop_the_intended_shares(flip, coverage):
    rng = np.random.default_rng(0)
    y = rng.random(200) < 0.6
    lab = C.noisy_labels(y, flip, coverage, np.random.default_rng(5))
    kept = ~np.isnan(lab)
    assert kept.sum() == round(coverage * 200)
    assert (lab[kept] != y[kept]).sum() == round(flip * kept.sum())
    again = C.noisy_labels(y, flip, coverage, np.random.default_rng(5))
    assert np.array_equal(np.isnan(again), ~kept) and np.array_equal(again[kept], lab[kept])
    with pytest.raises(ValueError):
        C.noisy_labels(y, 1.2, 0.5, rng)


def test_corrected_labels_keep_missingness():
    lab = np.array([1.0, np.nan, 0.0, 1.0, np.nan])
    y = np.array([False, True, False, True, False])
    out = C.corrected_labels(lab, y)
    assert np.isnan(out[[1, 4]]).all()
    assert list(out[[0, 2, 3]]) == [0.0, 0.0, 1.0]


def test_clean_feedback_texts_decode_to_the_true_outcome():
    t = pd.DataFrame({"correct": [True, False, True], "feedback_text": ["a", "b", "c"]})
    dec = decode_feedback(J.clean_feedback_turns(t)["feedback_text"], "frozen")
    assert list(dec["decoded_label"]) == [1.0, 0.0, 1.0]


def test_semantic_partition_maps_every_domain():
    world = C.semantic_partition(DOMAINS)
    assert set(world) == set(DOMAINS)
    assert sorted(pd.Series(world).value_counts()) == [5, 5, 5, 5]
    assert world["zorbian_geography"] == "society" and world["halcorean_chemistry"] == "natural_science"
    mmlu = [d for ds in C.MMLU_CATEGORIES.values() for d in ds]
    m = C.semantic_partition(mmlu)
    assert pd.Series(m).value_counts().to_dict() == {"stem": 13, "other": 4, "humanities": 2,
                                                     "social_sciences": 1}
    with pytest.raises(ValueError, match="no category for domains"):
        C.semantic_partition(DOMAINS + ["mystery"])
    assert C.semantic_partition(["a", "b"], {"g": ["a", "b"]}) == {"a": "g", "b": "g"}


def test_random_partition_has_the_requested_sizes_and_covers_every_domain():
    p = C.random_partition(DOMAINS, [13, 4, 2, 1], seed=4)
    assert set(p) == set(DOMAINS)
    assert sorted(pd.Series(p).value_counts()) == [1, 2, 4, 13]
    assert p == C.random_partition(list(reversed(DOMAINS)), [13, 4, 2, 1], seed=4)
    assert p != C.random_partition(DOMAINS, [13, 4, 2, 1], seed=5)
    with pytest.raises(ValueError, match="do not sum"):
        C.random_partition(DOMAINS, [5, 5], seed=0)
    t = pd.DataFrame({"domain": DOMAINS})
    assert set(C.apply_partition(t, p)["domain"]) == {f"random_{k}" for k in range(4)}


def test_heldout_split_halves_each_domain_by_item():
    items = make_items(7)
    turns = pd.concat([items, items.iloc[:30]], ignore_index=True)  # repeated questions
    tr = C.heldout_split(turns, seed=2)
    per = pd.DataFrame({"item": turns["item_id"], "d": turns["domain"], "tr": tr}).drop_duplicates()
    assert (per.groupby("item")["tr"].nunique() == 1).all()         # an item is on one side
    assert (per.groupby("d")["tr"].sum() == 4).all()                # ceil(7/2) per domain
    assert C.mae({"a": 0.5}, ["a", "a", "b", "b"], [1, 0, 1, 1]) == pytest.approx((0 + 0.5) / 2)


def test_r4_selection_on_a_constructed_case():
    df = pd.DataFrame({"model": ["m1", "m2", "m3"], "NoMemory": [0.70, 0.80, 0.75],
                       "ZS": [0.78, 0.76, 0.75], "LSA": [0.72, 0.85, 0.90]})
    t = C.r4_table(df)
    assert list(t["R4_choice"][:3]) == ["ZS", "LSA", "LSA"]       # a tie is not a win
    assert list(t["R4"][:3]) == [0.78, 0.85, 0.90]
    assert list(t["best_of_two"][:3]) == [0.78, 0.85, 0.90]
    mean = t.iloc[3]
    assert mean["R4"] == pytest.approx((0.78 + 0.85 + 0.90) / 3)
    assert mean["always_ZS"] == pytest.approx((0.78 + 0.76 + 0.75) / 3)
    assert mean["R4_choice"] == "ZS on 1/3"


# ----------------------------------------------------------------------------- tables
def test_main_table_cells_are_session_means_with_bootstrap_se():
    sess = pd.DataFrame({"model": ["m"] * 4, "session_id": ["0", "1", "0", "1"],
                         "estimator": ["Global", "Global", "NoMemory", "NoMemory"],
                         "CBF": [0.8, 0.6, 0.7, 0.7], "norm_CBF": [0.2, 0.0, 0, 0],
                         "bias": [0.1, -0.1, 0.0, 0.2], "shape_error": [0.1, 0.3, 0.2, 0.2],
                         "kendall_tau": [np.nan] * 4, "ECE": [0.1] * 4, "AUROC": [0.5] * 4})
    boot = pd.DataFrame({"model": ["m", "m"], "estimator": ["Global", "NoMemory"],
                         "metric": "CBF", "se": [0.1, 0.0], "ci_low": [0.6, 0.7],
                         "ci_high": [0.8, 0.7]})
    t = T.main_table(sess, boot)
    assert list(t["estimator"]) == ["NoMemory", "Global"]          # ordered by level
    g = t.set_index("estimator").loc["Global"]
    assert g["CBF"] == pytest.approx(0.7) and g["SE"] == 0.1 and g["bias"] == pytest.approx(0.0)
    assert g["shape_error"] == pytest.approx(0.2) and g["level"] == "L2" and g["n_sessions"] == 2
    lf = T.ladder_frame(t)
    assert list(lf["level"]) == ["L0 NoMemory"]


def test_grid_and_partition_tables_are_hand_checkable():
    grid = pd.DataFrame({"model": "m", "session_id": ["0", "1"] * 2, "flip": 0.1,
                         "coverage": [0.5, 0.5, 1.0, 1.0], "repeat": 0, "estimator": "Count",
                         "CBF": [0.6, 0.8, 0.9, 1.0]})
    g = T.grid_table(grid).table
    assert list(g["coverage"]) == [1.0, 0.5] and list(g["Count"]) == pytest.approx([0.95, 0.7])
    parts = pd.DataFrame({"model": "m", "partition": ["domain"] * 2 + ["random"] * 4,
                          "repeat": [0, 0, 0, 0, 1, 1], "session_id": "0",
                          "estimator": ["Global", "Count"] * 3,
                          "CBF": [0.7, 0.8, 0.9, 0.6, 0.7, 0.6], "n_domains": 4})
    p = T.partition_table(parts).table.set_index("partition")
    assert p.loc["domain", "best"] == "Count" and p.loc["random", "best"] == "Global"
    assert p.loc["random", "Global"] == pytest.approx(0.8)
    assert p.loc["random", "random_sd"] == pytest.approx(np.std([0.9, 0.7], ddof=1))


def test_write_tables_fills_every_table_and_figure(run):
    """The tables job writes every entry of its catalog group through the one driver, each
    builder returning a `Built`, figures included."""
    from pathlib import Path
    assert run["called"] == [t.builder for t in TABLES_ENTRIES]
    assert run["t"] == {"tables": len(TABLES), "figures": len(FIGURES), "models": 1}
    # main's and R4's fixed words and what is drawn from their numbers are one paragraph
    assert Path(run["tables"]["main_md"]).read_text().split("\n\n")[-1].startswith(T.MAIN_NOTE)
    assert Path(run["tables"]["r4_md"]).read_text().split("\n\n")[-1].startswith(
        T.R4_NOTE + " Observed rows rest on the sessions with an LSA profile: answerer: ")
    for name in TABLES:
        df = pd.read_csv(run["tables"][f"{name}_csv"])
        assert len(df) > 0, name
        assert Path(run["tables"][f"{name}_md"]).read_text().startswith("### LADDER")
    for f in FIGURES:
        assert Path(run["figs"][f]).stat().st_size > 1000
    main = pd.read_csv(run["tables"]["main_csv"])
    assert {"NoMemory", "ZS", "LSA", "Global", "GLAD", "OraclePDC", "GT-SelfStats"} <= set(main["estimator"])
    assert main["SE"].notna().all()
    r4 = pd.read_csv(run["tables"]["r4_csv"])
    assert set(r4["setting"]) == {"observed", "held-out"}
    dec = pd.read_csv(run["tables"]["decoder_csv"])
    assert set(dec["rules"]) == {"frozen", "expanded"} and set(dec["user"]) == {"rule", "llm:user"}
    part = pd.read_csv(run["tables"]["partitions_csv"])
    assert set(part["partition"]) == {"domain", "semantic", "random"}


def test_prompted_job_can_ask_a_subset_of_sessions(run, monkeypatch_module):
    lm = prompted_lm()
    monkeypatch_module.setattr(J, "load_lm", lambda spec, ck=None, cache_dir=None: lm)
    tmp = run["tmp"]
    J.prompted_job(str(tmp / "main.parquet"), {"name": "p", "backend": "hf", "path": "x", "chat": True},
                   str(tmp / "sub_prof.parquet"), str(tmp / "sub_q.parquet"), model="answerer",
                   prompted_sessions=2, lsa_controls=False)
    prof = pd.read_parquet(tmp / "sub_prof.parquet")
    assert set(prof["method"]) == {"zs_prior", "lsa", "gt_selfstats"}
    assert set(prof.loc[prof["method"] == "lsa", "session_id"]) == {"0", "1"}
    assert set(prof.loc[prof["method"] == "zs_prior", "session_id"]) == {"*"} | {str(i) for i in range(6)}
    assert len(pd.read_parquet(tmp / "sub_q.parquet")) == 0        # no query sessions asked


def test_main_note_says_whose_prompted_levels_and_on_how_many_sessions_each_estimator_rests():
    from selfknow.protocols.ladder.tables import ladder_frame, main_note, r4_note, stated_by

    main = pd.DataFrame({"model": ["wm"] * 4, "estimator": ["NoMemory", "ZS", "LSA", "GT-SelfStats"],
                         "CBF": [0.6, 0.7, 0.65, 0.8], "SE": [0.01] * 4, "ECE": [np.nan, 0.209, 0.3, 0.097],
                         "AUROC": [np.nan, 0.763, 0.6, 0.774], "n_sessions": [12, 12, 2, 2]})
    note = main_note(main, {"wm": "smollm2"})
    assert "wm's prompted levels (ZS, LSA, GT-SelfStats) were stated by smollm2" in note
    assert "Sessions per estimator: 2: GT-SelfStats, LSA; 12: NoMemory, ZS" in note
    assert "ZS ECE / AUROC 0.209 / 0.763, GT-SelfStats 0.097 / 0.774 (not equal" in note
    same = main.assign(ECE=[np.nan, 0.2, 0.3, 0.2], AUROC=[np.nan, 0.7, 0.6, 0.7], n_sessions=12)
    assert "(equal)" in main_note(same, {}) and "stated by" not in main_note(same, {})
    # Figure 4: the levels on 2 of 12 sessions are their own series
    fr = ladder_frame(main)
    assert fr.set_index("level")["model"].to_dict() == {
        "L0 NoMemory": "wm", "L1 ZS": "wm", "L2 LSA": "wm (2 of 12 sessions)",
        "L4 GT-SelfStats": "wm (2 of 12 sessions)"}
    sessions = pd.DataFrame({"model": "wm", "estimator": ["ZS"] * 3 + ["LSA"] * 2, "session_id": [0, 1, 2, 0, 1]})
    assert r4_note(sessions) == "Observed rows rest on the sessions with an LSA profile: wm: 2 of 3 sessions."
    cfg = {"models": [{"name": "wm", "backend": "hf"}, {"name": "smol", "backend": "hf", "chat": True}],
           "ladder": {"prompted_model": "smol"}}
    assert stated_by(cfg, ["wm", "smol"]) == {"wm": "smol", "smol": "smol"}


def test_findings_pair_each_level_with_nomemory_on_shared_sessions_and_say_who_stated_it():
    from scipy import stats

    from selfknow.protocols.ladder.tables import findings

    rows = []
    for k in range(4):
        cbf = {"NoMemory": 0.70, "ZS": 0.70 + (0.01, 0.03, 0.02, 0.04)[k], "Count": 0.80, "OraclePDC": 1.0,
               "Dawid-Skene": 0.80 + (0.02, -0.02, 0.01, -0.01)[k]}
        if k < 3:
            cbf["LSA"] = cbf["LSA-clean"] = 0.70
        if k == 0:
            cbf["GT-SelfStats"] = 0.9
        rows += [{"model": "wm", "session_id": f"s{k}", "estimator": e, "CBF": v} for e, v in cbf.items()]
    built = findings(pd.DataFrame(rows), {"wm": "smol"})
    table, (note,) = built.table, built.notes
    by = dict(zip(table["comparison"], table.to_dict("records")))
    assert list(by) == ["wm: ZS (stated by smol) − NoMemory (session CBF, 4 sessions)",
                        "wm: LSA (stated by smol) − NoMemory (session CBF, 3 sessions)",
                        "wm: Count − NoMemory (session CBF, 4 sessions)",
                        "wm: Dawid-Skene − NoMemory (session CBF, 4 sessions)",
                        "wm: GT-SelfStats (stated by smol) − NoMemory (session CBF, 1 session)",
                        "wm: Dawid-Skene − Count (second- vs first-order) (session CBF, 4 sessions)"]
    zs = by["wm: ZS (stated by smol) − NoMemory (session CBF, 4 sessions)"]
    d = np.array([0.01, 0.03, 0.02, 0.04])
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert zs["difference"] == pytest.approx(0.025)
    assert zs["95 % interval"] == f"[{0.025 - half:+.3f}, {0.025 + half:+.3f}]" and zs["verdict"] == "agrees"
    # identical on every session: no interval, and no difference, rather than a point read as a finding
    lsa = by["wm: LSA (stated by smol) − NoMemory (session CBF, 3 sessions)"]
    assert lsa["95 % interval"] == "none: every unit alike" and lsa["verdict"] == "no difference on any unit"
    assert by["wm: Count − NoMemory (session CBF, 4 sessions)"]["paper's direction"] == "none stated"
    assert by["wm: Dawid-Skene − Count (second- vs first-order) (session CBF, 4 sessions)"]["verdict"].startswith(
        "undecided")
    assert "Not compared: OraclePDC" in note and "the control LSA-clean" in note
    assert by["wm: GT-SelfStats (stated by smol) − NoMemory (session CBF, 1 session)"]["verdict"] == "no interval"


def test_an_lsa_clean_control_that_cannot_differ_says_so():
    from selfknow.protocols.ladder.tables import lsa_clean_note

    rows = [{"model": m, "session_id": f"s{k}", "estimator": e, "CBF": 0.6 + 0.01 * k + (0.05 if (m == "b" and
             e == "LSA-clean" and k == 1) else 0), "bias": 0.1, "shape_error": 0.2}
            for m in ("a", "b") for k in range(3) for e in ("LSA", "LSA-clean")]
    note = lsa_clean_note(pd.DataFrame(rows), {"a": "smol", "b": "b"})
    assert note == ("a: LSA-clean equals LSA on all 3 sessions (CBF, bias, shape error): smol's profiles did not "
                    "change between clean and observed histories, so this control cannot differ here and shows "
                    "nothing.")


def _heldout_case() -> tuple[pd.DataFrame, pd.DataFrame]:
    """8 domains of 4 questions, one session: every answer right in d0, d2, ... and wrong in d1,
    d3, ..., so each test half's accuracy is 1 or 0 whatever the split. Profiles: ZS states
    every domain (0.9 where right, 0.2 where wrong); LSA states d0 (1.0) and leaves d1 unparsed."""
    doms = [f"d{k}" for k in range(8)]
    dec = pd.DataFrame([{"model": "m", "session_id": "0", "turn": 4 * k + i, "domain": d, "item_id": f"{d}_{i}",
                         "correct": k % 2 == 0, "confidence": 0.5, "decoded_label": float(k % 2 == 0),
                         "in_expertise": True} for k, d in enumerate(doms) for i in range(4)])
    zs = pd.DataFrame({"method": "zs_prior", "session_id": "*", "domain": doms, "filled": False,
                       "p_hat": [0.9 if k % 2 == 0 else 0.2 for k in range(8)]})
    lsa = pd.DataFrame({"method": "lsa_train", "session_id": "0", "domain": ["d0", "d1"],
                        "p_hat": [1.0, 0.5], "filled": [False, True]})
    return dec, pd.concat([zs, lsa], ignore_index=True)


def test_heldout_counts_stated_domains_and_pairs_errors_with_nomemory():
    dec, profiles = _heldout_case()
    h = J._heldout(dec, profiles, seed=3, estimators=["NoMemory"]).set_index("estimator")
    assert h.loc["NoMemory", "mae_test"] == pytest.approx(0.5)
    assert h.loc["ZS", "mae_test"] == pytest.approx((4 * 0.1 + 4 * 0.2) / 8)
    assert h.loc["LSA", "mae_test"] == pytest.approx((0 + 7 * 0.5) / 8)
    assert list(h["n_domains"]) == [8, 8, 8]
    assert h.loc["ZS", "n_stated"] == 8
    assert h.loc["LSA", "n_stated"] == 1                             # the unparsed d1 is not stated
    # LSA − NoMemory per domain: -0.5 on d0, 0 on seven: mean -1/16, SE sqrt(1/32)/sqrt(8) = 1/16
    assert h.loc["LSA", "vs_nomemory"] == pytest.approx(-0.0625)
    assert h.loc["LSA", "vs_nomemory_lo"] == pytest.approx(-0.0625 - 2.364624 * 0.0625, abs=1e-6)
    assert h.loc["LSA", "vs_nomemory_hi"] == pytest.approx(-0.0625 + 2.364624 * 0.0625, abs=1e-6)
    assert h.loc["ZS", "vs_nomemory_hi"] < 0                         # -0.4 and -0.3: clear of 0


def test_heldout_note_flags_a_profile_of_one_domain_not_one_of_every_domain():
    dec, profiles = _heldout_case()
    built = T.heldout_with_note(J._heldout(dec, profiles, seed=3, estimators=["NoMemory"]), {"m": "S"})
    table, (note,) = built.table, built.notes
    assert table.loc[0, "ZS domains"] == "8 of 8"
    assert table.loc[0, "LSA domains"] == "1 of 8"
    few = note.split("Resting on fewer than 25 % of the domains")[1].split(".")[0]
    assert "m: LSA (stated by S) states 1 of 8 test domains" in few
    assert "ZS" not in few
    same = note.split("Not different from NoMemory")[1]
    assert "m: LSA (stated by S) − NoMemory -0.062 [-0.210, +0.085]" in same
    assert "ZS" not in same


def test_r4_note_says_what_its_held_out_lsa_rests_on():
    dec, profiles = _heldout_case()
    heldout = J._heldout(dec, profiles, seed=3, estimators=["NoMemory"])
    sessions = pd.DataFrame({"model": "m", "session_id": "0", "estimator": ["NoMemory", "ZS", "LSA"],
                             "CBF": [0.5, 0.85, 0.56]})
    (note,) = T.r4_with_note(sessions, heldout, {"m": "S"}).notes
    held = note.split("Held-out rows: ")[1]
    assert "m: LSA (stated by S) states 1 of 8 test domains" in held
    assert held == T.heldout_note(heldout, {"m": "S"})
