"""Cloze scoring of multiple-choice options (how base LMs answer MCQs)."""
import numpy as np
import pytest

from fakes import ScriptedLM
from selfknow.stages.mcq import cloze_prompt, option_probabilities


def test_option_probabilities_are_the_softmax_of_option_loglikelihoods():
    lls = {("Question: q1\nAnswer:", " red"): -1.0, ("Question: q1\nAnswer:", " blue"): -2.5,
           ("Question: q1\nAnswer:", " green"): -0.5,
           ("Ctx\nQuestion: q2\nAnswer:", " yes"): -4.0, ("Ctx\nQuestion: q2\nAnswer:", " no"): -4.0}
    calls = []

    def loglik(c, x):
        calls.append((c, x))
        return lls[(c, x)]

    got = option_probabilities(ScriptedLM(lambda p: "", loglik=loglik), ["q1", "q2"],
                               [["red", "blue", " green "], ["yes", "no"]], ["", "Ctx\n"])
    want = np.exp([-1.0, -2.5, -0.5]) / np.exp([-1.0, -2.5, -0.5]).sum()
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    np.testing.assert_allclose(got[1], [0.5, 0.5], rtol=1e-12)
    assert len(calls) == 5  # one scoring pass, items of different sizes together
    assert cloze_prompt("q2", "Ctx\n") == "Ctx\nQuestion: q2\nAnswer:"


def test_option_probabilities_reject_bad_input():
    lm = ScriptedLM(lambda p: "")
    with pytest.raises(ValueError, match="item 1 has 1 option"):
        option_probabilities(lm, ["a", "b"], [["x", "y"], ["z"]])
    with pytest.raises(ValueError, match="2 questions, 1 choice lists"):
        option_probabilities(lm, ["a", "b"], [["x", "y"]])


def test_shared_generation_stage_answers_base_mcq_by_cloze():
    import pandas as pd

    from selfknow.stages.generation import greedy_answers

    items = pd.DataFrame({"item_id": ["a", "b"], "domain": "d", "question": ["Q1?", "Q2?"],
                          "choices": [["w", "x", "y", "z"]] * 2, "answer": ["C", "A"], "aliases": None})
    lm = ScriptedLM(lambda p: "", loglik=lambda c, x: 0.0 if x == " y" else -2.0)
    out = greedy_answers(lm, items, shots=[], chat=False, max_new_tokens=4)
    assert list(out["answer"]) == ["C", "C"] and list(out["correct"]) == [True, False]
    assert list(out["prompt"]) == ["Question: Q1?\nAnswer:", "Question: Q2?\nAnswer:"]
    assert not out["unparsed"].any()
