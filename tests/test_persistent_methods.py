"""Confidence methods of persistent calibration (§3.1.1, §A.6, §A.7): self-consistency,
answer equivalence, verbalized LoRA confidence, baselines — on hand-computed cases and on
tiny real GPT-2 models built here (random weights, a BPE tokenizer trained in the fixture)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from selfknow.models.base import Beam
from selfknow.models.registry import load_lm
from selfknow.protocols.persistent import baselines as B
from selfknow.protocols.persistent import prompts as P
from selfknow.protocols.persistent import self_consistency as SC
from selfknow.protocols.persistent import verbalized as V
from selfknow.protocols.persistent import views
from selfknow.protocols.persistent.equivalence import (
    Equivalence, NLIEquivalence, NormalisedMatch, entailment_index, get_equivalence, get_normaliser,
    lowercase_no_periods)
from fakes import ScriptedLM


def beams(*pairs):
    return [Beam(t, math.log(p)) for t, p in pairs]


class PairEquivalence(Equivalence):
    """Equivalent iff the unordered pair of lower-cased strings is listed (a verdict on the
    case-folded forms, so one member of each stage-1 group speaks for all)."""

    reads_forms_only = True

    def __init__(self, pairs):
        self.pairs = {frozenset((a.lower(), b.lower())) for a, b in pairs}
        self.calls = 0

    def equivalent(self, question, a, b):
        self.calls += 1
        return frozenset((a.lower(), b.lower())) in self.pairs


# --------------------------------------------------------------------------------------------
# Self-consistency
# --------------------------------------------------------------------------------------------
def test_sc_groups_normalised_answers_and_sums_probability():
    pred, conf, groups = SC.self_consistency(
        beams(("Paris", 0.5), ("paris.", 0.2), ("London", 0.3)), NormalisedMatch())
    assert pred == "Paris"
    assert conf == pytest.approx(0.7)
    assert [(g.members, round(g.probability, 12)) for g in groups] == [
        (("Paris", "paris."), 0.7), (("London",), 0.3)]


def test_sc_weights_are_normalised_over_returned_beams():
    # unnormalised sequence probabilities 0.05/0.02/0.03: the softmax over the returned beams
    # gives 0.5/0.2/0.3, the same answer as above
    bs = [Beam("Paris", math.log(0.05)), Beam("paris.", math.log(0.02)), Beam("London", math.log(0.03))]
    pred, conf, _ = SC.self_consistency(bs, None)
    assert (pred, conf) == ("Paris", pytest.approx(0.7))
    np.testing.assert_allclose(SC.beam_weights([0.0, -np.inf, np.log(3)]), [0.25, 0, 0.75])


def test_sc_prediction_is_top_groups_best_member_and_empty_beams_keep_mass():
    # group {"paris.", "Paris"} wins with 0.4; its best member is "paris." (0.3);
    # the empty beam (0.35) is in no group but still takes its share of the normalisation
    pred, conf, groups = SC.self_consistency(
        beams(("paris.", 0.3), ("", 0.35), ("Paris\nQuestion: x", 0.1), ("Rome", 0.25)), None)
    assert pred == "paris."
    assert conf == pytest.approx(0.4)
    assert sum(g.probability for g in groups) == pytest.approx(0.65)
    assert SC.self_consistency(beams(("", 0.6), ("\n", 0.4)), None) == ("", 0.0, [])


def test_sc_equivalence_merges_remaining_groups_transitively():
    eq = PairEquivalence([("Big Apple", "NYC"), ("NYC", "New York City")])
    pred, conf, groups = SC.self_consistency(
        beams(("Boston", 0.4), ("Big Apple", 0.1), ("NYC", 0.2), ("New York City", 0.15),
              ("nyc", 0.15)), eq, question="Which city?")
    # Big Apple ~ NYC ~ New York City (chain) + "nyc" by normalisation: 0.6 > Boston 0.4
    assert pred in {"NYC", "nyc"} and conf == pytest.approx(0.6)
    assert set(groups[0].members) == {"Big Apple", "NYC", "nyc", "New York City"}
    # the model is asked about stage-1 groups only: 4 groups -> 6 pairs
    assert eq.calls == 6


class RawPairNLI(Equivalence):
    """An NLI stand-in on the raw texts under the authors' normaliser: entailment in both
    directions iff the unordered raw pair is listed; counts the pairs it is asked."""

    normalise = staticmethod(lowercase_no_periods)

    def __init__(self, pairs):
        self.pairs = {frozenset(p) for p in pairs}
        self.asked = []

    def equivalent(self, question, a, b):
        self.asked.append((a, b))
        return frozenset((a, b)) in self.pairs


def authors_groups(answers, weights, nli_pairs):
    """Reference: the authors' `group_answers` (conset/gen_cands.py) re-stated beam by beam:
    drop empty answers, union every pair of beams whose lowercase_no_periods forms are equal
    or whose raw pair NLI entails both ways; groups as sets of beam indices with summed weight."""
    keep = [i for i, a in enumerate(answers) if a.strip()]
    parent = {i: i for i in keep}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for x, i in enumerate(keep):
        for j in keep[x + 1:]:
            a, b = answers[i], answers[j]
            if lowercase_no_periods(a) == lowercase_no_periods(b) or frozenset((a, b)) in nli_pairs:
                parent[find(i)] = find(j)
    groups = {}
    for i in keep:
        groups.setdefault(find(i), set()).add(i)
    return sorted((round(sum(weights[i] for i in g), 12), frozenset(answers[i] for i in g))
                  for g in groups.values())


def test_paper_grouping_is_the_authors_lowercase_forms_then_pairwise_nli():
    answers = ["The Beatles", "Beatles", "Paris, France", "Paris France", "The", "?", "...", ".",
               "NYC", "nyc", "Big Apple", ""]
    weights = np.array([0.2, 0.1, 0.12, 0.08, 0.05, 0.05, 0.04, 0.04, 0.1, 0.1, 0.07, 0.05])
    nli_pairs = {frozenset(("Big Apple", "nyc"))}  # NLI entails with "nyc", not with "NYC"
    eq = RawPairNLI(nli_pairs)
    got = SC.group_answers("q", answers, weights, eq)
    assert sorted((round(g.probability, 12), frozenset(g.members)) for g in got) == \
        authors_groups(answers, weights, nli_pairs)
    by_member = {m: g for g in got for m in g.members}
    # the paper config: no SQuAD merges, and "The", "?", "..." are answers ("..." = ".")
    assert by_member["The Beatles"] is not by_member["Beatles"]
    assert by_member["Paris, France"] is not by_member["Paris France"]
    assert by_member["The"].members == ("The",) and by_member["?"].members == ("?",)
    assert set(by_member["..."].members) == {"...", "."}
    # NLI is asked about every pair of distinct texts: "Big Apple" joins "NYC"/"nyc" by "nyc"
    assert set(by_member["Big Apple"].members) == {"NYC", "nyc", "Big Apple"}
    assert ("nyc", "Big Apple") in eq.asked and ("NYC", "Big Apple") in eq.asked
    assert "" not in by_member and sum(g.probability for g in got) == pytest.approx(0.95)

    # the offline default (SQuAD forms, model-free matcher): the SQuAD merges, and "The",
    # "?", "...", "." are no answers
    default = {frozenset(g.members) for g in SC.group_answers("q", answers, weights, NormalisedMatch())}
    assert {frozenset({"The Beatles", "Beatles"}), frozenset({"Paris, France", "Paris France"}),
            frozenset({"NYC", "nyc"}), frozenset({"Big Apple"})} == default


def test_paper_surrogate_matches_on_the_authors_forms():
    groups = [SC.AnswerGroup(("Beatles",), 0.6), SC.AnswerGroup(("the beatles.",), 0.3)]
    assert SC.surrogate_confidence("q", "The Beatles", groups, RawPairNLI([])) == pytest.approx(0.3)
    assert SC.surrogate_confidence("q", "The Beatles", groups, NormalisedMatch()) == pytest.approx(0.9)
    assert SC.surrogate_confidence("q", "...", [SC.AnswerGroup((".",), 0.2)], RawPairNLI([])) == \
        pytest.approx(0.2)


def test_sc_frame_and_candidates():
    df = pd.DataFrame({
        "item_id": ["q1"] * 3 + ["q2"] * 2,
        "question": ["Capital of France?"] * 3 + ["2+2?"] * 2,
        "text": ["Paris", "paris.", "London", "4", "four"],
        "logprob": np.log([0.5, 0.2, 0.3, 0.9, 0.1]),
    })
    out = SC.self_consistency_frame(df, NormalisedMatch())
    assert out["item_id"].tolist() == ["q1", "q2"]
    np.testing.assert_allclose(out["confidence"], [0.7, 0.9])
    assert out.loc[0, "group_answers"] == ["Paris", "London"]
    cand = SC.candidates_frame(out, 2)
    assert cand["answer"].tolist() == ["Paris", "London", "4", "four"]
    np.testing.assert_allclose(cand["probability"], [0.7, 0.3, 0.9, 0.1])
    with pytest.raises(ValueError, match="logprob"):
        SC.self_consistency_frame(df.drop(columns="logprob"), None)


def test_surrogate_sums_matching_groups_or_zero():
    groups = [SC.AnswerGroup(("Paris", "paris."), 0.6), SC.AnswerGroup(("Lyon",), 0.3),
              SC.AnswerGroup(("City of Light",), 0.05)]
    assert SC.surrogate_confidence("q", "PARIS", groups, None) == pytest.approx(0.6)
    assert SC.surrogate_confidence("q", "Berlin", groups, NormalisedMatch()) == 0.0
    assert SC.surrogate_confidence("q", "", groups, None) == 0.0
    # a new answer equivalent to two surrogate groups takes both masses
    eq = PairEquivalence([("Paree", "Paris"), ("Paree", "City of Light")])
    assert SC.surrogate_confidence("q", "Paree", groups, eq) == pytest.approx(0.65)

    sur = SC.self_consistency_frame(pd.DataFrame({
        "item_id": ["a", "a", "b"], "question": ["qa", "qa", "qb"],
        "text": ["Paris", "Lyon", "7"], "logprob": np.log([0.8, 0.2, 1.0])}), None)
    out = SC.surrogate_frame(pd.DataFrame({"item_id": ["a", "b"], "prediction": ["Lyon", "8"]}),
                             sur, None)
    np.testing.assert_allclose(out["confidence"], [0.2, 0.0])
    with pytest.raises(KeyError, match="zz"):
        SC.surrogate_frame(pd.DataFrame({"item_id": ["zz"], "prediction": ["x"]}), sur, None)


# --------------------------------------------------------------------------------------------
# Equivalence
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("a,b,expected", [
    ("Paris", "paris.", True),              # normalisation
    ("The Beatles", "Beatles", True),       # articles dropped
    ("Smith, John", "John Smith", True),    # token-set equality
    ("River Nile", "the Nile", True),       # designator containment
    ("Mount Everest", "Everest", True),
    ("in 1945", "1945", True),
    ("New York", "York", False),            # name-forming word: different answers
    ("George Bush", "George", False),
    ("River", "River Thames", False),        # the shared part must carry content
    ("", "", False),
    ("Paris", "London", False),
])
def test_normalised_match_rules(a, b, expected):
    eq = NormalisedMatch()
    assert eq.equivalent("q", a, b) is expected
    assert eq.equivalent("q", b, a) is expected


def test_normalised_match_without_containment():
    assert not NormalisedMatch(containment=False).equivalent("q", "River Nile", "Nile")
    assert isinstance(get_equivalence("normalised"), NormalisedMatch)
    with pytest.raises(ValueError, match="unknown equivalence"):
        get_equivalence("bleu")


def test_entailment_index_reads_id2label():
    assert entailment_index({0: "entailment", 1: "neutral", 2: "contradiction"}) == 0
    assert entailment_index({"0": "CONTRADICTION", "1": "ENTAILMENT", "2": "NEUTRAL"}) == 1
    assert entailment_index({0: "not_entailment", 1: "entailment"}) == 1
    with pytest.raises(ValueError, match="entailment"):
        entailment_index({0: "LABEL_0", 1: "LABEL_1"})


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory):
    """A tiny random BERT NLI classifier whose labels are NOT in MNLI order (entailment = 1)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("nli")
    words = "[PAD] [UNK] [CLS] [SEP] question answer : paris london nile river what capital".split()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, num_labels=3,
                     id2label={0: "contradiction", 1: "entailment", 2: "neutral"},
                     label2id={"contradiction": 0, "entailment": 1, "neutral": 2})
    BertForSequenceClassification(cfg).save_pretrained(d)
    return d


