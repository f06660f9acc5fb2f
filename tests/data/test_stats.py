"""Data set statistics, whole-file validation and the grouped train/val split."""

from __future__ import annotations

import json
import random

import pytest
from rich.console import Console
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from prmkit.data.stats import dataset_stats, render_stats, split_records, validate_file
from prmkit.errors import PRMError
from prmkit.tokenize import tokenize_chain

RECORDS = [
    {"prompt": "p1 p2", "completions": ["a b", "c"], "labels": [1.0, 1.0]},  # 1 + 3 + 3 + 2 = 9 tokens
    {"prompt": "q", "completions": ["d e f", "g h", "i"], "labels": [1.0, None, 0.0]},  # 1 + 2 + 4 + 3 + 2 = 12
    {"prompt": "r s t", "completions": ["j"], "labels": [0.5]},  # 1 + 4 + 2 = 7
]
SEPARATOR = " |"


@pytest.fixture(scope="module")
def word_tokenizer() -> PreTrainedTokenizerFast:
    """One token per word and per '|', plus BOS: token counts can be read off the text."""
    words = sorted({w for r in RECORDS for text in [r["prompt"], *r["completions"]] for w in text.split()})
    vocab = {token: i for i, token in enumerate(["[UNK]", "<s>", "|", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="[UNK]")


def test_stats_without_tokenizer():
    stats = dataset_stats(RECORDS)
    assert stats["rows"] == 3 and stats["steps"] == 6
    assert stats["steps_per_row"] == {"min": 1, "mean": 2.0, "median": 2, "max": 3}
    assert stats["labels"] == {"positive": 3, "negative": 1, "soft": 1, "unlabelled": 1}
    assert stats["rows_with_error"] == 1 and stats["error_share"] == pytest.approx(1 / 3)
    assert "tokens" not in stats
    with pytest.raises(PRMError, match="max_length needs a tokenizer"):
        dataset_stats(RECORDS, max_length=10)


def test_stats_token_lengths_and_truncation(word_tokenizer):
    full = [len(tokenize_chain(word_tokenizer, r["prompt"], r["completions"], r["labels"], separator=SEPARATOR,
                               max_length=10**6).input_ids) for r in RECORDS]
    assert full == [9, 12, 7]
    stats = dataset_stats(RECORDS, word_tokenizer, separator=SEPARATOR, max_length=10)
    assert stats["tokens"]["min"] == 7 and stats["tokens"]["max"] == 12 and stats["tokens"]["p50"] == 9
    assert stats["tokens"]["mean"] == pytest.approx(28 / 3)
    assert stats["tokens"]["p95"] == pytest.approx(11.7)  # linear between 9 and 12
    # row 2 keeps BOS + prompt + steps 0-1 (10 tokens) and drops its last, labelled step
    assert stats["rows_truncated"] == 1 and stats["truncated_share"] == pytest.approx(1 / 3)
    assert stats["steps_dropped"] == 1 and stats["steps_dropped_share"] == pytest.approx(1 / 6)
    assert stats["labelled_steps_dropped"] == 1
    nothing_cut = dataset_stats(RECORDS, word_tokenizer, separator=SEPARATOR, max_length=12)
    assert nothing_cut["rows_truncated"] == 0 and nothing_cut["steps_dropped"] == 0


def test_stats_of_nothing_and_the_table(word_tokenizer):
    empty = dataset_stats([], word_tokenizer, max_length=8)
    assert empty["rows"] == 0 and empty["error_share"] is None and empty["tokens"]["max"] is None
    console = Console(record=True, width=120)
    console.print(render_stats(dataset_stats(RECORDS, word_tokenizer, separator=SEPARATOR, max_length=10)))
    console.print(render_stats(empty))
    text = console.export_text()
    for expected in ("rows", "positive steps", "rows with an error", "tokens per row", "rows truncated at 10",
                     "steps dropped", "33.3%"):
        assert expected in text


def test_validate_file_reports_every_problem_with_its_line(tmp_path):
    lines = [json.dumps({"prompt": "p", "completions": ["a"], "labels": [1]}), "{broken",
             json.dumps({"prompt": "p", "completions": ["a", "b"], "labels": [1, 2]}), "",
             json.dumps({"prompt": "p", "labels": [1]}),
             json.dumps({"prompt": " ", "completions": [""], "labels": ["yes"]})]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report, problems = validate_file(path)
    assert report.rows_read == 5 and report.rows_kept == 1
    assert [p.row for p in report.problems] == [2, 3, 5, 6, 6, 6]  # line numbers, blank line 4 counted
    assert problems[0].startswith(f"{path}: row 2, field '<line>': is not valid JSON")
    assert "row 3, field 'labels[1]'" in problems[1] and "row 5, field 'completions'" in problems[2]
    assert all(f"row {p.row}" in line for p, line in zip(report.problems, problems))

    as_json = tmp_path / "data.json"
    as_json.write_text(json.dumps([{"prompt": "p", "completions": ["a"], "labels": [-1]},
                                   {"prompt": "p", "completions": ["a"], "labels": [0.5]}]))
    report, problems = validate_file(as_json, scheme="auto")
    assert report.scheme == "ternary" and report.rows_kept == 1
    assert problems == [f"{as_json}: row 2, field 'labels[0]': label 0.5 in a file with -1/0/+1 ratings; "
                        "every label must then be -1, 0 or +1"]


def _grouped_records() -> list[dict]:
    rng = random.Random(0)
    return [{"prompt": f"problem {i}", "completions": [f"step {j}"], "labels": [1.0]}
            for i in range(60) for j in range(rng.randint(1, 4))]


def test_split_keeps_each_problem_on_one_side():
    records = _grouped_records()
    train, val = split_records(records, 0.2, seed=1)
    assert len(train) + len(val) == len(records)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}
    assert abs(len(val) - 0.2 * len(records)) <= 4  # one problem has at most 4 rows
    assert [r for r in records if r in val] == val  # order kept within a side


def test_split_is_reproducible_and_order_independent():
    records = _grouped_records()
    train, val = split_records(records, 0.25, seed=7)
    assert split_records(records, 0.25, seed=7) == (train, val)
    shuffled = records[:]
    random.Random(3).shuffle(shuffled)
    assert {r["prompt"] for r in split_records(shuffled, 0.25, seed=7)[1]} == {r["prompt"] for r in val}
    assert {r["prompt"] for r in split_records(records, 0.25, seed=8)[1]} != {r["prompt"] for r in val}


def test_split_edge_cases():
    records = _grouped_records()
    assert split_records(records, 0.0, seed=0) == (records, [])
    train, val = split_records(records, 0.99, seed=0)
    assert train and val  # one problem always stays in train
    with pytest.raises(PRMError, match="val_fraction=1.5"):
        split_records(records, 1.5, seed=0)
    one_problem = [{"prompt": "same", "completions": ["a"], "labels": [1.0]}] * 10
    with pytest.raises(PRMError, match="share one prompt"):
        split_records(one_problem, 0.2, seed=0)
