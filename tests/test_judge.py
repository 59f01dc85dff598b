import numpy as np
import pandas as pd
import pytest

from fakes import ScriptedLM
from selfknow.stages.judge import exact_match, letter_match, normalise_answer, parse_option_letter


def test_normalise():
    assert normalise_answer("  The  Eiffel Tower!") == "eiffel tower"
    assert normalise_answer(None) == ""


def test_exact_match_aliases():
    assert exact_match("the Beatles", ["Beatles", "The Fab Four"])
    assert exact_match("fab four.", ["Beatles", "The Fab Four"])
    assert not exact_match("Beatle", ["Beatles"])
    assert not exact_match("", [""])  # an empty answer never counts as correct


def test_parse_option_letter():
    assert parse_option_letter("B", 4) == "B"
    assert parse_option_letter("(C) because...", 4) == "C"
    assert parse_option_letter("I think the answer is D.", 4) == "D"
    assert parse_option_letter("B. Paris", 4) == "B"
    # ten options (A-J): a sentence's first word or a lower-case article is no option label
    assert parse_option_letter("I am not sure.", 10) is None
    assert parse_option_letter("A 62-year-old man ...", 10) is None
    assert parse_option_letter("the answer is a drug ...", 10) is None
    assert parse_option_letter("I. Pyelonephritis", 10) == "I"
    assert parse_option_letter("E", 4) is None
    assert parse_option_letter("no idea", 4) is None
    assert parse_option_letter(None, 4) is None
    assert letter_match("b ", "B") and not letter_match(None, "B")


# ---- the LLM judge (persistent §A.5) ----------------------------------------------------
STANDARD = (
    'Below is a question along with the ground-truth answer and 2 candidate answers. Please determine whether '
    'each candidate answer attempts the question (rather than abstaining or not including a well-formed answer), '
    'and if so, determine whether the candidate answer is semantically consistent with the ground-truth answer in '
    'the context of the question. For each candidate answer, output a line with the answer number followed by a '
    'period and a space and exactly one more character: "R" for correct, "W" for incorrect, or "N" for no attempt.'
    '\n\nQuestion: Who wrote Hamlet?\nGround-truth answer: William Shakespeare\nCandidate answers:\n'
    '1. Shakespeare\n2. Marlowe')
MULTI = (
    'Below is a question along with a list of reference ground-truth answers and 1 candidate answer. Please '
    'determine whether each candidate answer attempts the question (rather than abstaining or not including a '
    'well-formed answer), and if so, determine whether the candidate answer is semantically consistent with ANY of '
    'the ground-truth answers in the context of the question. For each candidate answer, output a line with the '
    'answer number followed by a period and a space and exactly one more character: "R" for correct, "W" for '
    'incorrect, or "N" for no attempt.\n\nQuestion: Name a BRCA gene. Just output one of the answers.\n'
    "Reference ground-truth answers: ['BRCA1', 'BRCA2']\nCandidate answers:\n1. BRCA2")


def test_candidates_prompt_is_the_authors_request():
    from selfknow.stages.judge import candidates_prompt

    assert candidates_prompt("Who wrote Hamlet?", ["William Shakespeare"], ["Shakespeare", "Marlowe"]) == STANDARD
    assert candidates_prompt("Name a BRCA gene. Just output one of the answers.", ["BRCA1", "BRCA2"],
                             ["BRCA2"]) == MULTI
    with pytest.raises(ValueError, match="no candidate"):
        candidates_prompt("q?", ["a"], [])


def test_judge_references_single_or_every_accepted_answer():
    from selfknow.stages.judge import judge_references

    assert judge_references("Paris", ["Paris", "Paree", "Paris"], multi_reference=False) == ["Paris"]
    assert judge_references("BRCA1", ["BRCA1", "BRCA2", "BRCA1"], multi_reference=True) == ["BRCA1", "BRCA2"]


def test_parse_labels_by_number():
    from selfknow.stages.judge import parse_labels

    assert parse_labels("1. R\n2. W\n3. N", 3) == ["R", "W", "N"]
    assert parse_labels("2. W\n\n1. R.", 2) == ["R", "W"]          # numbered, not positional
    assert parse_labels("1. R\n2. maybe\n4. R", 3) == ["R", None, None]
    assert parse_labels("1. r", 1) == [None]                      # the authors accept R/W/N only
    assert parse_labels(None, 2) == [None, None]


def test_generated_judgments_count_refusals_and_unparsable_replies():
    from selfknow.stages.judge import judge_candidates, max_judge_tokens

    replies = {"q1": "1. R\n2. W", "q2": "I'm sorry, I can't help with grading this.", "q3": "1. R\n2. yes",
               "q4": "Both look fine."}
    lm = ScriptedLM(lambda p: replies[p.split("Question: ")[1].split("?")[0]])
    qs = ["q1?", "q2?", "q3?", "q4?"]
    out = judge_candidates(lm, qs, [["a"]] * 4, [["a", "b"]] * 4, chat=True, labels="generate")
    assert len(lm.prompts) == 4                                   # one request per question
    assert [j.status for j in out] == ["ok", "refused", "unparsable", "unparsable"]
    assert [j.correct for j in out] == [[True, False], [False, False], [True, False], [False, False]]
    assert out[1].reply == replies["q2"] and out[2].labels == ("R", None)
    assert max_judge_tokens(1) == 16 and max_judge_tokens(10) == 42  # the authors' budget


