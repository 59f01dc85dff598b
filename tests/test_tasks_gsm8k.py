"""GSM8K: the final number, extracted and compared as lm-evaluation-harness's gsm8k task
(flexible-extract) does, on hand-made responses."""
from __future__ import annotations

import json

import pytest

from selfknow.stages.datasets.source import ItemError
from selfknow.stages.tasks import gsm8k


@pytest.mark.parametrize("response, number", [
    ("She sells 16 - 3 - 4 = 9 eggs, so she makes 9 * 2 = $18.\n#### 18", "18"),
    ("The total is 1,234 apples.", "1234"),
    ("So the answer is $1,000.50.", "1000.50"),
    ("The temperature drops to -7 degrees.", "-7"),
    # the last number wins, even after the answer
    ("The answer is 42. Check: 6 * 7", "7"),
    ("There are 3 cats.", "3"),
    ("I cannot tell.", None),
])
def test_extract_answer_takes_the_last_number(response, number):
    assert gsm8k.extract_answer(response) == number


# (response, lm-eval's verdict against the reference 18), worked out by hand from its gsm8k
# task: the flexible-extract filter's last match of (-?[$0-9.,]{2,})|(-?[0-9]+), then
# exact_match with regexes_to_ignore [",", "\\$", "(?s).*#### ", "\\.$"]
OFFICIAL = [
    ("#### 18", True),
    ("The answer is $18.", True),
    ("18.00 dollars", False),
    ("She makes 9 * 2 = 18 dollars a day.", True),
    ("18 eggs, then 3 more: 21", False),
    ("Answer: 18\n\nBut 19 if", False),
    ("-18", False),
    ("1,8", True),
    ("18%", True),
    ("The result is 18.5", False),
    ("= 18.\n", True),
    ("Total: 018", False),
    ("$18", True),
    ("It is 6*3=18, so 18.", True),
    ("18.0", False),
    ("I think 17 or 18", True),
    ("18 apples and 2 pears", False),
    ("1.8e1", False),
    ("Answer: 18...", False),
    ("eighteen", False),
]


@pytest.mark.parametrize("response, official", OFFICIAL)
def test_agrees_with_lm_eval(response, official):
    assert gsm8k.score(response, "18")[1] is official


def test_reference_and_exact_string_comparison():
    reference = gsm8k.reference_number("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 1,072")
    assert reference == "1072"
    assert gsm8k.score("In total 1,072 clips.", reference) == ("1072", True)
    # as in the harness, the comparison is of strings: 1072.0 is not 1072
    assert gsm8k.score("In total 1072.0 clips.", reference) == ("1072.0", False)
    assert gsm8k.score("no number here", reference) == (None, False)


@pytest.mark.parametrize("solution", ["She has 6 * 3 = <<6*3=18>>18 eggs.\n#### 18", "#### $1,072.", "#### -3",
                                      "#### 18.00"])
def test_the_reference_is_cleaned_as_lm_eval_cleans_it(solution):
    """lm-eval's gsm8k scores flexible-extract with `exact_match`, whose `regexes_to_ignore`
    (",", "\\$", "(?s).*#### ", "\\.$") apply to the reference (the whole hub answer) as to the
    prediction (lm_eval/api/metrics.py `exact_match_hf_evaluate`): our cleaned reference gives
    its verdict for every response of OFFICIAL and for the reference's own number."""
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters.extraction import RegexFilter

    flexible = RegexFilter(regex_pattern=r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1)
    ignore = [",", "\\$", "(?s).*#### ", "\\.$"]
    reference = gsm8k.reference_number(solution)
    for response, _ in OFFICIAL + [(solution.split("#### ")[-1], None)]:
        (extracted,), = flexible.apply([[response]], [{}])
        official = exact_match_hf_evaluate([extracted], [solution], regexes_to_ignore=ignore,
                                           ignore_case=True)["exact_match"]
        assert gsm8k.score(response, reference)[1] is bool(official), (response, solution)


def test_rows_become_items(tmp_path):
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": "2+2?", "answer": "2+2=4\n#### 4"}) + "\n")
    items = gsm8k.load("gsm8k", {"path": str(tmp_path)}, "test")
    assert list(items.item_id) == ["test-0"] and list(items.answer) == ["4"] and items.aliases[0] == ["4"]


def test_a_solution_without_its_final_number_names_the_row():
    with pytest.raises(ItemError, match="fixture: row 2: the answer has no '#### <number>' line"):
        gsm8k.process([{"question": "q", "answer": "#### 3"}, {"question": "q", "answer": "3"}], "gsm8k",
                      "fixture", "test")