def _bias_nli(eq: NLIEquivalence, winner: int):
    """Make the head's argmax `winner` for every input (zero weights, one-hot bias)."""
    eq._load()
    head = eq._model.classifier
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.nn.functional.one_hot(torch.tensor(winner), 3).float() * 5)
    eq._memo.clear()


def test_nli_equivalence_uses_config_label_order(tiny_nli_dir):
    eq = get_equivalence("nli", model_name_or_path=str(tiny_nli_dir))
    assert isinstance(eq, NLIEquivalence) and eq.entail_index == 1
    _bias_nli(eq, 1)  # everything "entailment" (index 1, not 0)
    assert eq.equivalent("what capital", "paris", "london")
    _bias_nli(eq, 0)  # everything "contradiction"
    assert not eq.equivalent("what capital", "paris", "london")
    assert eq.equivalent("what capital", "Paris", "paris.")  # normalised fast path, no model
    # the real forward pass runs on premise/hypothesis pairs in one batch
    assert eq.equivalent_many("q", [("paris", "london"), ("nile", "river nile")]) == [False, False]


def test_nli_equivalence_needs_both_directions(tiny_nli_dir):
    eq = NLIEquivalence(str(tiny_nli_dir))
    seen = []

    def one_way(premises, hypotheses):
        seen.extend(zip(premises, hypotheses))
        # entailment only when the premise holds "paris": paris => london but not back
        return np.array([1 if "Answer: paris" in p else 2 for p in premises])

    eq._argmax_classes = one_way
    eq._entail_index = 1
    eq._model = object()  # never loaded
    assert not eq.equivalent("what capital", "paris", "london")
    assert seen == [("Question: what capital\nAnswer: paris", "Answer: london"),
                    ("Question: what capital\nAnswer: london", "Answer: paris")]
    eq._argmax_classes = lambda p, h: np.ones(len(p), dtype=int)
    assert not eq.equivalent("what capital", "paris", "london")  # memoised verdict
    assert eq.equivalent("what capital", "nile", "river nile")


@pytest.mark.parametrize("raw, expected", [
    # hand-computed from the authors' normalize_answer (conset/dataset_configs/triviaqa.py):
    # extract_between(s, None, "\n") = first line of s.lstrip(), stripped; then lower(),
    # then every "." removed (after the strip, so a space before a final "." stays)
    ("The Beatles", "the beatles"),
    ("Beatles", "beatles"),
    ("  Paris.\nPrompt: next", "paris"),
    ("\n\n Rome \n", "rome"),
    ("St. Louis", "st louis"),
    ("U.S.A.", "usa"),
    ("Paris .", "paris "),
    ("Smith, John", "smith, john"),
    ("a", "a"),
    (None, ""),
])
def test_authors_normalisation(raw, expected):
    assert lowercase_no_periods(raw) == expected
    assert get_normaliser("lowercase_no_periods") is lowercase_no_periods


