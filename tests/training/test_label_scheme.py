"""A run reads its training and validation files with one label scheme, resolved from the training data, so a
0 means in validation what it meant in training."""

from __future__ import annotations

import pytest

from prmkit.config import load_config
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.training.trainer import load_splits

ROW = {"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 4.", "Check: 4 - 2 = 2.", "So 5."]}


def splits(tmp_path, train_labels, val_labels, *overrides):
    write_jsonl([{**ROW, "labels": train_labels}], tmp_path / "train.jsonl")
    write_jsonl([{**ROW, "completions": ROW["completions"][:len(val_labels)], "labels": val_labels}],
                tmp_path / "val.jsonl")
    config = load_config(None, [f"data.train={tmp_path / 'train.jsonl'}", f"data.val={tmp_path / 'val.jsonl'}",
                                *overrides])
    return load_splits(config)


def test_validation_reads_a_neutral_zero_as_training_did(tmp_path):
    train, val, reports = splits(tmp_path, [1, 0, -1], [1, 0])
    assert train[0]["labels"] == [1.0, 1.0, 0.0]
    assert val[0]["labels"] == [1.0, 1.0]  # read per file, [1, 0] would be binary: the neutral 0 as wrong
    assert [r.scheme for r in reports] == ["ternary", "ternary"]
    _, val, _ = splits(tmp_path, [1, 0, -1], [1, 0], "data.neutral_label=ignore")
    assert val[0]["labels"] == [1.0, None]


def test_a_rating_in_validation_of_a_binary_run_names_the_fix(tmp_path):
    with pytest.raises(PRMError, match=r"labels\[1\]': label -1 is a -1/0/\+1 rating.*data.label_scheme=ternary"):
        splits(tmp_path, [1, 1, 0], [1, -1])
    _, val, _ = splits(tmp_path, [1, 1, 0], [1, -1], "data.label_scheme=ternary")
    assert val[0]["labels"] == [1.0, 0.0]
