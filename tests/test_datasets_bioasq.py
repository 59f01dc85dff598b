"""BioASQ as persistent §A.4 and the authors' conset/dataset_configs/bioasq.py process it, on a
fixture in the BioASQ training JSON's schema; expected items derived by hand."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets import bioasq
from selfknow.stages.datasets.source import ItemError
from selfknow.stages.items import build_items, icl_by_domain

from fakes import sc_job_prompts

# random.Random(17).shuffle(list(range(10))): shuffled position p holds question ORDER10[p]
ORDER10 = [7, 3, 0, 5, 1, 9, 2, 4, 6, 8]

SHUFFLED = [
    {"id": "f1", "type": "factoid", "body": "Which gene causes CF", "exact_answer": ["CFTR", "cftr gene"]},
    {"id": "l1", "type": "list", "body": "List statins", "exact_answer": [["atorvastatin"], ["simvastatin"]]},
    {"id": "y1", "type": "yesno", "body": "Is TP53 a tumour suppressor?", "exact_answer": "yes"},
    {"id": "f2", "type": "factoid", "body": "What does EPO stimulate?", "exact_answer": ["erythropoiesis"]},
    {"id": "l2", "type": "list", "body": "Name three kinases.",
     "exact_answer": [["ABL1"], ["SRC"], ["JAK2"]]},                     # 3 groups > max_list_answers 2
    {"id": "fdup", "type": "factoid", "body": " Which gene causes CF ", "exact_answer": ["x"]},
    {"id": "l3", "type": "list", "body": "Name organs of the RES.", "exact_answer": [["liver", "hepar"], ["spleen"]]},
    {"id": "s1", "type": "summary", "body": "Describe apoptosis.", "ideal_answer": ["..."]},
    {"id": "f3", "type": "factoid", "body": "Which? the enzyme of step one", "exact_answer": ["hexokinase"]},
    {"id": "l4", "type": "list", "body": "Which organs are affected", "exact_answer": [["lung"], ["pancreas"]]},
]

SPEC = dict(loader="bioasq", shuffle_seed=17, n_icl=1, max_list_answers=2)


def _questions():
    qs = [None] * len(SHUFFLED)
    for p, q in enumerate(SHUFFLED):
        qs[ORDER10[p]] = q
    return qs


def test_types_dedup_long_lists_punctuation_and_icl_per_type(tmp_path):
    path = tmp_path / "training14b.json"
    path.write_text(json.dumps({"questions": _questions()}), encoding="utf-8")
    splits = build_items("bioasq", {**SPEC, "path": str(path)}, seed=0)
    train, test = splits["train"], splits["test"]
    # 10 -> yesno and summary skipped, one duplicate body, one list with 3 groups -> 6
    # -> the first factoid and the first list are the in-context examples, 4 test questions
    assert list(zip(train.domain, train.question, train.answer)) == [
        ("factoid", "Which gene causes CF?", "CFTR"),
        ("list", "List statins. Just output one of the answers.", "atorvastatin")]
    assert set(train.split) == {"icl"}
    assert list(test.item_id) == ["f2", "l3", "f3", "l4"]
    assert list(test.question) == ["What does EPO stimulate?",
                                   "Name organs of the RES. Just output one of the answers.",
                                   "Which? the enzyme of step one",
                                   "Which organs are affected. Just output one of the answers."]
    assert list(test.aliases.iloc[1]) == ["liver", "hepar", "spleen"] and test.answer.iloc[1] == "liver"
    assert list(test.domain) == ["factoid", "list", "factoid", "list"]


def test_larger_list_limit_keeps_the_long_list_and_it_becomes_a_test_item():
    df = bioasq.process(_questions(), "bioasq", {**SPEC, "max_list_answers": 10}, "fixture")
    assert list(df[df.split == "test"].item_id) == ["f2", "l2", "l3", "f3", "l4"]


def test_older_nested_factoid_answers_read_as_synonyms_and_bad_shapes_name_the_question():
    qs = _questions()
    qs[ORDER10[3]] = {**SHUFFLED[3], "exact_answer": [["erythropoiesis", "red cell production"]]}
    df = bioasq.process(qs, "bioasq", SPEC, "fixture")
    assert list(df[df.item_id == "f2"].aliases.iloc[0]) == ["erythropoiesis", "red cell production"]
    qs[ORDER10[3]] = {**SHUFFLED[3], "exact_answer": [["a"], ["b"]]}
    with pytest.raises(ItemError, match=r"fixture: questions\[5\] \(id 'f2'\): a factoid question's exact_answer "
                                        r"must be a list of strings"):
        bioasq.process(qs, "bioasq", SPEC, "fixture")


# random.Random(17).shuffle(list(range(14))): shuffled position p holds question ORDER14[p]
ORDER14 = [10, 7, 13, 3, 1, 12, 0, 9, 2, 11, 5, 4, 6, 8]


def _factoid(k, body, *answers):
    return {"id": f"f{k}", "type": "factoid", "body": body, "exact_answer": list(answers)}


def _list(k, body, *groups):
    return {"id": f"l{k}", "type": "list", "body": body, "exact_answer": [list(g) for g in groups]}


# in shuffled order: five factoid and five list in-context examples, interleaved, then one of each to test
TYPED = [
    _factoid(1, "Which gene causes CF", "CFTR", "cftr gene"),
    _list(1, "List statins", ["atorvastatin"], ["simvastatin"]),
    _factoid(2, "What does EPO stimulate?", "erythropoiesis"),
    {"id": "y1", "type": "yesno", "body": "Is TP53 a tumour suppressor?", "exact_answer": "yes"},
    _list(2, "Name organs of the RES.", ["liver", "hepar"], ["spleen"]),
    _factoid(3, "Which enzyme starts glycolysis?", "hexokinase"),
    _list("long", "Name three kinases.", ["ABL1"], ["SRC"], ["JAK2"]),  # 3 groups > 2: dropped, no example
    _factoid(4, "Which hormone lowers blood glucose", "insulin"),
    _list(3, "Which organs are affected", ["lung"], ["pancreas"]),
    _list(4, "List two loop diuretics", ["furosemide", "frusemide"], ["bumetanide"]),
    _factoid(5, "What is the target of imatinib?", "BCR-ABL"),
    _list(5, "Name two HER2 inhibitors.", ["trastuzumab"], ["lapatinib"]),
    _factoid(6, "Which virus causes shingles?", "varicella zoster virus"),
    _list(6, "List the statin side effects", ["myopathy"], ["hepatotoxicity"]),
]

LIST_Q = " Just output one of the answers."
# the authors' base-model prompt: the question's own type's five examples, in order, then the question
FACTOID_PROMPT = ("Prompt: Which gene causes CF?\nAnswer: CFTR\n\n"
                  "Prompt: What does EPO stimulate?\nAnswer: erythropoiesis\n\n"
                  "Prompt: Which enzyme starts glycolysis?\nAnswer: hexokinase\n\n"
                  "Prompt: Which hormone lowers blood glucose?\nAnswer: insulin\n\n"
                  "Prompt: What is the target of imatinib?\nAnswer: BCR-ABL\n\n"
                  "Prompt: Which virus causes shingles?\nAnswer:")
LIST_PROMPT = (f"Prompt: List statins.{LIST_Q}\nAnswer: atorvastatin\n\n"
               f"Prompt: Name organs of the RES.{LIST_Q}\nAnswer: liver\n\n"
               f"Prompt: Which organs are affected.{LIST_Q}\nAnswer: lung\n\n"
               f"Prompt: List two loop diuretics.{LIST_Q}\nAnswer: furosemide\n\n"
               f"Prompt: Name two HER2 inhibitors.{LIST_Q}\nAnswer: trastuzumab\n\n"
               f"Prompt: List the statin side effects.{LIST_Q}\nAnswer:")


def test_each_question_is_prompted_with_the_five_examples_of_its_own_type(tmp_path, monkeypatch):
    qs = [None] * len(TYPED)
    for p, q in enumerate(TYPED):
        qs[ORDER14[p]] = q
    path = tmp_path / "training14b.json"
    path.write_text(json.dumps({"questions": qs}), encoding="utf-8")
    spec = {**SPEC, "n_icl": 5, "path": str(path)}
    splits = build_items("bioasq", spec, seed=0)
    assert list(splits["test"].item_id) == ["f6", "l6"]
    assert icl_by_domain(spec)
    prompts = sc_job_prompts(tmp_path, monkeypatch, splits, n_shots=5, icl_by_domain=icl_by_domain(spec))
    assert prompts == {"Which virus causes shingles?": FACTOID_PROMPT,
                       f"List the statin side effects.{LIST_Q}": LIST_PROMPT}
    # six examples of a type are asked for, five reserved: the error names the type
    with pytest.raises(ItemError, match="reserve 5 in-context examples of domain 'factoid'; 6 are asked for"):
        sc_job_prompts(tmp_path, monkeypatch, splits, n_shots=6, icl_by_domain=True)