def test_normalisation_decides_which_pairs_reach_nli(tiny_nli_dir):
    """Under SQuAD normalisation "The Beatles" / "Beatles" merge with no model call; under the
    authors' rule only case and periods are free, and the NLI model decides the pair."""
    from selfknow.protocols.persistent import jobs as J

    pairs = [("The Beatles", "Beatles"), ("Paris.", "paris"), ("the Nile", "Nile"), ("U.S.A.", "usa")]
    verdicts = {}
    for rule in ("squad", "lowercase_no_periods"):
        eq = J.make_equivalence(f"nli:{tiny_nli_dir}", normalisation=rule)
        asked = []
        eq._argmax_classes = lambda p, h, asked=asked: asked.extend(h) or np.full(len(p), 2)  # "contradiction"
        eq._entail_index, eq._model = 0, object()
        verdicts[rule] = (eq.equivalent_many("q", pairs), asked)
    assert verdicts["squad"] == ([True, True, True, True], [])
    got, asked = verdicts["lowercase_no_periods"]
    assert got == [False, True, False, True]
    assert asked == ["Answer: Beatles", "Answer: The Beatles", "Answer: Nile", "Answer: the Nile"]
    assert J.make_equivalence("normalised", normalisation="lowercase_no_periods").normalise is lowercase_no_periods
    with pytest.raises(ValueError, match="unknown answer normalisation"):
        J.make_equivalence("normalised", normalisation="nfkc")


def test_nli_reads_the_raw_decoded_beams(tiny_nli_dir):
    """conset/gen_cands.py run_nli builds its premises from the decoded beams as generate
    returns them (the stopping newline token included), not from the cleaned first lines."""
    eq = NLIEquivalence(str(tiny_nli_dir), normalise=lowercase_no_periods)
    seen = []
    eq._argmax_classes = lambda p, h: seen.extend(zip(p, h)) or np.full(len(p), 2)
    eq._entail_index, eq._model = 0, object()
    beams = [Beam(" Paris", -0.1, " Paris\n"), Beam(" paris.", -0.5, " paris.\n\n"),
             Beam(" Lyon", -1.0, " Lyon.\nPrompt")]
    pred, conf, groups = SC.self_consistency(beams, eq, question="capital?")
    assert pred == "Paris" and [g.members for g in groups] == [("Paris", "paris."), ("Lyon",)]
    assert seen[:2] == [("Question: capital?\nAnswer:  Paris\n", "Answer:  Lyon.\nPrompt"),
                        ("Question: capital?\nAnswer:  Lyon.\nPrompt", "Answer:  Paris\n")]
    assert len(seen) == 4  # both raw members of the first group against Lyon, both ways
    # a beam table's raw column reaches the same premises; without it the text is read
    table = pd.DataFrame({"item_id": ["a"] * 3, "question": ["capital?"] * 3,
                          "text": [b.text for b in beams], "logprob": [b.logprob for b in beams],
                          "raw": [b.raw for b in beams]})
    seen.clear()
    eq._memo.clear()
    SC.self_consistency_frame(table, eq)
    assert seen[0] == ("Question: capital?\nAnswer:  Paris\n", "Answer:  Lyon.\nPrompt")
    seen.clear()
    eq._memo.clear()
    SC.self_consistency_frame(table.drop(columns="raw"), eq)
    assert seen[0] == ("Question: capital?\nAnswer:  Paris", "Answer:  Lyon")


def test_nli_runs_on_the_jobs_gpu_a_questions_pairs_in_one_batch(tiny_nli_dir, monkeypatch):
    from selfknow.protocols.persistent import jobs as J

    assert J.side_device({"device": "cpu"}) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert J.side_device({"device": "cuda"}) == J.side_device({"device": "auto"}) == "cuda"
    assert J.side_device({"device": "cuda:1"}) == "cuda:1"
    gpu = J.make_equivalence(f"nli:{tiny_nli_dir}", normalisation="squad", device="cuda")
    assert (gpu.device, gpu.batch_size) == ("cuda", J.NLI_GPU_BATCH) and gpu._model is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert J.side_device({"device": "cuda"}) == "cpu"  # no GPU visible: the CPU
    # 10 answers: all 45 pairs (90 directed rows) in one padded batch give the verdicts of
    # one row at a time
    answers = ["paris", "london", "nile", "river nile", "what", "capital paris", "london nile",
               "answer", "paris river", "question"]
    pairs = [(a, b) for i, a in enumerate(answers) for b in answers[i + 1:]]
    batched = NLIEquivalence(str(tiny_nli_dir), batch_size=J.NLI_GPU_BATCH)
    single = NLIEquivalence(str(tiny_nli_dir), batch_size=1)
    calls = []
    run = batched._argmax_classes
    batched._argmax_classes = lambda p, h: calls.append(len(p)) or run(p, h)
    got = batched.equivalent_many("what capital", pairs)
    assert calls == [90] and got == single.equivalent_many("what capital", pairs)
    premises = [NLIEquivalence.PREMISE.format(question="what capital", answer=a) for a, _ in pairs]
    hypotheses = [NLIEquivalence.HYPOTHESIS.format(answer=b) for _, b in pairs]
    np.testing.assert_array_equal(run(premises, hypotheses), single._argmax_classes(premises, hypotheses))


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------
def test_icl_examples_are_seeded_and_prompts_are_the_authors_templates():
    train = pd.DataFrame({"question": [f"q{i}" for i in range(8)] + ["q0"],
                          "answer": [f"a{i}" for i in range(8)] + ["dup"]})
    icl = P.select_icl_examples(train, 5, seed=3)
    assert icl == P.select_icl_examples(train, 5, seed=3) and len({q for q, _ in icl}) == 5
    assert icl != P.select_icl_examples(train, 5, seed=4)
    p = P.qa_prompt("Where?", [("Q1", "A1"), ("Q2", "A2")])
    assert p == "Question: Q1\nAnswer: A1\n\nQuestion: Q2\nAnswer: A2\n\nQuestion: Where?\nAnswer:"
    assert P.qa_prompt("x", [], label="Prompt") == "Prompt: x\nAnswer:"
    v = P.confidence_prompt("Who?", "Bob", "Confidence:")
    assert v == ("Rate your confidence on a scale of 0-9, where 0 is completely uncertain and 9 "
                 "is completely certain.\n\nQuestion: Who?\nCandidate answer: Bob\nConfidence:")
    g = P.confidence_prompt("Who?", "Bob", "Confidence: ", "gcm")
    assert "###Prompt\nQuestion: Who?\nAnswer:\n###Response\nBob\n" in g and g.endswith("\nConfidence: ")
    # the released GCM's user turn, character for character (conset/pred_confidence_gcm.py)
    assert P.released_gcm_prompt("Who?", "Bob") == (
        "You are grading responses to prompts for correctness, responses could be generated from multiple LLMs."
        "\n###Prompt\nQuestion: Who?\nAnswer:\n###Response\nBob\n###Instruction\n"
        "Please respond just 'yes' or 'no' in lowercase if the Response correctly answers the Prompt: ")
    with pytest.raises(ValueError, match="only 2"):
        P.select_icl_examples(train.iloc[:2], 5)


