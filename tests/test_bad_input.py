"""Bad input stops with a message naming the file and the row (or session/turn), or is skipped
with a counted warning where the paper's protocol says to skip (issue #7, "bad input").

Row-level item checks (missing answer, duplicate id, malformed choices) on in-memory frames are
in test_items.py and the response matrix's non-binary values in test_rasch.py
(test_cli_rasch_bad_value); here the same failures come through the real loaders from files.
"""
from __future__ import annotations

import json
import logging
import re

import pandas as pd
import pytest

from selfknow.stages.items import ItemError, load_source
from selfknow.protocols.ladder.records import import_sessions, read_released_sessions
from selfknow.records import ITEM_COLUMNS


# ---- dataset files -----------------------------------------------------------------------------

def _bioasq(questions) -> dict:
    return {"questions": questions}


GOOD_Q = [
    {"id": "q1", "type": "factoid", "body": "Which gene?", "exact_answer": [["BRCA1", "brca-1"]]},
    {"id": "q2", "type": "list", "body": "Which organs?", "exact_answer": [["liver"], ["kidney"]]},
    {"id": "q3", "type": "yesno", "body": "Is it?", "exact_answer": "yes"},
    {"id": "q4", "type": "summary", "body": "Describe.", "ideal_answer": ["..."]},
]


def _load_bioasq(path):
    return load_source("bioasq", {"loader": "bioasq", "path": str(path), "shuffle_seed": 17, "n_icl": 0,
                                  "max_list_answers": 10})


def test_bioasq_good_file_skips_other_types_with_a_counted_warning(tmp_path, caplog):
    f = tmp_path / "bioasq.json"
    f.write_text(json.dumps(_bioasq(GOOD_Q)), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="selfknow.stages.items"):
        df = _load_bioasq(f)
    assert list(df["item_id"]) == ["q1", "q2"]
    assert list(df.columns) == ITEM_COLUMNS
    warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warn) == 1 and str(f) in warn[0] and "skipped 2 of 4 questions" in warn[0]


def test_bioasq_non_utf8_names_the_file(tmp_path):
    f = tmp_path / "bioasq_latin1.json"
    raw = json.dumps(_bioasq(GOOD_Q[:1])).encode("utf-8").replace(b"Which gene?", b"Which g\xe8ne?")
    f.write_bytes(raw)
    offset = raw.index(b"\xe8")
    with pytest.raises(ItemError, match=re.escape(f"{f}: not UTF-8 (invalid byte at offset {offset})")):
        _load_bioasq(f)


def test_bioasq_truncated_json_names_the_file_and_line(tmp_path):
    f = tmp_path / "bioasq.json"
    f.write_text(json.dumps(_bioasq(GOOD_Q), indent=1)[:-40], encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(str(f)) + r": invalid JSON at line \d+, column \d+"):
        _load_bioasq(f)


@pytest.mark.parametrize("bad, message", [
    ({"id": "q9", "type": "factoid", "body": "B?"}, r"questions\[1\] \(id 'q9'\): missing key\(s\) \['exact_answer'\]"),
    ({"id": "q9", "type": "factoid", "body": "B?", "exact_answer": []}, r"questions\[1\] \(id 'q9'\): .*empty exact_answer"),
    ({"id": "q9", "type": "list", "body": 3, "exact_answer": ["x"]}, r"questions\[1\] \(id 'q9'\): 'exact_answer' must be a list and 'body' a string"),
    ("not a question", r"questions\[1\]: expected an object, got str"),
])
def test_bioasq_malformed_question_names_file_and_question(tmp_path, bad, message):
    f = tmp_path / "bioasq.json"
    f.write_text(json.dumps(_bioasq([GOOD_Q[0], bad])), encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(str(f)) + ": " + message):
        _load_bioasq(f)


def test_bioasq_without_questions_list(tmp_path):
    f = tmp_path / "bioasq.json"
    f.write_text(json.dumps([GOOD_Q[0]]), encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(f"{f}: expected an object with a 'questions' list")):
        _load_bioasq(f)


def test_bioasq_duplicate_id_names_file_and_row(tmp_path):
    f = tmp_path / "bioasq.json"
    f.write_text(json.dumps(_bioasq([GOOD_Q[0], GOOD_Q[1], {**GOOD_Q[0], "body": "Other?"}])), encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(f"{f}: row 2: duplicate item_id 'q1'")):
        _load_bioasq(f)


