"""LADDER live side: answering, personas, simulated users, the session engine and the prompted
levels (L1 ZS prior, L2 LSA, L4 GT-SelfStats)."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

import ladder_fixtures
from fakes import ScriptedLM
from selfknow.protocols.ladder import records
from selfknow.protocols.ladder.answering import (answer_by_cloze, answer_by_prompt,
                                                 extract_json_object, format_choices,
                                                 load_prompt, make_answer_fn,
                                                 parse_answer_reply, parse_authors_reply,
                                                 parse_probability)
from selfknow.protocols.ladder.personas import (AUTHOR_TEMPLATES, EXPLICITNESS, STYLES,
                                                TOLERANCES, Persona, author_persona,
                                                make_persona, sample_persona)
from selfknow.protocols.ladder.prompted import (gt_selfstats_profiles, lsa_profiles,
                                                lsa_query_confidence, parse_profile,
                                                profile_schema, session_stats, zs_prior,
                                                zs_prior_profiles)
from selfknow.protocols.ladder.session import (LIVE_COLUMNS, agent_profile, iter_sessions,
                                               run_sessions, run_sessions_to_dir,
                                               read_session_chunks, score_answers,
                                               session_composition)
from selfknow.protocols.ladder.simulators import LLMUser, Plan, RuleBasedUser, TurnContext

DOMAINS = [f"dom_{i}" for i in range(6)]


def make_items(n_per_domain: int = 25) -> pd.DataFrame:
    return ladder_fixtures.make_items(DOMAINS, n_per_domain)


def answering_lm(items: pd.DataFrame) -> ScriptedLM:
    """Accuracy rising with the domain index (dom_0 weakest)."""
    return ladder_fixtures.answering_lm(items, {d: 0.15 + 0.14 * i for i, d in enumerate(DOMAINS)})


# ----------------------------------------------------------------------------- answering
def test_cloze_answering_matches_hand_softmax():
    items = make_items(2).head(3)
    lls = {0: [-1.0, -2.0, -3.0, -0.5], 1: [-0.1, -4.0, -4.0, -4.0], 2: [-2.0, -1.5, -2.0, -2.0]}
    order = {q: i for i, q in enumerate(items["question"])}
    choices = {q: list(c) for q, c in zip(items["question"], items["choices"])}

    def loglik(context, continuation):
        q = context.removeprefix("Question: ").removesuffix("\nAnswer:")  # the cloze prompt
        assert continuation.startswith(" ")
        return lls[order[q]][choices[q].index(continuation[1:])]
    out = answer_by_cloze(ScriptedLM(lambda p: "", loglik=loglik), items)
    assert list(out["answer"]) == ["D", "A", "B"]
    for i, row in out.iterrows():
        p = np.exp(lls[i]) / np.exp(lls[i]).sum()
        assert row["confidence"] == pytest.approx(p.max(), rel=1e-12)
        assert json.loads(row["answer_raw"]) == pytest.approx(dict(zip("ABCD", p)), abs=1e-6)
    assert (out["answer_status"] == "ok").all()


@pytest.mark.parametrize("text, answer, conf, status", [
    ('{"answer": "B", "confidence": 0.8}', "B", 0.8, "ok"),
    ('Sure!\n```json\n{"answer": "C", "confidence": "85%"}\n```\nHope it helps', "C", 0.85, "ok"),
    ("Answer: D\nConfidence: 70", "D", 0.7, "ok"),
    ("{'answer': '(A) the first', 'confidence': 90,}", "A", 0.9, "ok"),
    ("I think the answer is B.", "B", 0.5, "no_confidence"),
    ("Paris is lovely in spring.", None, 0.5, "unparsed"),
    ("I would answer a question like this carefully.", None, 0.5, "unparsed"),
    ('{"answer": "E", "confidence": 0.3}', None, 0.3, "unparsed"),
])
def test_parse_answer_reply(text, answer, conf, status):
    pa = parse_answer_reply(text)
    assert (pa.answer, pa.status) == (answer, status)
    assert pa.confidence == pytest.approx(conf)


def test_json_answering_counts_unparsed_and_scores_them_wrong():
    items = make_items(4).head(8)
    replies = ['{"answer": "%s", "confidence": 0.9}', "no idea", 'Answer: %s', "blah"]

    def respond(prompt):
        q = re.search(r"Question: (.*)\n", prompt).group(1)
        k = int(re.search(r"Question (\d+)", q).group(1))
        gold = items.set_index("question").loc[q, "answer"]
        r = replies[k % 4]
        return r % gold if "%s" in r else r
    ans = answer_by_prompt(ScriptedLM(respond), items, answer_format="json")
    assert len(ans) == len(items)                       # nothing dropped
    assert (ans["answer_status"] == "unparsed").sum() == 4
    scored = score_answers(items, ans)
    assert not scored.loc[scored["answer"].isna(), "correct"].any()
    assert scored.loc[scored["answer"].notna(), "correct"].all()


@pytest.mark.parametrize("text, answer, conf, status", [
    ("Answer: B\nConfidence: 85", "B", 0.85, "ok"),
    ("Answer: C\nConfidence: 0.85", "C", 0.0, "ok"),           # \\d+ reads the 0, as theirs
    ("**Answer:** B\nConfidence: 85", None, 0.85, "unparsed"),  # no letter right after "Answer:"
    ("answer: B\nconfidence: 85", None, 0.5, "unparsed"),       # case-sensitive
    ("Answer: B", "B", 0.5, "no_confidence"),
    ("Answer: E\nConfidence: 40", None, 0.4, "unparsed"),
    ("Confidence: 150\nAnswer:A", "A", 1.0, "ok"),
    ("[ERROR: timeout]", None, 0.5, "unparsed"),
])
def test_parse_authors_reply(text, answer, conf, status):
    pa = parse_authors_reply(text)
    assert (pa.answer, pa.status) == (answer, status)
    assert pa.confidence == pytest.approx(conf)


def test_authors_answer_prompt_renders_their_text():
    """The authors' session prompt (yin1245/selfbound capbound_session_api.py), typed by hand."""
    got = load_prompt("answer_mcq_authors").substitute(question="What costs $5?",
                                                       choices=format_choices(["a", "b", "c", "d"]))
    assert got == ("Answer the question and give your confidence 0-100%.\n\nQuestion: What costs $5?\n"
                   "Choices:\nA. a\nB. b\nC. c\nD. d\n\nFormat your response exactly as:\n"
                   "Answer: [A/B/C/D]\nConfidence: [0-100]")