def test_question_shots_shared_or_per_domain():
    # the mini world reserves no examples: one seeded draw for every question, by domain or not
    world = pd.DataFrame({"question": [f"q{i}" for i in range(8)], "answer": [f"a{i}" for i in range(8)],
                          "domain": ["d1", "d2"] * 4, "split": "train"})
    shared = P.select_icl_examples(world, 2, seed=3)
    assert P.question_shots(world, ["d1", "d2"], 2, 3, by_domain=True) == shared
    assert P.question_shots(world, ["d1"], 0, 3, by_domain=False) == []
    # reserved examples of two types, interleaved: by type, each its own in order; shared, the first two
    reserved = pd.DataFrame({"question": ["F1", "L1", "F2", "L2", "t"], "answer": ["f1", "l1", "f2", "l2", "x"],
                             "domain": ["factoid", "list", "factoid", "list", "list"],
                             "split": ["icl"] * 4 + ["train"]})
    by_type = P.question_shots(reserved, ["list", "factoid", "list"], 2, 0, by_domain=True)
    assert by_type == {"factoid": [("F1", "f1"), ("F2", "f2")], "list": [("L1", "l1"), ("L2", "l2")]}
    assert P.question_shots(reserved, ["list"], 2, 0, by_domain=False) == [("F1", "f1"), ("L1", "l1")]
    assert P.qa_prompts(["Q?", "R?"], ["list", "factoid"], by_type, label="Prompt") == [
        "Prompt: L1\nAnswer: l1\n\nPrompt: L2\nAnswer: l2\n\nPrompt: Q?\nAnswer:",
        "Prompt: F1\nAnswer: f1\n\nPrompt: F2\nAnswer: f2\n\nPrompt: R?\nAnswer:"]
    with pytest.raises(ValueError, match=r"no in-context examples of domain\(s\) \['yesno'\]"):
        P.qa_prompts(["Q?"], ["yesno"], by_type)


# --------------------------------------------------------------------------------------------
# Verbalized read-out and schedule
# --------------------------------------------------------------------------------------------
def test_confidence_formula_against_hand_computation():
    logits = np.full((2, 10), -np.inf)
    logits[0, [0, 9]] = np.log([0.25, 0.75])          # E[d] = 6.75 -> 0.75
    logits[1] = np.log(np.arange(1, 11))               # p_d ∝ d+1 -> E[d] = 330/55 = 6
    lp = logits + 3.0                                  # not normalised: renormalised over ten
    np.testing.assert_allclose(V.confidence_from_digit_logprobs(lp), [0.75, 6 / 9])


def test_predict_confidence_uses_next_token_logprobs_of_digits():
    ro = V.Readout()
    calls = []

    def nxt(prompt, cands):
        calls.append((prompt, tuple(cands)))
        return np.log([0.1] * 10) if "Bob" in prompt else np.log([0.0001] * 9 + [0.9991])

    lm = ScriptedLM(lambda p: "", next_token=nxt)
    conf = V.predict_confidence(lm, ["Who?", "Who?", "Who?"], ["Bob", "Al", "Bob"], batch_size=2,
                                readout=ro)
    np.testing.assert_allclose(conf, [0.5, (0.0001 * 36 + 0.9991 * 9) / 9, 0.5])
    assert calls[0] == (ro.prompt("Who?", "Bob"), tuple(f" {d}" for d in range(10)))
    with pytest.raises(ValueError, match="readout"):
        V.predict_confidence(lm, ["q"], ["a"])


def test_lr_schedule_is_the_authors_wsd():
    """conset/train_confidence.py WSDScheduler: int(0.2 T) decay steps, decay step k of D at
    0.1 + 0.9 (1 + cos(pi k / D)) / 2 of the peak, k from 0 (the first still at the peak)."""
    hp = V.AdapterHParams()  # 2e-4 -> 2e-5, stable 80 %
    lrs = [V.lr_at_step(s, 10, hp) for s in range(10)]
    # T = 10: D = 2, steps 0-7 flat, step 8 k=0 (peak), step 9 k=1: 2e-5 + 1.8e-4 x 0.5
    assert lrs == [2e-4] * 9 + [pytest.approx(1.1e-4, rel=1e-12)]
    # T = 5: int(5 x 0.2) = 1 decay step, at k=0: the whole run at the peak
    assert [V.lr_at_step(s, 5, hp) for s in range(5)] == [2e-4] * 5
    # the paper's T = ceil(5000 / 16) = 313: D = int(62.6) = 62 (round() would give 63)
    assert V.lr_at_step(250, 313, hp) == V.lr_at_step(251, 313, hp) == 2e-4
    assert V.lr_at_step(252, 313, hp) < 2e-4
    # last step k = 61: 2e-5 + 1.8e-4 (1 - cos(pi / 62)) / 2, above the minimum
    assert V.lr_at_step(312, 313, hp) == pytest.approx(2.0115514354605253e-05, rel=1e-12)
    with pytest.raises(ValueError):
        V.lr_at_step(313, 313, hp)


def test_bce_clamps_the_confidence_straight_through():
    """forward_confidence: p clamped to [1e-6, 1 - 1e-6] forward, gradient passed through."""
    # all mass on "0": p = 5 e^-50 (~1e-21), clamped to 1e-6
    logits = torch.tensor([[50.0] + [0.0] * 9] * 2, requires_grad=True)
    loss = V.authors_bce(logits, torch.tensor([1.0, 0.0]))
    assert loss[0].item() == pytest.approx(13.815510557964274, rel=1e-6)  # -log(1e-6)
    # -log(1 - 1e-6) in float32, where 1 - 1e-6 rounds to 1 - 2^-20
    assert loss[1].item() == pytest.approx(2.0 ** -20, rel=1e-6)
    # the gradient is d/dp of -log p at the clamped 1e-6 (-1e6), times dp/dlogits unclamped
    (g,) = torch.autograd.grad(loss[0], logits)
    probs = torch.softmax(logits.detach()[0], -1)
    v = torch.arange(10) / 9.0
    dp = probs * (v - (probs * v).sum())
    torch.testing.assert_close(g[0], -1e6 * dp, rtol=1e-4, atol=0)
    assert g[0, 9].item() < 0  # a gradient survives where an unclamped BCE would saturate
    # inside the clamp it is the plain BCE: uniform digits, p = 0.5
    mid = V.authors_bce(torch.zeros(1, 10), torch.tensor([1.0]))
    assert mid.item() == pytest.approx(math.log(2), rel=1e-6)


def test_question_batches_are_the_authors_shuffle():
    """group_examples_by_question: RandomState(seed + epoch).shuffle over the canonical order,
    runs of batch_size questions, the last one short."""
    qids = [f"q{i}" for i in range(10)]
    # np.random.RandomState(17).shuffle(list(range(10))) -> [7, 2, 5, 3, 4, 0, 9, 8, 6, 1]
    assert V.question_batches(qids, 17, 0, 4) == [["q7", "q2", "q5", "q3"], ["q4", "q0", "q9", "q8"],
                                                  ["q6", "q1"]]
    # epoch 1 of seed 17 is seed 18's epoch 0: [7, 9, 0, 4, 2, 1, 6, 5, 8, 3]
    assert V.question_batches(qids, 17, 1, 16) == V.question_batches(qids, 18, 0, 16) == [
        [f"q{i}" for i in (7, 9, 0, 4, 2, 1, 6, 5, 8, 3)]]
    # the canonical order matters: the same ids listed otherwise are shuffled otherwise
    assert V.question_batches(qids[::-1], 17, 0, 16) != V.question_batches(qids, 17, 0, 16)


