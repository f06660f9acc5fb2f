"""Answer extraction, normal forms and checking, on hand-made cases and on the real GSM8K and MATH-500 answers."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import prmkit.answers as answers
from prmkit.answers import (
    AnswerChecker,
    canonical_answer,
    extract_answer,
    fast_check,
    gold_answer,
    sample_answer,
    vote,
)
from prmkit.errors import PRMError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        pytest.skip(f"{path} is absent (real data lives in ../shared/data, see its SOURCE.md)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def perturb(answer: str) -> str | None:
    """The answer with its first digit changed: a different value, written the same way."""
    digit = re.search(r"\d", answer)
    if digit is None:
        return None
    return answer[:digit.start()] + str((int(digit.group()) + 1) % 10) + answer[digit.end():]


@pytest.fixture(scope="module")
def checker():
    with AnswerChecker(workers=2, timeout=20.0) as shared:
        yield shared


@pytest.mark.parametrize("text, expected", [
    ("So 3 + 4 = 7.\n\nThe answer is \\boxed{7}.", "7"),
    ("First \\boxed{3}, then correcting: \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("Nested: $\\boxed{\\frac{\\sqrt{3}}{2}}$", "\\frac{\\sqrt{3}}{2}"),
    ("Old style \\fbox{12} here", "12"),
    ("Spaced \\boxed 5$ form", "5"),
    ("The final answer is: $\\dfrac{3}{4}$.", "\\dfrac{3}{4}"),
    ("Therefore the answer is 42 apples. Nice.", "42"),
    ("**Answer:** 17", "17"),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 1,234", "1,234"),
    ("I got 3, then 4.5 after fixing it.", "4.5"),
    ("Total: $1,250.", "1,250"),
    ("Truncated \\boxed{\\frac{1}{2", None),
    ("No digits and no answer here.", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_a_box_wins_over_a_later_phrase_and_number():
    assert extract_answer("\\boxed{9}. The answer is 3. Check: 2 + 2 = 4") == "9"


@pytest.mark.parametrize("text, expected", [
    ("1,000", "1000"), ("5.0", "5"), ("$5", "5"), ("\\$5.50", "5.5"), ("+7", "7"), ("-0.0", "0"), (".5", "0.5"),
    ("10,\\!080", "10080"), ("1{,}000", "1000"), ("50\\%", "50"), ("30^\\circ", "30"), ("30^{\\circ}", "30"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\tfrac12", "\\frac{1}{2}"), ("\\frac{\\pi}2", "\\frac{\\pi}{2}"),
    ("\\sqrt2", "\\sqrt{2}"), ("3/4", "\\frac{3}{4}"), ("\\left( 1, 2 \\right]", "(1,2]"),
    ("5\\text{ cm}^2", "5"), ("864 \\mbox{ inches}^2", "864"), ("\\text{(C)}", "(C)"), ("x = 5", "5"),
    ("\\boxed{4}", "4"), ("\\frac{a}{b} \\rightarrow 0", "\\frac{a}{b}\\rightarrow0"),
    # text between two numbers joins them, it is no unit: never "23"
    ("2\\text{ and }3", "2and3"), ("1 \\mbox{ or } 2", "1or2"), ("(3\\text{ cm}, 4\\text{ cm})", "(3,4)"),
    ("4\\text{ cm} \\times 5\\text{ cm}", "4\\times5"), ("10\\text{ m/s}.", "10"),
])
def test_canonical_answer(text, expected):
    assert canonical_answer(text) == expected


def test_canonical_answer_keeps_none_and_groups_spellings():
    assert canonical_answer(None) is None
    spellings = ["1,000", "1000", "1000.0", "$1000", "1{,}000"]
    assert len({canonical_answer(s) for s in spellings}) == 1


def test_fast_path_decides_plain_numbers_without_a_worker():
    assert fast_check("1234", "1,234") is True
    assert fast_check("18.00", "18") is True
    assert fast_check("17.5", "18") is False
    assert fast_check(None, "18") is False
    assert fast_check("  ", "18") is False
    assert fast_check("0.5", "\\frac{1}{2}") is None  # needs math-verify
    assert fast_check("2516_9", "2516_8") is False  # math-verify alone would call these equal
    assert fast_check("2516", "2516_8") is True


def test_latex_answers_go_through_math_verify(checker):
    before = checker.counts.verified
    cases = [
        ("0.5", "\\frac{1}{2}", True), ("\\frac12", "\\dfrac{1}{2}", True), ("\\sqrt{12}", "2\\sqrt{3}", True),
        ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", True), ("[0,1)", "[0, 1)", True), ("(0,1)", "[0,1)", False),
        ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty,2)\\cup(3,\\infty)", True), ("\\frac{1}{3}", "0.5", False),
        ("\\pi", "\\frac{2\\pi}{2}", True), ("3\\sqrt{2}", "2\\sqrt{3}", False),
        ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
    ]
    got = checker.check_many([p for p, _, _ in cases], [g for _, g, _ in cases])
    assert got == [expected for _, _, expected in cases]
    assert checker.counts.verified > before


def test_check_solutions_extracts_first(checker):
    assert checker.check_solutions(["... so the answer is $\\boxed{\\dfrac{1}{2}}$.", "It is 0.4."],
                                   ["0.5", "0.5"]) == [True, False]


def test_check_many_needs_one_gold_per_prediction(checker):
    with pytest.raises(PRMError, match="one gold answer per prediction"):
        checker.check_many(["1", "2"], ["1"])


def test_bad_options_are_refused():
    with pytest.raises(PRMError, match="workers"):
        AnswerChecker(workers=0)
    with pytest.raises(PRMError, match="timeout"):
        AnswerChecker(timeout=0)


def test_gsm8k_golds_read_and_check(checker):
    rows = read_jsonl(DATA / "gsm8k" / "test.jsonl")
    golds = [gold_answer(row["answer"]) for row in rows]
    assert all(re.fullmatch(r"-?[\d,]+(\.\d+)?", gold) for gold in golds), "every GSM8K gold is a number"
    assert [extract_answer(row["answer"]) for row in rows] == golds
    assert any("," in gold for gold in golds)  # thousands separators occur and must match the plain spelling
    plain = [gold.replace(",", "") for gold in golds]
    assert checker.check_many(plain, golds) == [True] * len(golds)
    wrong = [str(int(float(p)) + 1) for p in plain]
    assert checker.check_many(wrong, golds) == [False] * len(golds)


def test_every_math500_gold_verifies_against_itself_in_a_boxed_solution(checker):
    rows = read_jsonl(DATA / "math500" / "test.jsonl")
    golds = [row["answer"] for row in rows]
    solutions = [f"Putting it together, the answer is $\\boxed{{{gold}}}$." for gold in golds]
    assert checker.check_solutions(solutions, golds) == [True] * len(golds)
    # The dataset's own worked solutions box an answer equal to the gold in every row.
    assert checker.check_solutions([row["solution"] for row in rows], golds) == [True] * len(golds)


def test_math_verify_itself_accepts_every_math500_gold():
    rows = read_jsonl(DATA / "math500" / "test.jsonl")
    refused = [row["answer"] for row in rows if not answers.verify_pair(row["answer"], row["answer"])]
    assert refused == []


def test_perturbed_math500_answers_are_wrong(checker):
    rows = read_jsonl(DATA / "math500" / "test.jsonl")
    pairs = [(perturb(row["answer"]), row["answer"]) for row in rows if perturb(row["answer"])]
    assert len(pairs) > 400
    before = checker.counts.verified
    accepted = [pair for pair, ok in zip(pairs, checker.check_many(*zip(*pairs))) if ok]
    assert accepted == []
    assert checker.counts.verified > before  # the LaTeX ones really went to math-verify


def slow_verify(prediction: str, gold: str) -> bool:
    """Stands in for math-verify in the worker: hangs on the gold "hang", dies on "die"."""
    if gold == "hang":
        time.sleep(600)
    if gold == "die":
        os._exit(3)
    return prediction.strip("{}") == gold.strip("{}")


def test_a_hung_item_times_out_counts_as_wrong_and_its_worker_is_replaced(monkeypatch):
    monkeypatch.setattr(answers, "verify_pair", slow_verify)
    with AnswerChecker(workers=1, timeout=1.0) as checker:
        checker.check("{a}", "a")  # the worker is up before the clock matters
        started = time.monotonic()
        got = checker.check_many(["{x}", "{y}", "{z}"], ["hang", "y", "z"])
        elapsed = time.monotonic() - started
        assert got == [False, True, True]
        assert checker.counts.timeouts == 1 and checker.counts.workers_replaced == 1
        assert elapsed < 60  # one timeout plus a fresh worker's start, not the 600 s sleep


def test_a_crashed_worker_counts_the_item_wrong_and_is_replaced(monkeypatch):
    monkeypatch.setattr(answers, "verify_pair", slow_verify)
    with AnswerChecker(workers=2, timeout=30.0) as checker:
        got = checker.check_many(["{p}", "{q}", "{r}"], ["die", "q", "r"])
        assert got == [False, True, True]
        assert checker.counts.crashes == 1 and checker.counts.workers_replaced == 1
        assert checker.counts.timeouts == 0


def test_repeated_pairs_are_verified_once(checker):
    before = checker.counts.verified
    got = checker.check_many(["0.25"] * 5 + ["\\frac{1}{4}"], ["\\frac{1}{4}"] * 5 + ["0.25"])
    assert got == [True] * 6
    assert checker.counts.verified - before == 2


def test_extract_answer_without_the_last_number_rule():
    assert extract_answer("so 3 * 4 = 12 apples", last_number=False) is None
    assert extract_answer("so 3 * 4 = 12. The answer is 12.", last_number=False) == "12"
    assert extract_answer("#### 12", last_number=False) == "12"


def test_vote_groups_canonical_answers_and_weighs():
    assert vote(["1,000", "999", "1000", "999", "1000.0"]) == [[0, 2, 4]]
    assert vote(["5", None, "6"]) == [[0], [2]]  # a tie: every winner, in order of first appearance
    assert vote([None, None]) == [] and vote([]) == []
    assert vote(["5", "6", "6"], weights=[0.9, 0.3, 0.4]) == [[0]]  # the weights decide, not the count
    with pytest.raises(ValueError, match="2 weights for 3 answers"):
        vote(["5", "6", "6"], weights=[0.9, 0.3])


def test_a_sample_cut_at_max_new_tokens_has_only_an_answer_it_stated():
    cut = "Each box holds 7, and there are 2 boxes, so 7 * 2 = 14 and then we add"
    assert sample_answer(cut, "length") is None  # 14 is unfinished working, not an answer
    assert sample_answer(cut, "eos") == sample_answer(cut, None) == "14"
    assert sample_answer("So the answer is 14. Now let us check: 7 + 7 =", "length") == "14"
    assert sample_answer("Thus \\boxed{14}. Checking, 2 * 7", "length") == "14"