def test_bioasq_empty_file_and_empty_list_say_no_questions(tmp_path):
    f = tmp_path / "bioasq.json"
    f.write_text("\n", encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(f"{f}: empty file, no questions")):
        _load_bioasq(f)
    f.write_text(json.dumps(_bioasq([])), encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(f"{f}: no questions (the 'questions' list is empty)")):
        _load_bioasq(f)


MMLU_SPEC = {"loader": "mmlu", "subjects": ["anatomy"], "subject_range": [0, 2]}
MMLU_ROW = {"question": "Q?", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 1}


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("line, message", [
    ('["Q?", "anatomy"]', "line 2: expected a JSON object, got list"),
    ('"just a string"', "line 2: expected a JSON object, got str"),
])
def test_jsonl_line_that_is_not_an_object_names_file_and_line(tmp_path, line, message):
    f = _jsonl(tmp_path / "test.jsonl", [MMLU_ROW, line])
    with pytest.raises(ItemError, match=re.escape(f"mmlu: {f}: {message}")):
        load_source("mmlu", {**MMLU_SPEC, "path": str(f)})


@pytest.mark.parametrize("field, value, message", [
    ("question", 42, "field 'question' must be str, got int '42'"),
    ("question", ["Q?"], "field 'question' must be str, got list"),
    ("answer", "B", "field 'answer' must be int, got str 'B'"),
    ("answer", True, "field 'answer' must be int, got bool 'True'"),
    ("choices", "abcd", "field 'choices' must be list, got str 'abcd'"),
])
def test_mmlu_malformed_field_names_file_row_and_field(tmp_path, field, value, message):
    f = _jsonl(tmp_path / "test.jsonl", [MMLU_ROW, {**MMLU_ROW, field: value}])
    with pytest.raises(ItemError, match=re.escape(f"mmlu: {f}: line 2: {message}")):
        load_source("mmlu", {**MMLU_SPEC, "path": str(f)})


def test_read_and_field_errors_name_the_row_alike(tmp_path):
    """A field error names the row as a read error does: the dataset, the file and its line
    (1-based, blank lines counted) for JSON lines; a parquet row 1-based."""
    f = _jsonl(tmp_path / "test.jsonl", [MMLU_ROW, "", "{not json", MMLU_ROW])
    with pytest.raises(ItemError, match=re.escape(f"mmlu: {f}: line 3: invalid JSON")):
        load_source("mmlu", {**MMLU_SPEC, "path": str(f)})
    _jsonl(f, [MMLU_ROW, "", "", {**MMLU_ROW, "answer": "B"}])
    with pytest.raises(ItemError, match=re.escape(f"mmlu: {f}: line 4: field 'answer' must be int")):
        load_source("mmlu", {**MMLU_SPEC, "path": str(f)})
    f.unlink()
    pq = tmp_path / "test.parquet"
    pd.DataFrame([MMLU_ROW, {**MMLU_ROW, "choices": ["a", "b"]}]).to_parquet(pq)
    with pytest.raises(ItemError, match=re.escape(f"mmlu: {pq}: row 2: expected 4 choices, got 2")):
        load_source("mmlu", {**MMLU_SPEC, "path": str(tmp_path)})


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_empty_jsonl_says_it_has_no_rows(tmp_path, content):
    f = tmp_path / "test.jsonl"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(ItemError, match=re.escape(f"mmlu: {f}: no rows")):
        load_source("mmlu", {**MMLU_SPEC, "path": str(f)})


def test_empty_parquet_says_it_has_no_rows(tmp_path):
    f = tmp_path / "train.parquet"
    pd.DataFrame({"question": pd.Series([], dtype=str), "ee-category": pd.Series([], dtype=str),
                  "continuation": pd.Series([], dtype=str)}).to_parquet(f)
    spec = {"loader": "jeopardy", "path": str(tmp_path), "shuffle_seed": 17, "n_icl": 0, "reserved_icl": 0,
            "train_range": [0, 1], "test_range": [1, 2], "blacklist": False, "min_category_count": 1,
            "exclude_categories": [], "check_paper_categories": False}
    with pytest.raises(ItemError, match=re.escape(f"jeopardy: {f}: no rows")):
        load_source("jeopardy", spec)