def test_adapter_hparams_come_from_the_config():
    from conftest import REPO

    from selfknow.config import load_config
    from selfknow.protocols.persistent.jobs import _hparams

    # the schema's defaults, which the paper config keeps, are §A.7's
    paper = load_config(REPO / "config" / "paper.yaml")["persistent"]["adapter"]
    hp = V.AdapterHParams.from_dict(paper)
    assert (hp.r, hp.alpha, hp.dropout, hp.lr, hp.min_lr, hp.stable_frac, hp.batch_size, hp.epochs,
            hp.betas, hp.weight_decay) == (8, 16, 0.0, 2e-4, 2e-5, 0.8, 16, 1, (0.9, 0.999), 0.01)
    assert hp == V.AdapterHParams()
    # the offline default's values reach training beside the job's own settings
    default = load_config(REPO / "config.yaml")["persistent"]["adapter"]
    hp = V.AdapterHParams.from_dict(_hparams({"device": "cpu"}, 2, default))
    assert hp.num_threads == 2 and hp.epochs == default["epochs"] > 1 and hp.lr == default["lr"]
    with pytest.raises(ValueError, match="unknown adapter hyper-parameters"):
        V.AdapterHParams.from_dict({"rank": 8})


def _pooled(*frames):
    """Training frames pooled as one view's data, one source each (`jobs.adapter_examples`)."""
    return pd.concat([f.assign(source=f"s{k}") for k, f in enumerate(frames)], ignore_index=True)


def test_training_frame_helpers():
    cand = pd.DataFrame({"item_id": ["a", "a", "a", "b"], "question": ["qa"] * 3 + ["qb"],
                         "answer": ["x", "y", "z", "w"], "probability": [0.2, 0.5, 0.3, 0.9],
                         "correct": [True, False, True, False]})
    tf = V.training_frame(cand, 2)
    assert tf["answer"].tolist() == ["y", "z", "w"]
    prep = V.prepare_frame("c", tf)
    np.testing.assert_allclose(prep["loss_weight"], [0.625, 0.375, 1.0])
    # pooled sources: each (question, source) weighs 1/sources, so every question weighs 1
    p4 = V.prepare_frame("c4", _pooled(tf, tf.assign(correct=True)))
    np.testing.assert_allclose(p4.groupby("question_id")["loss_weight"].sum(), [1.0, 1.0])
    r1, r2 = V.randomise_labels(tf, 1), V.randomise_labels(tf, 1)
    assert r1["correct"].tolist() == r2["correct"].tolist()
    big = V.randomise_labels(pd.DataFrame({"correct": [True] * 2000}), 5)["correct"]
    assert 0.45 < big.mean() < 0.55
    with pytest.raises(ValueError, match="'c'.*correct"):
        V.prepare_frame("c", tf.drop(columns="correct"))


# --------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------
def test_end_correct_and_copy():
    np.testing.assert_allclose(B.end_correct_confidences(3), [0, 0.5, 1])
    np.testing.assert_allclose(B.end_correct_confidences(4), [0, 1 / 3, 2 / 3, 1])
    with pytest.raises(ValueError):
        B.end_correct_confidences(1)
    items = pd.DataFrame({"checkpoint": ["c5", "c3", "c4"], "item_id": [1, 1, 1]})
    np.testing.assert_allclose(B.end_correct_frame(items, ["c3", "c4", "c5"])["confidence"], [1, 0, 0.5])
    src = pd.DataFrame({"item_id": ["a", "b"], "confidence": [0.2, 0.9]})
    np.testing.assert_allclose(B.copy_confidences(src, ["b", "a", "b"]), [0.9, 0.2, 0.9])
    with pytest.raises(KeyError, match="'c'"):
        B.copy_confidences(src, ["c"])
    pool = B.gcm_training_frame({"c1": src.assign(question="q", answer="x", correct=True),
                                 "c2": src.assign(question="q", answer="y", correct=False)})
    assert pool["source"].tolist() == ["c1", "c1", "c2", "c2"]


# --------------------------------------------------------------------------------------------
# Tiny real models
# --------------------------------------------------------------------------------------------
WORDS = ("apple river stone cloud tiger maple copper violet harbor lantern meadow falcon "
         "pepper marble willow ember").split()


def _corpus():
    rng = np.random.default_rng(0)
    out = []
    for i in range(300):
        q = " ".join(rng.choice(WORDS, 4))
        a = str(rng.choice(WORDS))
        out.append(P.confidence_prompt(f"which {q}?", a, f"Confidence: {i % 10}"))
        out.append(f"Question: which {q} zebra?\nAnswer: {a}")
    # digits after a space are frequent, so the BPE learns the " 0".." 9" merges as GPT-2 has
    out += ["scores: 0 1 2 3 4 5 6 7 8 9"] * 100
    return out


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """Three tiny random GPT-2 checkpoints (different weights, one architecture) sharing a
    byte-level BPE tokenizer trained here; ~130K parameters each."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("gpt2")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_corpus(), trainers.BpeTrainer(
        vocab_size=480, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", pad_token="<|endoftext|>")
    dirs = []
    for s in (0, 1, 2):
        torch.manual_seed(s)
        m = GPT2LMHeadModel(GPT2Config(vocab_size=len(fast), n_positions=256, n_embd=64,
                                       n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0))
        d = root / f"ckpt{s}"
        m.save_pretrained(d)
        fast.save_pretrained(d)
        dirs.append(str(d))
    return dirs


@pytest.fixture(scope="module")
def tiny_llamas(tmp_path_factory, tiny_models):
    """Three tiny random Llama checkpoints (rotary positions, 2 query heads per KV head,
    untied embeddings) with the GPT-2 checkpoints' tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_models[0])
    root = tmp_path_factory.mktemp("llama")
    dirs = []
    for s in (0, 1, 2):
        torch.manual_seed(s)
        m = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=256, bos_token_id=0, eos_token_id=0))
        d = root / f"ckpt{s}"
        m.save_pretrained(d)
        tok.save_pretrained(d)
        dirs.append(str(d))
    return dirs


