from selfknow.judge import exact_match, letter_match, normalise_answer, parse_option_letter


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
    assert parse_option_letter("I think the answer is d.", 4) == "D"
    assert parse_option_letter("E", 4) is None
    assert parse_option_letter("no idea", 4) is None
    assert parse_option_letter(None, 4) is None
    assert letter_match("b ", "B") and not letter_match(None, "B")