@pytest.mark.parametrize("loader, row, message", [
    ("gsm8k", {"question": None, "answer": "#### 4"}, "line 1: missing field(s) ['question']"),
    ("gsm8k", {"question": {"text": "Q?"}, "answer": "#### 4"}, "line 1: field 'question' must be str, got dict"),
    ("gsm8k", {"question": "Q?", "answer": 4}, "line 1: field 'answer' must be str, got int '4'"),
    ("medxpertqa", {"id": "m1", "question": 7, "options": {"A": "x"}, "label": "A", "medical_task": "t"},
     "line 1: field 'question' must be str, got int '7'"),
    ("medxpertqa", {"id": "m1", "question": "Q?", "options": ["x"], "label": "A", "medical_task": "t"},
     "line 1: field 'options' must be dict, got list"),
    ("bbh", {"input": 3, "target": "(A)"}, "line 1: field 'input' must be str, got int '3'"),
])
def test_task_loaders_name_file_row_and_field(tmp_path, loader, row, message):
    f = _jsonl(tmp_path / "test.jsonl", [row])
    spec = {"loader": loader, "path": str(f), "config_name": "navigate"}
    with pytest.raises(ItemError, match=re.escape(f"{loader}: {f}: {message}")):
        load_source(loader, spec)


def _world(tmp_path, qa_rows=None, mcq_rows=None):
    base = dict(dataset="x", domain="d0", question="Q?", choices=None, answer="a", aliases=["a"], split="test")
    qa = pd.DataFrame([{**base, "item_id": f"wqa-{i}", "domain": f"d{i % 2}"} for i in range(4)], columns=ITEM_COLUMNS)
    mcq = pd.DataFrame([{**base, "item_id": f"wmcq-{i}", "choices": ["w", "x", "y", "z"], "answer": "B"}
                        for i in range(4)], columns=ITEM_COLUMNS)
    for df, rows in ((qa, qa_rows), (mcq, mcq_rows)):
        for i, upd in (rows or {}).items():
            for k, v in upd.items():
                df.at[i, k] = v
    qa.to_parquet(tmp_path / "qa.parquet")
    mcq.to_parquet(tmp_path / "mcq.parquet")
    return tmp_path


def test_world_qa_domain_shards_split_the_domains(tmp_path):
    base = dict(dataset="x", choices=None, answer="a", aliases=["a"], split="test")
    qa = pd.DataFrame([{**base, "item_id": f"wqa-{i}", "domain": f"d{i % 5}", "question": f"Q{i}?"}
                       for i in range(20)], columns=ITEM_COLUMNS)
    qa.to_parquet(tmp_path / "qa.parquet")
    shards = [load_source(f"s{k}", {"loader": "world_qa", "domain_shard": [k, 2]}, tmp_path) for k in (0, 1)]
    # d4 (last by name) is held out; the rest alternate by name
    assert [sorted(set(s["domain"])) for s in shards] == [["d0", "d2"], ["d1", "d3"]]
    assert [set(s["dataset"]) for s in shards] == [{"s0"}, {"s1"}]
    assert sorted(shards[0]["item_id"].tolist() + shards[1]["item_id"].tolist()) == \
        sorted(qa.loc[qa["domain"] != "d4", "item_id"])
    with pytest.raises(ItemError, match=re.escape("s: domain_shard must be [k, n] with integers 0 <= k < n, got [2, 2]")):
        load_source("s", {"loader": "world_qa", "domain_shard": [2, 2]}, tmp_path)
    with pytest.raises(ItemError, match="s: domain_shard \\[0, 5\\] needs at least 5 domains, the world has 4"):
        load_source("s", {"loader": "world_qa", "domain_shard": [0, 5]}, tmp_path)


def test_world_items_missing_answer_duplicate_id_and_bad_choices(tmp_path):
    spec_qa, spec_mcq = {"loader": "world_qa", "heldout_domain": "d1"}, {"loader": "world_mcq"}
    # a good world loads (held-out domain d1 removed from world_qa)
    assert list(load_source("world_qa", spec_qa, _world(tmp_path))["item_id"]) == ["wqa-0", "wqa-2"]
    w = _world(tmp_path, qa_rows={2: {"answer": None}})
    # row 1 of the loaded frame (the held-out rows are removed first), item wqa-2
    with pytest.raises(ItemError, match=re.escape(f"{w}: row 1 (item wqa-2): missing answer")):
        load_source("world_qa", spec_qa, w)
    w = _world(tmp_path, mcq_rows={3: {"item_id": "wmcq-1"}})
    with pytest.raises(ItemError, match=re.escape(f"{w}: row 3: duplicate item_id 'wmcq-1'")):
        load_source("world_mcq", spec_mcq, w)
    w = _world(tmp_path, mcq_rows={1: {"choices": ["only one"], "answer": "A"}})
    with pytest.raises(ItemError, match=re.escape(f"{w}: row 1 (item wmcq-1): choices must be >= 2 distinct options")):
        load_source("world_mcq", spec_mcq, w)
    w = _world(tmp_path, mcq_rows={0: {"choices": ["w", "x", "y"], "answer": "D"}})
    with pytest.raises(ItemError, match=re.escape(f"{w}: row 0 (item wmcq-0): answer 'D' is not an option letter")):
        load_source("world_mcq", spec_mcq, w)