def _marker_data(n, seed):
    """Correct exactly when the question contains the marker word 'zebra'."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        mk = bool(rng.random() < 0.5)
        q = "which " + " ".join(rng.choice(WORDS, 4)) + (" zebra" if mk else "") + "?"
        rows.append({"question_id": f"{seed}-{i}", "question": q,
                     "answer": str(rng.choice(WORDS)), "correct": mk})
    return pd.DataFrame(rows)


def _bce(p, y):
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def test_digit_format_from_tokenizer(tiny_models):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models[0])
    ro = V.digit_format_for(tok)
    # this BPE learnt the " 0".." 9" merges: "Confidence: 7" = "Confidence:" + " 7"
    assert ro.suffix == "Confidence:" and ro.candidates[7] == " 7"
    assert all(len(tok.encode(c, add_special_tokens=False)) == 1 for c in ro.candidates)

    class SplitDigits:  # a tokenizer that keeps the space apart from digits (cl100k style)
        def encode(self, s, add_special_tokens=False):
            return [ord(ch) for ch in s]

    ro2 = V.digit_format_for(SplitDigits())
    assert ro2.suffix == "Confidence: " and ro2.candidates == tuple("0123456789")


def test_every_step_divides_by_the_batch_size_and_shuffles_the_split_order(tiny_models, tmp_path):
    """The authors' weights 1 / (batch_size x checkpoints): the short last batch (4 of 20
    questions) is divided by 16 too. lr 0 keeps the adapter at its zero start, so each step's
    loss is the base model's BCE summed over the step's questions, over 16."""
    data = _marker_data(20, 3)
    hp = V.AdapterHParams(lr=0.0, min_lr=0.0)
    V.train_adapter({"c0": (tiny_models[0], data)}, tmp_path / "a", seed=5, hparams=hp)
    steps = json.loads((tmp_path / "a" / V.TRAINING_LOG_FILE).read_text())["steps"]
    p = np.clip(V.score_local(tiny_models[0], None, data["question"], data["answer"]), 1e-6, 1 - 1e-6)
    y = data["correct"].to_numpy(float)
    bce = dict(zip(data["question_id"], -(y * np.log(p) + (1 - y) * np.log(1 - p))))
    batches = V.question_batches(list(data["question_id"]), 5, 0, 16)  # the split's order
    assert [len(b) for b in batches] == [16, 4] == [st["n_questions"] for st in steps]
    for st, b in zip(steps, batches):
        assert st["loss"] == pytest.approx(sum(bce[q] for q in b) / 16, rel=1e-5)


def test_a_checkpoint_without_answers_trains_nothing(tiny_models, tmp_path):
    """Under generate's beam rules an untrained checkpoint can stop every beam before any
    answer (":\n", "::\n"): it gives no examples, the adapter trains on the other views, and
    with none at all it is saved untrained, scoring as the base model."""
    from selfknow.protocols.persistent import jobs as J

    sc = pd.DataFrame({"item_id": ["a", "b"], "question": ["qa", "qb"], "group_answers": [[], []],
                       "group_probs": [[], []], "group_correct": [[], []]})
    none = J.training_examples(sc, 2)
    assert none.empty
    data = _marker_data(20, 4)
    hp = V.AdapterHParams(lr=5e-3, min_lr=5e-4, readout_warmup=2)
    V.train_adapter({"c0": (tiny_models[0], none)}, tmp_path / "none", seed=0, hparams=hp)
    log = json.loads((tmp_path / "none" / V.TRAINING_LOG_FILE).read_text())
    assert log["checkpoints"] == [] and log["without_examples"] == ["c0"]
    base = V.score_local(tiny_models[0], None, data["question"], data["answer"])
    untrained = V.score_local(tiny_models[0], str(tmp_path / "none"), data["question"], data["answer"])
    np.testing.assert_allclose(untrained, base, atol=1e-6)
    V.train_adapter({"c0": (tiny_models[0], data), "c1": (tiny_models[1], none)}, tmp_path / "one",
                    seed=0, hparams=hp)
    log = json.loads((tmp_path / "one" / V.TRAINING_LOG_FILE).read_text())
    assert log["checkpoints"] == ["c0"] and log["without_examples"] == ["c1"] and log["total_steps"] == 4


def test_lora_training_learns_correctness_and_adapter_loads(tiny_models, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    train, test = _marker_data(192, 1), _marker_data(160, 2)
    hp = V.AdapterHParams(lr=5e-3, min_lr=5e-4, epochs=2)
    before = V.score_local(tiny_models[0], None, test["question"], test["answer"])
    out = tmp_path / "adapter"
    V.train_adapter({"c0": (tiny_models[0], train)}, out, seed=0, hparams=hp)
    after = V.score_local(tiny_models[0], str(out), test["question"], test["answer"])
    y = test["correct"].to_numpy(float)
    from selfknow.stats.classification import auc

    assert auc(after, y) > 0.95
    assert _bce(after, y) < _bce(before, y) - 0.1
    log = json.loads((out / V.TRAINING_LOG_FILE).read_text())
    losses = [s["loss"] for s in log["steps"]]
    assert log["total_steps"] == len(losses) == 24  # ceil(192/16) x 2 epochs
    assert np.mean(losses[-4:]) < losses[0] - 0.1
    # WSD over 24 steps: int(4.8) = 4 decay steps, the first at the peak; the last (k = 3) at
    # 5e-4 + 4.5e-3 (1 + cos(3 pi / 4)) / 2
    assert [s["lr"] for s in log["steps"]][:21] == [5e-3] * 21
    assert log["steps"][-1]["lr"] == pytest.approx(0.0011590097423302681, rel=1e-12)

    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16 and cfg["lora_dropout"] == 0.0
    assert cfg["bias"] == "none"
    assert {m.rsplit(".", 1)[-1] for m in cfg["target_modules"]} == {"c_attn", "c_proj", "c_fc"}
    base = AutoModelForCausalLM.from_pretrained(tiny_models[0])
    lm_head_before = base.lm_head.weight.detach().clone()
    pm = PeftModel.from_pretrained(base, str(out))
    names = [n for n, _ in pm.named_parameters() if "lora_" in n]
    assert names and not any("lm_head" in n or "wte" in n for n in names)
    assert torch.equal(pm.get_output_embeddings().weight, lm_head_before)
    from transformers import AutoTokenizer

    assert V.load_readout(out) == V.digit_format_for(AutoTokenizer.from_pretrained(tiny_models[0]))

    # the workflow's path: the hf backend with the adapter, through next_token_logprobs
    lm = load_lm({"name": "tiny", "backend": "hf", "path": tiny_models[0]}, cache_dir=None,
                 adapter=str(out))
    via_lm = V.predict_confidence(lm, test["question"][:20].tolist(), test["answer"][:20].tolist())
    np.testing.assert_allclose(via_lm, after[:20], atol=1e-5)


def _one_digit_prior(model_dir, out_dir, digit="5", gain=20.0):
    """`model_dir` re-saved with the (tied) embedding of `digit`'s read-out token moved along
    the mean final hidden state of confidence prompts: after "Confidence:" nearly all the
    digit mass sits on `digit`, as in the mini world's models (wm-base phase6: 84 % on "5")."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ro = V.digit_format_for(tok)
    data = _marker_data(32, 9)
    enc = tok([ro.prompt(q, a) for q, a in zip(data["question"], data["answer"])], return_tensors="pt",
              padding=True)
    with torch.no_grad():
        h = model(**enc, output_hidden_states=True).hidden_states[-1]
        last = enc["attention_mask"].sum(1) - 1
        mean_h = h[torch.arange(len(last)), last].mean(0)
        tid = tok.encode(ro.candidates[int(digit)], add_special_tokens=False)[0]
        model.get_output_embeddings().weight[tid] += gain * mean_h / mean_h.norm() ** 2
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return str(out_dir)


def test_readout_warmup_rescues_a_one_digit_prior(tiny_models, tmp_path):
    """A base whose digits start near one-hot leaves a BCE-trained adapter a constant (the
    gradient through the saturated softmax vanishes); the read-out warm-up first spreads the
    digit mass, then the same training learns."""
    from selfknow.stats.classification import auc

    base = _one_digit_prior(tiny_models[0], tmp_path / "base")
    train, test = _marker_data(192, 1), _marker_data(160, 2)
    y = test["correct"].to_numpy(float)
    before = V.score_local(base, None, test["question"], test["answer"])
    assert before.std() < 1e-3 and before.mean() == pytest.approx(5 / 9, abs=1e-3)
    results = {}
    for warmup in (0, 12):
        hp = V.AdapterHParams(lr=5e-3, min_lr=5e-4, epochs=2, readout_warmup=warmup)
        V.train_adapter({"c0": (base, train)}, tmp_path / f"w{warmup}", seed=0, hparams=hp)
        results[warmup] = V.score_local(base, str(tmp_path / f"w{warmup}"), test["question"], test["answer"])
    assert results[0].std() < 1e-6 and auc(results[0], y) < 0.6  # a constant: 5/9
    assert auc(results[12], y) > 0.95 and results[12].std() > 100 * results[0].std()
    log = json.loads((tmp_path / "w12" / V.TRAINING_LOG_FILE).read_text())
    warm = [s for s in log["steps"] if s["epoch"] == -1]
    assert len(warm) == 12 and len(log["steps"]) == 12 + 24
    assert warm[-1]["loss"] < warm[0]["loss"] - 1.0  # cross-entropy to uniform digits falls