def test_released_confidences_are_whole_percentages(shared_data):
    """What the authors' parser can produce, the released records hold: every confidence is
    N/100 for a whole N in 0..100 (or the 0.5 fallback, itself one)."""
    for path in sorted((shared_data / "ladder-selfbound" / "sessions").glob("*.json")):
        doc = json.loads(path.read_text())
        conf = np.array([t["agent_confidence"] for s in doc["sessions"] for t in s["log"]])
        assert np.allclose(conf * 100, np.round(conf * 100), atol=1e-9), path.name
        assert conf.min() >= 0 and conf.max() <= 1, path.name


def test_paper_config_tiers_and_users_are_the_released_sessions(shared_data):
    """config/paper.yaml's ladder.tiers and simulated user per model are each released file's
    metadata (agent_profile tiers, user_model)."""
    from conftest import REPO
    from selfknow.config import load_config
    lad = load_config(REPO / "config" / "paper.yaml")["ladder"]
    names = {m.lower(): m for m in lad["models"]}
    files = sorted((shared_data / "ladder-selfbound" / "sessions").glob("*.json"))
    assert files
    for path in files:
        meta = json.loads(path.read_text())["metadata"]
        m = names[meta["agent_model"].lower()]
        for t in ("strong", "mid", "weak"):
            assert sorted(lad["tiers"][m][t]) == sorted(meta["agent_profile"][f"{t}_domains"]), (m, t)
        assert lad.get("user_models", {}).get(m, lad["llm_user_model"]) == meta["user_model"], m


def test_parse_probability_and_json_extraction():
    assert parse_probability("70%") == pytest.approx(0.7)
    assert parse_probability(70) == pytest.approx(0.7)
    assert parse_probability("0.35") == pytest.approx(0.35)
    assert parse_probability("n/a") is None and parse_probability(True) is None
    assert extract_json_object('Use {this} format. {"a": 1} trailing') == {"a": 1}
    assert extract_json_object("no braces") is None