class _RenderingLM(ScriptedLM):
    """A fake hf judge: renders a chat prompt; its favourite next token depends on the text."""

    def __init__(self, favourite):
        super().__init__(lambda p: "")
        self.favourite, self.scored = favourite, []

    def render(self, prompt, *, chat):
        return f"<user>{prompt}<assistant>" if chat else prompt

    def next_token_logprobs(self, prompts, candidates, *, chat=False):
        assert not chat and candidates == [" R", " W", " N"]
        self.scored += list(prompts)
        return np.array([[0.0 if c == " " + self.favourite(p) else -1.0 for c in candidates] for p in prompts])


def test_constrained_labels_take_the_likeliest_token_per_candidate():
    from selfknow.stages.judge import candidates_prompt, judge_candidates

    # the judge prefers R for candidate 1 of question 1, N for its candidate 2, W everywhere else
    def favourite(context):
        if "Question: one?" in context:
            return "R" if context.endswith("1.") else "N"
        return "W"

    lm = _RenderingLM(favourite)
    out = judge_candidates(lm, ["one?", "two?"], [["a"], ["b"]], [["x", "y"], ["z"]], chat=True,
                           labels="constrained")
    assert [j.labels for j in out] == [("R", "N"), ("W",)] and {j.status for j in out} == {"ok"}
    assert out[0].reply == "1. R\n2. N"
    head = f"<user>{candidates_prompt('one?', ['a'], ['x', 'y'])}<assistant>"
    assert lm.scored == [head + "1.", f"<user>{candidates_prompt('two?', ['b'], ['z'])}<assistant>1.",
                         head + "1. R\n2."]                      # candidate 2 sees the label chosen for 1
    with pytest.raises(ValueError, match="constrained labels need"):
        judge_candidates(ScriptedLM(lambda p: ""), ["q?"], [["a"]], [["b"]], chat=False, labels="constrained")


def test_audit_table_flags_a_judge_at_chance_and_counts_every_judgment(tmp_path):
    from selfknow.report.catalog import JUDGE_CATALOG
    from selfknow.report.jobs import write_catalog
    from selfknow.stages.jobs import judge_audit_table

    em = [True, False] * 20
    rows = []
    for mode, judge in (("generate", [True] * 40), ("constrained", em)):
        for k, (e, j) in enumerate(zip(em, judge)):
            status = "refused" if (mode == "generate" and k < 3) else "unparsable" if (mode == "generate" and k < 5) else "ok"
            rows.append({"judge": "smol", "labels": mode, "exact_match": e, "judge_correct": j and status == "ok",
                         "judge_status": status})
    table, notes = judge_audit_table(pd.DataFrame(rows), replicates=200, seed=0)
    gen, con = table.iloc[0], table.iloc[1]
    assert (gen["items"], gen["refused"], gen["unparsable"]) == (40, 3, 2)  # none dropped
    assert con["agreement"] == 1.0 and con["cohen_kappa"] == 1.0 and con["kappa_low"] > 0.9
    assert gen["kappa_low"] <= 0 <= gen["kappa_high"]
    assert "FLAGGED" in notes and "generate (kappa" in notes and "constrained (kappa" not in notes
    # the judge audit job writes it through its catalog entry: the entry's title, the note one paragraph
    outputs = {f"audit_{e}": str(tmp_path / f"audit.{e}") for e in ("csv", "md")}
    write_catalog(JUDGE_CATALOG, {"judged": pd.DataFrame(rows), "replicates": 200, "seed": 0}, outputs, None)
    assert pd.read_csv(tmp_path / "audit.csv")["items"].tolist() == [40, 40]
    md = (tmp_path / "audit.md").read_text()
    assert md.startswith("### Judge audit: exact match vs the LLM judge\n") and md.endswith(f"\n\n{notes}\n")
    # a bound that rounds to zero prints as 0.000, never -0.000
    judge_zero = [r | {"judge_correct": True} if r["labels"] == "generate" else r for r in rows]
    _, notes = judge_audit_table(pd.DataFrame(judge_zero), replicates=200, seed=0)
    assert "-0.000" not in notes and "[0.000, 0.000]" in notes


def test_cohen_kappa_matches_sklearn():
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from selfknow.stages.judge import cohen_kappa

    rng = np.random.default_rng(0)
    for _ in range(10):
        a = rng.random(50) < 0.6
        b = np.where(rng.random(50) < 0.8, a, ~a)
        assert abs(cohen_kappa(a, b) - cohen_kappa_score(a, b)) < 1e-12
    assert np.isnan(cohen_kappa([True, True], [True, True]))


def test_kappa_interval_is_the_percentile_bootstrap_of_sklearns_kappa():
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from selfknow.stages.judge import kappa_interval

    rng = np.random.default_rng(1)
    a = rng.random(40) < 0.5
    b = np.where(rng.random(40) < 0.75, a, ~a)
    lo, hi = kappa_interval(a, b, replicates=300, seed=7)
    # the same resamples, each scored by scikit-learn
    idx = np.random.default_rng(7).integers(0, 40, size=(300, 40))
    # kappa is undefined only when both raters give one and the same label throughout
    ref = [cohen_kappa_score(a[i], b[i]) for i in idx if len(set(a[i]) | set(b[i])) > 1]
    assert (lo, hi) == pytest.approx((np.percentile(ref, 2.5), np.percentile(ref, 97.5)), abs=1e-12)
    assert lo < cohen_kappa_score(a, b) < hi
    assert all(np.isnan(kappa_interval([True] * 5, [True] * 5, replicates=10, seed=0)))