def test_training_is_deterministic_given_seed(tiny_models, tmp_path):
    from safetensors.torch import load_file

    data = _marker_data(40, 3)
    hp = V.AdapterHParams(lr=5e-3)
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        V.train_adapter({"c0": (tiny_models[0], data)}, tmp_path / name, seed=seed, hparams=hp)
    wa, wb, wc = (load_file(tmp_path / n / "adapter_model.safetensors") for n in "abc")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


def test_bf16_autocast_and_eager_attention_train_in_those_kernels(tiny_models, tmp_path, monkeypatch):
    """`autocast: bfloat16` runs the base model's matrix products in bfloat16 while the adapter
    keeps float32 weights; `attention: eager` trains through transformers' eager attention;
    both are deterministic given the seed and differ from the float32 run."""
    from safetensors.torch import load_file
    from transformers.models.gpt2 import modeling_gpt2
    from transformers.pytorch_utils import Conv1D

    seen: dict[str, set] = {"dtype": set(), "eager": set()}
    conv_forward, eager_forward = Conv1D.forward, modeling_gpt2.eager_attention_forward

    def conv(self, x):
        out = conv_forward(self, x)
        seen["dtype"].add(out.dtype)
        return out

    def eager(*args, **kw):
        seen["eager"].add(True)
        return eager_forward(*args, **kw)

    monkeypatch.setattr(Conv1D, "forward", conv)
    monkeypatch.setattr(modeling_gpt2, "eager_attention_forward", eager)
    data = _marker_data(40, 3)
    fast = {"autocast": "bfloat16", "attention": "eager"}
    for name, extra in (("fp32", {}), ("bf16", fast), ("bf16-again", fast)):
        seen["dtype"].clear()
        seen["eager"].clear()
        V.train_adapter({"c0": (tiny_models[0], data)}, tmp_path / name, seed=3,
                        hparams=V.AdapterHParams(lr=5e-3, **extra))
        assert seen["dtype"] == ({torch.bfloat16} if extra else {torch.float32}), name
        assert seen["eager"] == ({True} if extra else set()), name
    w = {n: load_file(tmp_path / n / "adapter_model.safetensors") for n in ("fp32", "bf16", "bf16-again")}
    assert all(t.dtype == torch.float32 for t in w["bf16"].values())
    assert all(torch.equal(w["bf16"][k], w["bf16-again"][k]) for k in w["bf16"])
    assert any(not torch.equal(w["bf16"][k], w["fp32"][k]) for k in w["bf16"])


def test_multi_checkpoint_shares_one_adapter(tiny_models, tmp_path):
    from safetensors.torch import load_file

    d1, d2 = _marker_data(48, 4), _marker_data(48, 4)
    d2["correct"] = ~d2["correct"]  # same questions, the other checkpoint's labels
    d2["answer"] = "maple"
    hp = V.AdapterHParams(lr=5e-3)
    # two different base models, one adapter
    V.train_adapter({"c0": (tiny_models[0], d1), "c1": (tiny_models[1], d2)},
                    tmp_path / "multi", seed=0, hparams=hp)
    log = json.loads((tmp_path / "multi" / V.TRAINING_LOG_FILE).read_text())
    assert log["checkpoints"] == ["c0", "c1"] and log["total_steps"] == 3  # 48 shared questions
    assert all(set(s["loss_by_checkpoint"]) == {"c0", "c1"} for s in log["steps"])
    assert all(s["loss"] == pytest.approx(sum(s["loss_by_checkpoint"].values())) for s in log["steps"])
    c0 = V.score_local(tiny_models[0], str(tmp_path / "multi"), d1["question"][:8], d1["answer"][:8])
    c1 = V.score_local(tiny_models[1], str(tmp_path / "multi"), d1["question"][:8], d1["answer"][:8])
    assert not np.allclose(c0, c1)  # one adapter, two different bases

    # The gradients of both checkpoint models reach the one adapter: with the same base twice,
    # multi-checkpoint training on (d1, d2) has exactly the objective of single-checkpoint
    # training on d1 and d2 pooled as two sources, so the weights must agree.
    V.train_adapter({"c0": (tiny_models[0], d1), "c0b": (tiny_models[0], d2)},
                    tmp_path / "twin", seed=0, hparams=hp)
    V.train_adapter({"c0": (tiny_models[0], _pooled(d1, d2))}, tmp_path / "pooled", seed=0, hparams=hp)
    single = {"c0": (tiny_models[0], d1)}
    V.train_adapter(single, tmp_path / "single", seed=0, hparams=hp)
    wt, wp, ws = (load_file(tmp_path / n / "adapter_model.safetensors")
                  for n in ("twin", "pooled", "single"))
    # Adam magnifies float-summation noise on near-zero moments, hence a relative criterion:
    # twin vs pooled differ by noise only, twin vs single by a different objective
    noise = max(float((wt[k] - wp[k]).abs().max()) for k in wt)
    signal = max(float((wt[k] - ws[k]).abs().max()) for k in wt)
    scale = max(float(wt[k].abs().max()) for k in wt)
    # (were the second model's gradients lost, "twin" would be "single" up to Adam's scale
    # invariance and the signal would shrink to the noise)
    assert noise < 0.1 * signal and signal > 0.05 * scale, (noise, signal, scale)

    # Pooled sources with the same answers make the same prompts: they run once each, weighted
    # by their sum, so pooling d1 with an identical copy is single-source training on d1 exactly
    V.train_adapter({"c0": (tiny_models[0], _pooled(d1, d1))}, tmp_path / "copy", seed=0, hparams=hp)
    wc = load_file(tmp_path / "copy" / "adapter_model.safetensors")
    assert all(torch.equal(wc[k], ws[k]) for k in ws)
    log = json.loads((tmp_path / "copy" / V.TRAINING_LOG_FILE).read_text())
    assert log["n_examples"] == {"c0": 96} and log["n_prompts"] == {"c0": 48}


def test_repeated_prompts_merge_with_summed_weights_and_labels_kept_apart():
    f = V.prepare_frame("c", pd.DataFrame({
        "question_id": ["a", "a", "a", "b", "b"], "question": ["qa"] * 3 + ["qb"] * 2,
        "answer": ["x", "x", "y", "z", "z"], "correct": [True, True, False, True, False],
        "weight": [0.6, 0.5, 0.4, 1.0, 1.0], "source": ["s1", "s2", "s1", "s1", "s2"]}))
    m = V.merge_repeated_prompts(f)
    # a: s1 weights 0.6/0.4 and s2 alone, each halved over two sources; b: one label per source
    assert m[["question_id", "answer", "correct"]].values.tolist() == [
        ["a", "x", True], ["a", "y", False], ["b", "z", True], ["b", "z", False]]
    np.testing.assert_allclose(m["loss_weight"], [0.3 + 0.5, 0.2, 0.5, 0.5])
    np.testing.assert_allclose(m.groupby("question_id")["loss_weight"].sum(), f.groupby("question_id")["loss_weight"].sum())


def _record_stores(monkeypatch) -> list:
    """Every view store `ViewWeights` makes from here on (to look at its scratch directory)."""
    made = []
    make = views.view_store
    monkeypatch.setattr(views, "view_store", lambda *a: made.append(make(*a)) or made[-1])
    return made


def _no_resident_bases():
    from selfknow.models import RESIDENCY, free_memory
    from selfknow.models.hf import release_bases

    release_bases()
    free_memory()
    RESIDENCY.reset()
    assert RESIDENCY.resident == 0
    return RESIDENCY