# ----------------------------------------------------------------------------- personas
def test_author_personas_match_the_released_sessions(shared_data):
    path = sorted((shared_data / "ladder-selfbound" / "sessions").glob("*.json"))[0]
    doc = json.loads(path.read_text())
    for i, s in enumerate(doc["sessions"]):
        p = author_persona(i)
        assert s["persona"] == {"id": p.persona_id, "expertise": list(p.expertise),
                                "style": p.style, "tolerance": p.tolerance,
                                "explicitness": p.explicitness}


def test_sampled_personas_are_deterministic_and_valid():
    a = [sample_persona(DOMAINS, s, seed=3) for s in range(40)]
    b = [sample_persona(list(reversed(DOMAINS)), s, seed=3) for s in range(40)]
    assert a == b                                       # order of `domains` is irrelevant
    assert a != [sample_persona(DOMAINS, s, seed=4) for s in range(40)]
    for p in a:
        assert len(set(p.expertise)) == 3 and set(p.expertise) <= set(DOMAINS)
        assert p.style in STYLES and p.tolerance in TOLERANCES
        assert p.explicitness in EXPLICITNESS
    assert len({p.expertise for p in a}) > 5            # the seed really varies them
    mmlu = sorted({d for t in AUTHOR_TEMPLATES for d in t[0]})
    assert make_persona(mmlu, 12, seed=0) == author_persona(12)
    assert make_persona(DOMAINS, 12, seed=0) == sample_persona(DOMAINS, 12, seed=0)
    with pytest.raises(ValueError, match="absent from the item pool"):
        make_persona(DOMAINS, 0, seed=0, scheme="templates")


# ----------------------------------------------------------------------------- rule user
def _ctx(persona, in_exp, correct, i=0):
    dom = persona.expertise[0] if in_exp else "outside"
    return TurnContext(0, i, "Q?", ("w", "x", "y", "z"), dom, "B" if not correct else "C", "C",
                       correct, persona)


@pytest.mark.parametrize("tol, expl", [(0.2, 0.9), (0.4, 0.7)])
def test_rule_user_rates_on_a_large_stream(tol, expl):
    user = RuleBasedUser(question_right_scale=0.5, endorse_scale=0.3)
    persona = Persona("p", ("inside",), "thoughtful", tol, expl)
    rng = np.random.default_rng(0)
    n = 10000
    for in_exp in (True, False):
        for correct in (True, False):
            ctx = _ctx(persona, in_exp, correct)
            plans = [user.plan(ctx, rng) for _ in range(n)]
            kinds = pd.Series([p.kind for p in plans]).value_counts() / n
            rates = user.rates(persona, in_exp, correct)
            assert sum(rates.values()) == pytest.approx(1.0)
            for k, r in rates.items():
                se = np.sqrt(r * (1 - r) / n)
                assert abs(kinds.get(k, 0.0) - r) <= 4.5 * se + 1e-12, (in_exp, correct, k)
            intents = {p.intent for p in plans}
            if in_exp:   # inside the expertise the user always judges correctly
                assert intents == {"positive" if correct else "negative"}
    # the configured behaviour itself: tolerance = doubt rate on wrong answers outside
    out_wrong = user.rates(persona, False, False)
    assert out_wrong["doubt"] == pytest.approx(tol)
    assert user.rates(persona, False, True)["doubt"] == pytest.approx(0.5 * tol)
    assert out_wrong["endorse"] == pytest.approx((1 - tol) * 0.3 * expl)


def test_rule_user_texts_are_truthful_inside_expertise():
    user = RuleBasedUser()
    rng = np.random.default_rng(1)
    neg_words = re.compile(r"\b(not|wrong|incorrect|isn't|missed|instead|differently)\b", re.I)
    for style in STYLES:
        persona = Persona("p", ("inside",), style, 0.3, 0.8)
        for correct in (True, False):
            ctx = _ctx(persona, True, correct)
            pairs = [(ctx, user.plan(ctx, rng)) for _ in range(300)]
            for (c, plan), text in zip(pairs, user.render(pairs)):
                assert "$" not in text
                if correct:
                    assert not neg_words.search(text), text
                else:   # a correction always names the reference option
                    assert "C" in text, text


