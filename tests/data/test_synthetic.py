from __future__ import annotations

import json
import re

import pytest

from prmkit.data import synthetic
from prmkit.data.synthetic import ERROR_KINDS, generate_records, generate_splits
from prmkit.files import write_jsonl

EXPR = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return generate_records(1000, seed=123)


def parse(step: str) -> tuple[int, str, int, int]:
    found = EXPR.findall(step)
    assert len(found) == 1, f"expected exactly one 'a op b = c' in {step!r}"
    a, op, b, c = found[0]
    return int(a), op, int(b), int(c)


def evaluates(a: int, op: str, b: int, c: int) -> bool:
    return OPS[op](a, b) == c


def walk(row: dict):
    """Yield (index, parsed step, numbers already on the page) for each step."""
    seen = {int(x) for x in re.findall(r"\d+", row["prompt"])}
    for i, step in enumerate(row["completions"]):
        a, op, b, c = parse(step)
        yield i, (a, op, b, c), set(seen)
        seen.add(c)


def test_record_shape(rows):
    for row in rows:
        assert set(row) == {"prompt", "completions", "labels", "first_error", "error_kind", "answer", "gold_answer"}
        assert 3 <= len(row["completions"]) <= 6
        assert len(row["labels"]) == len(row["completions"])
        assert 20 <= len(row["prompt"].split()) <= 45
        assert all("\n" not in step and step.strip() == step for step in row["completions"])
        assert (row["error_kind"] is None) == (row["first_error"] == -1)
        assert row["answer"] == str(parse(row["completions"][-1])[3])
        json.dumps(row)


@pytest.mark.parametrize("after_error, tail", [("negative", 0), ("unlabelled", None)])
def test_labels_follow_first_error(after_error, tail):
    for row in generate_records(300, seed=5, after_error=after_error):
        k, labels = row["first_error"], row["labels"]
        if k == -1:
            assert labels == [1] * len(labels)
        else:
            assert labels[:k] == [1] * k and labels[k] == 0
            assert labels[k + 1:] == [tail] * (len(labels) - k - 1)


def test_correct_chains_are_right(rows):
    correct = [row for row in rows if row["first_error"] == -1]
    assert correct
    for row in correct:
        assert row["answer"] == row["gold_answer"]
        for _, (a, op, b, c), seen in walk(row):
            assert evaluates(a, op, b, c), row
            assert {a, b} <= seen, f"operand not from the prompt or an earlier step: {row}"


def test_error_step_is_really_wrong(rows):
    for row in rows:
        k, kind = row["first_error"], row["error_kind"]
        if k == -1:
            continue
        assert row["answer"] != row["gold_answer"], row
        for i, (a, op, b, c), seen in walk(row):
            if i != k:
                # Before the error the chain is right; after it, each step follows locally from what is shown.
                assert evaluates(a, op, b, c) and {a, b} <= seen, (i, row)
            elif kind == "arithmetic_slip":
                assert not evaluates(a, op, b, c) and {a, b} <= seen, row
            elif kind == "wrong_operation":
                assert evaluates(a, op, b, c) and {a, b} <= seen, row
            else:  # wrong_carry / misread_quantity: a number that is nowhere on the page so far
                assert evaluates(a, op, b, c) and not {a, b} <= seen, row
                assert kind != "wrong_carry" or k > 0


def test_every_error_kind_occurs_and_filter_is_respected(rows):
    assert {row["error_kind"] for row in rows} == set(ERROR_KINDS) | {None}
    only = generate_records(200, seed=1, error_kinds=["wrong_carry", "misread_quantity"])
    assert {row["error_kind"] for row in only} == {"wrong_carry", "misread_quantity", None}


def test_rows_are_diverse(rows):
    assert len({row["prompt"] for row in rows}) > 0.97 * len(rows)
    assert {len(row["completions"]) for row in rows} == {3, 4, 5, 6}
    assert {parse(step)[1] for row in rows for step in row["completions"]} == set("+-*/")
    assert len({row["first_error"] for row in rows}) >= 6


@pytest.mark.parametrize("fraction, n_rows", [(0.0, 200), (0.3, 1000), (0.75, 1000), (1.0, 200)])
def test_correct_fraction(fraction, n_rows):
    rows = generate_records(n_rows, seed=9, correct_fraction=fraction)
    share = sum(row["first_error"] == -1 for row in rows) / len(rows)
    assert abs(share - fraction) <= 0.02


def test_reproducible():
    assert generate_records(200, seed=42) == generate_records(200, seed=42)
    assert generate_records(200, seed=42) != generate_records(200, seed=43)
    assert generate_splits(50, 20, seed=3) == generate_splits(50, 20, seed=3)
    assert generate_records(0, seed=1) == []


def test_splits_are_disjoint():
    train, val = generate_splits(500, 200, seed=11, correct_fraction=0.5)
    assert len(train) == 500 and len(val) == 200
    assert not {row["prompt"] for row in train} & {row["prompt"] for row in val}
    assert val != train[:200]


def test_colliding_held_out_rows_are_regenerated(monkeypatch):
    # Force the held-out stream to equal the train stream, so every held-out row collides and must be redrawn.
    real = synthetic._derive_seed
    monkeypatch.setattr(synthetic, "_derive_seed", lambda seed, tag: seed if tag == "val" else real(seed, tag))
    train, val = generate_splits(100, 100, seed=4, correct_fraction=0.3, after_error="unlabelled")
    assert len(val) == 100
    assert not {row["prompt"] for row in train} & {row["prompt"] for row in val}
    assert sum(row["first_error"] == -1 for row in val) == 30  # redraws keep each row's correct/incorrect status
    assert all(None in row["labels"] for row in val if 0 <= row["first_error"] < len(row["labels"]) - 1)


def test_write_jsonl(tmp_path, rows):
    path = tmp_path / "nested" / "dir" / "train.jsonl"
    assert write_jsonl(iter(rows[:25]), path) == 25
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == rows[:25]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"n_rows": -1}, "n_rows"),
    ({"n_rows": 2.5}, "n_rows"),
    ({"seed": None}, "seed"),
    ({"correct_fraction": 1.5}, "correct_fraction"),
    ({"correct_fraction": -0.1}, "correct_fraction"),
    ({"after_error": "ignore"}, "after_error"),
    ({"error_kinds": ["off_by_one"]}, "off_by_one"),
    ({"error_kinds": "arithmetic_slip"}, "error_kinds"),
    ({"error_kinds": []}, "error_kinds"),
])
def test_bad_arguments(kwargs, fragment):
    args = {"n_rows": 10, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        generate_records(**args)
    if "n_rows" not in kwargs and "seed" not in kwargs:
        with pytest.raises(ValueError, match=fragment):
            generate_splits(10, 10, 0, **kwargs)