@pytest.mark.parametrize("family, dtype", [("gpt2", "float32"), ("llama", "bfloat16")])
def test_multi_checkpoint_views_swap_base_weights_in_one_model(family, dtype, request, tmp_path,
                                                               monkeypatch):
    """Multi-checkpoint training runs every view through one model whose base parameters are
    swapped: view k gives exactly the outputs of checkpoint k's own model with the adapter.
    On a CPU job the views wait in scratch files, so one base is resident at a time; each view
    is stored in parts (here of at most 64 kB), so that serialising one costs little memory."""
    from peft import PeftModel, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    dirs = request.getfixturevalue({"gpt2": "tiny_models", "llama": "tiny_llamas"}[family])
    stores = _record_stores(monkeypatch)
    monkeypatch.setattr(views.FileViews, "PART_BYTES", 2**16)
    residency = _no_resident_bases()
    hp = V.AdapterHParams(dtype=dtype)
    ids = torch.tensor([[5, 17, 33, 2, 90], [7, 7, 40, 11, 3]])
    with views.ViewWeights(dirs, dtype=dtype) as weights:
        assert (residency.loads, residency.resident, residency.peak) == (3, 1, 1)
        scratch = stores[0].dir
        parts = {k: stores[0]._parts(k) for k in range(3)}
        assert sorted(scratch.iterdir()) == sorted(p for ps in parts.values() for p in ps)
        for ps in parts.values():  # a part is one tensor or tensors within 64 kB
            assert len(ps) > 1
            for p in ps:
                t = load_file(p)
                assert len(t) == 1 or sum(x.numel() * x.element_size() for x in t.values()) <= 2**16
        torch.manual_seed(0)
        model = get_peft_model(weights.model, V._lora_config(weights.model, hp))
        with torch.no_grad():  # a non-zero adapter, so that base and LoRA paths both matter
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.5)
        model.save_pretrained(tmp_path / "lora")
        fresh = []
        for k, d in enumerate(dirs):
            base = AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, dtype))
            # the stored view: the parameters from_pretrained gave, by name, in their dtype
            stored = {n: t for p in parts[k] for n, t in load_file(p).items()}
            params = dict(base.named_parameters())
            assert stored.keys() == params.keys()
            assert all(stored[n].dtype == p.dtype == getattr(torch, dtype) and torch.equal(stored[n], p)
                       for n, p in params.items())
            alone = PeftModel.from_pretrained(base, tmp_path / "lora").eval()
            with torch.no_grad():
                fresh.append(alone(input_ids=ids).logits)
        assert not torch.allclose(fresh[0], fresh[1]) and not torch.allclose(fresh[1], fresh[2])
        model.eval()
        for k in (2, 0, 1, 1, 2, 0, 2):
            weights.use(k)
            with torch.no_grad():
                assert torch.equal(model(input_ids=ids).logits, fresh[k])
        assert residency.peak == 1
    assert not scratch.exists()


def test_views_of_different_architectures_fail_and_leave_no_scratch(tiny_models, tmp_path, monkeypatch):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    other = tmp_path / "narrow"  # same tokenizer, narrower layers
    GPT2LMHeadModel(GPT2Config(vocab_size=480, n_positions=256, n_embd=32, n_layer=2, n_head=2)).save_pretrained(other)
    AutoTokenizer.from_pretrained(tiny_models[0]).save_pretrained(other)
    stores = _record_stores(monkeypatch)
    # the last view is stored before the narrow one is loaded
    with pytest.raises(ValueError, match=f"differ in architecture: {other} and {tiny_models[1]}"):
        views.ViewWeights([tiny_models[0], str(other), tiny_models[1]])
    assert len(stores) == 1 and not stores[0].dir.exists()


def _three_views(dirs) -> dict:
    """Three checkpoints' examples on the same 32 questions, with different labels."""
    d = _marker_data(32, 9)
    return {"c0": (dirs[0], d), "c1": (dirs[1], d.assign(correct=~d["correct"], answer="maple")),
            "c2": (dirs[2], V.randomise_labels(d, 3))}


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_multi_checkpoint_training_from_scratch_files_equals_host_parked_views(family, request, tmp_path,
                                                                              monkeypatch):
    """A CPU job's views wait in scratch files (one base resident, one load per view); the
    same training with the views parked in host memory (the GPU path's store, here on the
    CPU: every view's weights alive at once, as CPU jobs held them before) gives bitwise the
    same adapter and per-step losses."""
    from safetensors.torch import load_file

    dirs = request.getfixturevalue({"gpt2": "tiny_models", "llama": "tiny_llamas"}[family])
    data = _three_views(dirs)
    hp = V.AdapterHParams(lr=5e-3, epochs=2)
    stores = _record_stores(monkeypatch)
    residency = _no_resident_bases()
    V.train_adapter(data, tmp_path / "files", seed=0, hparams=hp)
    assert (residency.loads, residency.peak) == (3, 1)
    assert len(stores) == 1 and isinstance(stores[0], views.FileViews) and not stores[0].dir.exists()
    monkeypatch.setattr(views, "view_store", lambda *a: views.HostViews())
    V.train_adapter(data, tmp_path / "host", seed=0, hparams=hp)
    wf, wh = (load_file(tmp_path / n / "adapter_model.safetensors") for n in ("files", "host"))
    assert wf.keys() == wh.keys() and all(torch.equal(wf[k], wh[k]) for k in wf)
    lf, lh = (json.loads((tmp_path / n / V.TRAINING_LOG_FILE).read_text())["steps"] for n in ("files", "host"))
    assert len(lf) == 4 and lf == lh
    # the three views' bases differ, and each step saw all three
    assert all(len(set(s["loss_by_checkpoint"].values())) == 3 for s in lf)


def test_views_wait_in_host_memory_on_a_gpu_only_while_they_fit():
    gb = 1e9
    # the paper config's widest view sets: 4 views of an 8B model (16 GB each in bf16) and of
    # Olmo 3 32B (64.4 GB each)
    assert views.views_in_host("cuda", 4, 16.0 * gb)
    assert not views.views_in_host("cuda", 4, 64.4 * gb) and not views.views_in_host("cuda", 2, 64.4 * gb)
    assert views.views_in_host("cuda", 2, views.HOST_VIEWS_GB / 2 * gb) and not views.views_in_host("cuda", 2, views.HOST_VIEWS_GB / 2 * gb + 1)
    assert not views.views_in_host("cpu", 2, 1.0)  # a CPU job's host memory is its device memory


def test_scratch_views_are_deleted_when_training_fails(tiny_models, tmp_path, monkeypatch):
    stores = _record_stores(monkeypatch)
    with pytest.raises(ValueError, match="exceeds the limit 20"):
        V.train_adapter(_three_views(tiny_models), tmp_path / "ad", seed=0, hparams={"max_length": 20})
    assert len(stores) == 1 and not stores[0].dir.exists() and not (tmp_path / "ad").exists()


def test_gcm_trains_an_adapter_with_the_gcm_prompt(tiny_models, tmp_path):
    frames = {"c0": _marker_data(24, 5), "c1": _marker_data(24, 5).assign(answer="ember")}
    B.train_gcm(frames, tiny_models[1], tmp_path / "gcm", seed=0, hparams={"lr": 5e-3})
    ro = V.load_readout(tmp_path / "gcm")
    assert ro.style == "gcm"
    log = json.loads((tmp_path / "gcm" / V.TRAINING_LOG_FILE).read_text())
    assert log["n_examples"] == {"gcm": 48} and log["n_questions"] == 24
    conf = V.score_local(tiny_models[1], str(tmp_path / "gcm"), ["which x?"], ["y"])
    assert 0 <= conf[0] <= 1
    with pytest.raises(ValueError, match="exceeds the limit 20"):
        B.train_gcm(frames, tiny_models[1], tmp_path / "gcm2", seed=0, hparams={"max_length": 20})
    assert not (tmp_path / "gcm2").exists()