def test_rule_user_feedback_decodes_with_noise():
    """The frozen decoder recovers most explicit verdicts and misses implicit ones: labels are
    informative but noisy, as in the released sessions."""
    from selfknow.protocols.ladder.feedback import decode_feedback
    user = RuleBasedUser()
    rng = np.random.default_rng(2)
    persona = Persona("p", ("inside",), "academic", 0.3, 0.8)
    rows = []
    for in_exp in (True, False):
        for correct in (True, False):
            ctx = _ctx(persona, in_exp, correct)
            pairs = [(ctx, user.plan(ctx, rng)) for _ in range(400)]
            for (c, p), t in zip(pairs, user.render(pairs)):
                rows.append((in_exp, correct, p.kind, t))
    df = pd.DataFrame(rows, columns=["in_exp", "correct", "kind", "text"])
    df["cat"] = decode_feedback(df["text"], "frozen")["decoded_category"].to_numpy()
    conf_pos = (df.loc[df.kind == "confirm", "cat"] == "positive").mean()
    corr_neg = (df.loc[df.kind == "correct", "cat"] == "negative").mean()
    implicit = df.loc[df.kind.str.endswith("implicit") | (df.kind == "neutral"), "cat"]
    assert 0.6 < conf_pos < 1.0 and 0.6 < corr_neg < 1.0
    assert (implicit == "neutral").mean() > 0.95


# ----------------------------------------------------------------------------- LLM user
def test_llm_user_prompts_and_batching():
    seen = []

    def respond(prompt):
        seen.append(prompt)
        return "  Thanks, noted.  \n"
    lm = ScriptedLM(respond, model_id="sim-lm")
    user = LLMUser(lm, max_new_tokens=150, batch_size=4)
    p1 = Persona("p1", ("anatomy", "astronomy"), "curious", 0.3, 0.8)
    p2 = Persona("p2", ("virology",), "formal", 0.4, 0.9)
    rng = np.random.default_rng(0)
    ctxs = [TurnContext(0, 1, "Which bone?", ("a", "b", "c", "d"), "anatomy", "B", "C", False, p1),
            TurnContext(0, 2, "Which star?", ("a", "b", "c", "d"), "astronomy", "A", "A", True, p1),
            TurnContext(1, 1, "Which law?", ("a", "b", "c", "d"), "law", "D", "D", True, p2)]
    plans = [user.plan(c, rng) for c in ctxs]
    assert [p.kind for p in plans] == ["in_wrong", "in_correct", "out_correct"]
    texts = user.render(list(zip(ctxs, plans)))
    assert texts == ["Thanks, noted."] * 3
    assert "The correct answer is C" in seen[0] and "Which bone?" in seen[0]
    assert "The assistant's answer: B" in seen[0]
    system, _ = user.prompts(ctxs[0], plans[0])
    assert "anatomy, astronomy" in system and "curious" in system
    # outside expertise, a wrong answer draws "doubt" with probability = tolerance
    ctx = TurnContext(0, 1, "Q", ("a", "b", "c", "d"), "law", "B", "C", False, p1)
    kinds = [user.plan(ctx, rng).kind for _ in range(20000)]
    assert np.mean([k == "out_wrong_doubt" for k in kinds]) == pytest.approx(0.3, abs=0.015)


def test_llm_user_replies_are_each_sessions_own_draw():
    """Identical turns of two sessions are two draws (the authors call the user every turn)."""
    calls = []

    class Recording(ScriptedLM):
        def generate(self, prompts, *, sample_index=0, **kw):
            calls.append((sample_index, kw["max_new_tokens"], kw["temperature"], len(prompts)))
            return super().generate(prompts, **kw)
    user = LLMUser(Recording(lambda p: "Noted."), max_new_tokens=150)
    p1 = Persona("p1", ("anatomy",), "curious", 0.3, 0.8)
    ctxs = [TurnContext(s, 1, "Which bone?", ("a", "b", "c", "d"), "anatomy", "B", "B", True, p1)
            for s in (0, 3)]
    plans = [user.plan(c, np.random.default_rng(0)) for c in ctxs]
    assert user.prompts(ctxs[0], plans[0]) == user.prompts(ctxs[1], plans[1])
    user.render(list(zip(ctxs, plans)))
    assert sorted(calls) == [(1, 150, 0.7, 1), (4, 150, 0.7, 1)]


# ----------------------------------------------------------------------------- sessions
@pytest.fixture(scope="module")
def pool():
    items = make_items()
    return items, answer_by_cloze(answering_lm(items), items)


