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


def test_parse_grade_takes_the_last_grade():
    from selfknow.judge import parse_grade

    assert parse_grade("CORRECT") is True
    assert parse_grade("The answer is not correct. INCORRECT") is False
    assert parse_grade("Incorrect at first glance, but on reflection: correct.") is True
    assert parse_grade("I cannot tell.") is None
    assert parse_grade(None) is None


def test_cohen_kappa_matches_sklearn():
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from selfknow.judge import cohen_kappa

    rng = np.random.default_rng(0)
    for _ in range(10):
        a = rng.random(50) < 0.6
        b = np.where(rng.random(50) < 0.8, a, ~a)
        assert abs(cohen_kappa(a, b) - cohen_kappa_score(a, b)) < 1e-12
    assert np.isnan(cohen_kappa([True, True], [True, True]))