# ---- imported LADDER session files -------------------------------------------------------------

TURN = {"turn": 1, "domain": "anatomy", "tier": "mid", "question": "Which bone?", "gt_answer": "B",
        "agent_answer": "B", "agent_confidence": 0.8, "agent_abstain": False, "gt_correct": True,
        "user_response": "That's correct.", "in_user_expertise": True}
DOC = {"metadata": {"agent_model": "m1", "user_model": "u"},
       "sessions": [{"session_id": 0, "persona": {"id": "p0", "expertise": ["anatomy"], "style": "casual",
                                                  "tolerance": 0.5, "explicitness": 0.5},
                     "agent_model": "m1", "user_model": "u",
                     "log": [TURN, {**TURN, "turn": 2, "agent_answer": None, "gt_correct": False}]},
                    {"session_id": 1, "log": [TURN]}]}


def _session_file(tmp_path, doc, name="capbound_sessions_m1_20260101.json"):
    f = tmp_path / name
    f.write_text(json.dumps(doc), encoding="utf-8")
    return f


def test_good_session_file_imports_every_turn(tmp_path):
    df = read_released_sessions(_session_file(tmp_path, DOC))
    assert len(df) == 3 and list(df["session_id"]) == ["0", "0", "1"]
    # an unparsed answer is kept (scored wrong), not dropped
    assert list(df["parsed"]) == [True, False, True] and not df["correct"].iloc[1]


def _mutated(fn):
    doc = json.loads(json.dumps(DOC))  # no shared turn dicts (deepcopy would keep them shared)
    fn(doc)
    return doc


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("sessions"), r"no 'sessions' key"),
    (lambda d: d.update(sessions={"0": {}}), r"'sessions' must be a list, got dict"),
    (lambda d: d["sessions"][1].pop("log"), r"sessions\[1\] has no 'log'"),
    (lambda d: d["sessions"].append(7), r"sessions\[2\] must be an object, got int"),
    (lambda d: d["sessions"][0]["log"][1].pop("user_response"), r"sessions\[0\]\.log\[1\] lacks \['user_response'\]"),
    (lambda d: d["sessions"][0]["log"][1].update(agent_confidence="high"),
     r"sessions\[0\]\.log\[1\]\.agent_confidence: expected int/float, got str 'high'"),
    (lambda d: d["sessions"][1]["log"][0].update(turn="1"), r"sessions\[1\]\.log\[0\]\.turn: expected int, got str '1'"),
    (lambda d: d["sessions"][0]["log"][0].update(gt_correct=1), r"sessions\[0\]\.log\[0\]\.gt_correct: expected bool, got int 1"),
    (lambda d: d["sessions"][0]["log"].append("turn 3"), r"sessions\[0\]\.log\[2\] must be an object, got str"),
    (lambda d: d["sessions"][0]["log"][0].update(agent_confidence=1.7), r"confidence missing or outside \[0, 1\] in rows \[0\]"),
    (lambda d: d["sessions"][0]["log"][1].update(turn=1), r"duplicate \(model, session_id, turn\) in rows \[1\]"),
])
def test_malformed_session_file_names_file_session_and_turn(tmp_path, mutate, message):
    f = _session_file(tmp_path, _mutated(mutate))
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*" + message):
        read_released_sessions(f)


def test_truncated_and_non_utf8_session_files(tmp_path):
    text = json.dumps(DOC, indent=1)
    f = tmp_path / "capbound_sessions_cut.json"
    f.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{f}: invalid JSON at line ")):
        read_released_sessions(f)
    g = tmp_path / "capbound_sessions_latin1.json"
    g.write_bytes(text.replace("Which bone?", "Which b\u00f4ne?").encode("latin-1"))
    with pytest.raises(ValueError, match=re.escape(f"{g}: not UTF-8 (invalid byte at offset")):
        read_released_sessions(g)


def test_import_dir_names_the_one_bad_file(tmp_path):
    _session_file(tmp_path, DOC, "capbound_sessions_a.json")
    (tmp_path / "sub").mkdir()
    bad = _session_file(tmp_path / "sub", _mutated(lambda d: d["sessions"][0]["log"][0].pop("domain")),
                        "capbound_sessions_b.json")
    with pytest.raises(ValueError, match=re.escape(f"{bad}: sessions[0].log[0] lacks ['domain']")):
        import_sessions(tmp_path)
    bad.unlink()
    assert len(import_sessions(tmp_path)) == 3