def test_session_schema_tiers_and_composition(pool):
    items, answers = pool
    df = run_sessions(items, None, RuleBasedUser(), n_sessions=6, n_turns=50, seed=5,
                      answers=answers, model="toy")
    assert list(df.columns) == LIVE_COLUMNS
    assert list(df.columns[:len(records.TURN_COLUMNS)]) == records.TURN_COLUMNS
    records.validate_turns(df, "live sessions")
    assert len(df) == 300 and set(df["session_id"]) == {str(i) for i in range(6)}
    prof = agent_profile(score_answers(items, answers))
    # 6 domains -> 2 strong / 2 mid / 2 weak, by the model's own accuracy
    assert set(prof["strong_domains"]) == {"dom_5", "dom_4"} and set(prof["weak_domains"]) == {"dom_0", "dom_1"}
    for sid, g in df.groupby("session_id"):
        assert list(g["turn"]) == list(range(1, 51))
        assert g["item_id"].is_unique
        assert g["tier"].value_counts().to_dict() == {"strong": 20, "weak": 20, "mid": 10}
        exp = set(g["persona_expertise"].iloc[0].split("|"))
        assert (g["in_expertise"] == g["domain"].isin(exp)).all()
        assert g["persona_id"].nunique() == 1
    assert session_composition(20) == {"strong": 8, "mid": 4, "weak": 8}
    merged = df.merge(score_answers(items, answers)[["item_id", "answer", "correct"]],
                      on="item_id", suffixes=("", "_pool"))
    assert (merged["correct"] == merged["correct_pool"]).all()
    assert (df["user_model"] == "rules").all() and df["feedback_text"].str.len().gt(0).all()


def test_sessions_deterministic_and_resumable(pool, tmp_path):
    items, answers = pool
    kw = dict(n_sessions=5, n_turns=30, seed=11, answers=answers, model="toy", batch_sessions=2)
    full = run_sessions(items, None, RuleBasedUser(), **kw)
    pd.testing.assert_frame_equal(full, run_sessions(items, None, RuleBasedUser(), **kw))
    other = run_sessions(items, None, RuleBasedUser(), **{**kw, "seed": 12})
    assert not full["item_id"].equals(other["item_id"])

    # an interrupted run: sessions 0, 3 complete, session 1 half written
    partial = full[full["session_id"].isin(["0", "3"])
                   | ((full["session_id"] == "1") & (full["turn"] <= 12))]

    class CountingUser(RuleBasedUser):
        rendered: set = set()

        def render(self, pairs):
            self.rendered |= {c.session_id for c, _ in pairs}
            return super().render(pairs)
    cu = CountingUser()
    resumed = run_sessions(items, None, cu, existing=partial, **kw)
    assert cu.rendered == {1, 2, 4}                     # complete sessions not recomputed
    pd.testing.assert_frame_equal(resumed, full)

    # per-session chunks on disk
    paths = run_sessions_to_dir(tmp_path, items, None, RuleBasedUser(), **kw)
    paths[2].unlink()
    before = {p: p.stat().st_mtime_ns for p in paths if p.exists()}
    cu2 = CountingUser()
    cu2.rendered = set()
    run_sessions_to_dir(tmp_path, items, None, cu2, **kw)
    assert cu2.rendered == {2}
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())
    pd.testing.assert_frame_equal(read_session_chunks(paths), full)


def test_iter_sessions_with_lm_and_small_pool():
    items = make_items(4)          # 24 items: the tier quotas cannot all be met
    lm = answering_lm(items)
    got = dict(iter_sessions(items, lm, RuleBasedUser(), n_sessions=2, n_turns=20, seed=0))
    assert set(got) == {0, 1}
    for df in got.values():
        assert len(df) == 20 and df["item_id"].is_unique
    with pytest.raises(ValueError, match="exceeds the question pool"):
        next(iter_sessions(items, lm, RuleBasedUser(), n_sessions=1, n_turns=30, seed=0))


def sampling_lm(items: pd.DataFrame) -> ScriptedLM:
    """A chat model in the authors' format whose reply depends on the draw (sample_index)."""
    class Sampling(ScriptedLM):
        def generate(self, prompts, *, sample_index=0, **kw):
            self.draws = [*getattr(self, "draws", []), sample_index]
            self._respond = lambda p: (f"Answer: {'ABCD'[(stable(p) + sample_index) % 4]}\n"
                                       f"Confidence: {(stable(p) + 7 * sample_index) % 101}")
            return super().generate(prompts, **kw)
    stable = lambda p: sum(map(ord, p))  # noqa: E731
    return Sampling(lambda p: "")


def test_per_turn_answering_draws_afresh_each_session_and_uses_given_tiers():
    items = make_items(10)
    lm = sampling_lm(items)
    fn = make_answer_fn(lm, "authors", temperature=0.3, max_new_tokens=200)
    tiers = {d: ("strong", "strong", "mid", "mid", "weak", "weak")[i] for i, d in enumerate(DOMAINS)}
    df = run_sessions(items, fn, RuleBasedUser(), n_sessions=6, n_turns=20, seed=2, tiers=tiers,
                      per_turn=True, model="toy")
    assert sorted(set(lm.draws)) == [1, 2, 3, 4, 5, 6]  # session s is draw s + 1; no profile pass
    assert lm.budgets == [200] * len(lm.budgets)
    assert (df["tier"] == df["domain"].map(tiers)).all()
    seen = df.groupby("item_id")[["answer", "confidence"]].nunique()
    assert (seen.max(axis=1) > 1).any()                # a repeated question is answered afresh
    prompts = {p for p in lm.prompts}
    assert all(p.endswith("Confidence: [0-100]") for p in prompts)
    assert set(df["answer_status"]) <= {"ok"} and df["confidence"].between(0, 1).all()
    # reused answers: one answer per item, identical across sessions; tiers from its accuracy
    lm2 = sampling_lm(items)
    reused = run_sessions(items, make_answer_fn(lm2, "authors"), RuleBasedUser(), n_sessions=6,
                          n_turns=20, seed=2, per_turn=False, model="toy")
    assert set(lm2.draws) == {0}
    assert (reused.groupby("item_id")[["answer", "confidence"]].nunique().max(axis=1) == 1).all()
    with pytest.raises(ValueError, match="no tier for domains"):
        run_sessions(items, fn, RuleBasedUser(), n_sessions=1, n_turns=5, tiers={"dom_0": "weak"},
                     per_turn=True)


# ----------------------------------------------------------------------------- prompted
DOMS3 = ["anatomy", "astronomy", "high_school_biology"]


def test_parse_profile_messy_replies():
    pp = parse_profile('Here you go:\n```json\n{"Anatomy": 0.8, "astronomy": "70%", '
                       '"high school biology": "0.65"}\n```\nLet me know!', DOMS3)
    assert pp.status == "ok" and not pp.filled
    assert pp.values == pytest.approx({"anatomy": 0.8, "astronomy": 0.7,
                                       "high_school_biology": 0.65})
    pp = parse_profile("{'anatomy': 80, 'astronomy': 0.5,}", DOMS3)
    assert pp.status == "partial" and pp.filled == {"high_school_biology"}
    assert pp.values == pytest.approx({"anatomy": 0.8, "astronomy": 0.5,
                                       "high_school_biology": 0.5})
    pp = parse_profile('Format: {domain: prob}. Answer: {"anatomy": {"accuracy": 0.9}, '
                       '"astronomy": 150, "high_school_biology": -3}', DOMS3, clip=(0.01, 0.99))
    assert pp.values == pytest.approx({"anatomy": 0.9, "astronomy": 0.99,
                                       "high_school_biology": 0.01})
    pp = parse_profile("anatomy: 75%\nAstronomy - 0.6\nhigh school biology = 55", DOMS3)
    assert pp.status == "regex"
    assert pp.values == pytest.approx({"anatomy": 0.75, "astronomy": 0.6,
                                       "high_school_biology": 0.55})
    pp = parse_profile("I cannot know my own accuracy.", DOMS3)
    assert pp.status == "unparsable" and pp.filled == set(DOMS3)
    assert set(pp.values.values()) == {0.5}


def _history_turns():
    rows = []
    for sid, doms in ((0, ["anatomy"] * 3 + ["astronomy"] * 2 + ["virology"]),
                      (1, ["astronomy"] * 4 + ["anatomy"] * 2)):
        for t, d in enumerate(doms, 1):
            rows.append({"session_id": str(sid), "turn": t, "domain": d,
                         "question": f"q{t} {d}", "answer": "A", "confidence": 0.6 + 0.01 * t,
                         "correct": (t + sid) % 2 == 0, "feedback_text": f"reply {t}"})
    return pd.DataFrame(rows)


def test_gt_selfstats_reproduces_session_accuracy_when_model_copies():
    turns = _history_turns()

    def copier(prompt):   # a model that faithfully reports what it was handed
        pairs = re.findall(r"- (\w+): you answered (\d+) out of (\d+)", prompt)
        return "Sure: " + json.dumps({d: int(c) / int(t) for d, c, t in pairs}) + " done."
    out = gt_selfstats_profiles(ScriptedLM(copier), turns)
    for sid, g in turns.groupby("session_id"):
        st = session_stats(g).set_index("domain")["accuracy"]
        got = out[out["session_id"] == sid].set_index("domain")["p_hat"]
        assert set(got.index) == set(st.index)          # virology (1 turn) not eligible
        assert (got - st).abs().max() == pytest.approx(0.0)
    assert (out["parse_status"] == "ok").all() and not out["filled"].any()
    per = gt_selfstats_profiles(
        ScriptedLM(lambda p: str(100 * int(re.search(r"answered (\d+)", p).group(1))
                                 // int(re.search(r"out of (\d+)", p).group(1)))), turns,
        mode="per_domain")
    assert len(per) == len(out) and (per["parse_status"] == "ok").all()


def test_lsa_and_zs_profiles_count_failures():
    turns = _history_turns()
    replies = iter(['{"anatomy": 0.9}', "no idea, sorry"])
    lsa = lsa_profiles(ScriptedLM(lambda p: next(replies)), turns)
    s0 = lsa[lsa["session_id"] == "0"].set_index("domain")
    assert s0.loc["anatomy", "p_hat"] == 0.9 and s0.loc["astronomy", "filled"]
    assert set(s0["parse_status"]) == {"partial"}
    s1 = lsa[lsa["session_id"] == "1"]
    assert len(s1) == 2 and s1["filled"].all() and set(s1["parse_status"]) == {"unparsable"}
    assert (s1["p_hat"] == 0.5).all()

    prompts = []
    zs = zs_prior(ScriptedLM(lambda p: prompts.append(p) or
                             '{"anatomy": 0.7, "astronomy": "60%", "virology": 0.4}'),
                  ["virology", "anatomy", "astronomy"])
    assert len(prompts) == 1 and "User reaction" not in prompts[0]
    per_session = zs_prior_profiles(zs, turns)
    assert set(per_session.loc[per_session["session_id"] == "0", "domain"]) == {"anatomy",
                                                                             "astronomy"}
    assert per_session.set_index(["session_id", "domain"]).loc[("1", "astronomy"), "p_hat"] == 0.6


def test_json_mode_asks_each_session_for_its_profile_schema():
    """json mode gives every profile prompt the schema of its own domains (the eligible ones
    of that session, in the prompt's order); a reply within it parses "ok". per_domain mode
    (a bare integer, the authors' released format) asks for free text."""
    import jsonschema

    turns = _history_turns()
    lm = ScriptedLM(lambda p: "{}")
    zs_prior(lm, ["virology", "anatomy", "astronomy"])
    lsa_profiles(lm, turns)
    gt_selfstats_profiles(lm, turns)
    want = [["anatomy", "astronomy", "virology"]] + [["anatomy", "astronomy"]] * 4
    assert [s["required"] for s in lm.schemas] == want
    for schema, doms in zip(lm.schemas, want):
        assert schema == profile_schema(doms) and schema["additionalProperties"] is False
        reply = json.dumps({d: 0.25 * (k + 1) for k, d in enumerate(doms)})
        jsonschema.validate(json.loads(reply), schema)
        assert parse_profile(reply, doms).status == "ok"
        with pytest.raises(jsonschema.ValidationError):   # a probability, not a percentage
            jsonschema.validate({**{d: 0.5 for d in doms}, doms[0]: 70}, schema)
    gt_selfstats_profiles(lm, turns, mode="per_domain")
    assert lm.schemas[len(want):] == [None] * 4


def test_lsa_query_confidence():
    turns = _history_turns()
    q = lsa_query_confidence(ScriptedLM(lambda p: "I'd say 80"), turns)
    assert list(q["query_status"][:3]) == ["recorded"] * 3
    assert (q.loc[q["turn"] > 3, "query_confidence"] == 0.8).all()
    assert q.loc[q["turn"] <= 3, "query_confidence"].tolist() == \
        turns.loc[turns["turn"] <= 3, "confidence"].tolist()


# ----------------------------------------------------------------------------- real model
@pytest.mark.slow
def test_real_smollm2_session_and_profile(pytestconfig):
    import torch
    from model_fixtures import smollm2_hf_dir

    from selfknow.models.registry import load_lm

    hf_dir = smollm2_hf_dir(pytestconfig.cache.mkdir("selfknow-models"))
    torch.set_num_threads(1)
    lm = load_lm({"name": "smollm2", "backend": "hf", "path": str(hf_dir), "chat": True},
                 cache_dir=None)
    # CPU-shared machine: a handful of short calls only (SmolLM2-135M rarely follows the
    # JSON formats; what matters here is that real replies flow through and are counted)
    items = make_items(2).head(4)
    lp = answer_by_cloze(lm, items)
    assert lp["answer"].isin(list("ABCD")).all() and lp["confidence"].between(0.25, 1).all()
    user = LLMUser(lm, temperature=0.0, max_new_tokens=12)
    df = run_sessions(items, None, user, n_sessions=1, n_turns=2, seed=0, answers=lp,
                      model="smollm2")
    records.validate_turns(df, "smollm2 session")
    assert len(df) == 2 and (df["user_model"] == lm.model_id).all()
    prof = gt_selfstats_profiles(lm, df.assign(domain="dom_0"), max_new_tokens=16)
    assert len(prof) == 1 and prof["parse_status"].iloc[0] in {
        "ok", "partial", "regex", "regex_partial", "unparsable"}


@pytest.mark.slow
def test_smollm2_gt_selfstats_profiles_parse_when_constrained(pytestconfig):
    """Issue 15: on the offline default SmolLM2-135M-Instruct wrote no parsable GT-SelfStats
    profile (2 of 2 sessions unparsable for wm-small: prose, or JSON cut at the token limit).
    Constrained to the profile schema (the default `structured_output`), on two sessions of 25
    turns over the mini world's domains and the default's token budget, every profile is
    complete: status "ok", no domain filled, every value a probability."""
    from pathlib import Path

    import torch
    import yaml
    from model_fixtures import smollm2_hf_dir

    from selfknow.models.registry import load_lm
    from selfknow.world.generator import domain_names

    torch.set_num_threads(1)
    hf_dir = smollm2_hf_dir(pytestconfig.cache.mkdir("selfknow-models"))
    lm = load_lm({"name": "smollm2", "backend": "hf", "path": str(hf_dir), "chat": True},
                 cache_dir=None)
    assert lm.structured_output
    doms, rng = domain_names(20), np.random.default_rng(0)
    turns = pd.DataFrame([{"session_id": str(s), "turn": t, "domain": str(rng.choice(doms)),
                           "question": f"Which river crosses the city number {t}?",
                           "answer": "A", "confidence": 0.5, "correct": bool(rng.random() < 0.5),
                           "feedback_text": "ok"} for s in range(2) for t in range(1, 26)])
    default = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())
    budget = default["ladder"]["prompted_max_new_tokens"]
    prof = gt_selfstats_profiles(lm, turns, max_new_tokens=budget)
    per = prof.drop_duplicates("session_id")
    assert len(per) == 2 and (per["parse_status"] == "ok").all(), per["raw_response"].tolist()
    assert not prof["filled"].any() and prof["p_hat"].between(0, 1).all()
    assert len(prof) == sum(len(session_stats(g)) for _, g in turns.groupby("session_id"))


def test_lsa_query_confidence_on_no_turns_is_empty():
    """An empty turn table (e.g. no sessions selected for per-turn LSA queries) yields no rows."""
    import pandas as pd

    from selfknow.protocols.ladder.prompted import lsa_query_confidence

    empty = pd.DataFrame(columns=["model", "session_id", "turn", "domain", "question", "correct",
                                  "answer", "confidence", "feedback_text"])
    out = lsa_query_confidence(ScriptedLM(lambda p: "{}"), empty)
    assert len(out) == 0
