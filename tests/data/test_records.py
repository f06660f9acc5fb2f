import json

import pytest

from prmkit.data.io import load_records
from prmkit.data.records import detect_scheme, normalise_label, validate_records
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError

GOOD = {"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 4.", "The answer is 4."], "labels": [True, True]}


def problems_of(row, **kw):
    _, report = validate_records([row], "f.jsonl", skip_invalid=True, **kw)
    return [(p.row, p.field, p.message) for p in report.problems]


@pytest.mark.parametrize("labels, expected", [
    ([True, False], [1.0, 0.0]),
    ([1, 0], [1.0, 0.0]),
    ([0.25, 1.0], [0.25, 1.0]),
    ([1, None], [1.0, None]),
])
def test_binary_and_soft_labels_normalise(labels, expected):
    records, report = validate_records([{**GOOD, "labels": labels}], "f")
    assert records[0]["labels"] == expected
    assert report.scheme == "binary"


@pytest.mark.parametrize("neutral, expected", [("positive", 1.0), ("negative", 0.0), ("ignore", None)])
def test_ternary_neutral_policy(neutral, expected):
    rows = [{**GOOD, "labels": [1, 0]}, {**GOOD, "labels": [-1, 1]}]
    records, report = validate_records(rows, "f", neutral=neutral)
    assert report.scheme == "ternary"  # one -1 anywhere makes the whole file ternary
    assert records[0]["labels"] == [1.0, expected]
    assert records[1]["labels"] == [0.0, 1.0]


def test_scheme_is_file_wide():
    assert detect_scheme([{"labels": [1, 0]}, {"labels": [True, -1]}]) == "ternary"
    assert detect_scheme([{"labels": [1, 0]}, {"labels": [0.5]}]) == "binary"
    with pytest.raises(ValueError, match="-1/0/\\+1"):
        normalise_label(0.5, "ternary", "positive")


@pytest.mark.parametrize("row, field, fragment", [
    ({**GOOD, "labels": [1]}, "labels", "1 labels for 2 steps"),
    ({**GOOD, "labels": [1, float("nan")]}, "labels[1]", "not a finite number"),
    ({**GOOD, "labels": [1, float("inf")]}, "labels[1]", "not a finite number"),
    ({**GOOD, "labels": [1, 2]}, "labels[1]", "outside [0, 1]"),
    ({**GOOD, "labels": [1, "yes"]}, "labels[1]", "is a str"),
    ({**GOOD, "labels": "11"}, "labels", "expected a list"),
    ({**GOOD, "completions": ["ok", "  "]}, "completions[1]", "empty step"),
    ({**GOOD, "completions": [], "labels": []}, "completions", "is empty"),
    ({**GOOD, "completions": "one step"}, "completions", "list of strings"),
    ({**GOOD, "prompt": ""}, "prompt", "is empty"),
    ({**GOOD, "prompt": 3}, "prompt", "expected a string"),
    ({"prompt": "p", "labels": [1]}, "completions", "missing"),
])
def test_each_bad_input_class_names_row_field_and_fix(row, field, fragment):
    found = problems_of(row)
    assert any(f == field and fragment in m for _, f, m in found), found
    assert all(r == 1 for r, _, _ in found)


def test_out_of_range_label_message_has_the_fix():
    with pytest.raises(PRMError) as err:
        validate_records([GOOD, {**GOOD, "labels": [1, 7]}], "data/train.jsonl")
    text = str(err.value)
    assert "data/train.jsonl: row 2, field 'labels[1]'" in text
    assert "data.skip_invalid=true" in text and "--skip-invalid" not in text


def test_skip_invalid_counts_instead_of_failing():
    rows = [GOOD, {**GOOD, "labels": [1]}, "not an object", GOOD]
    records, report = validate_records(rows, "f", skip_invalid=True)
    assert len(records) == 2
    assert (report.rows_read, report.rows_kept, report.rows_skipped) == (4, 2, 2)


def test_extra_keys_pass_through():
    records, _ = validate_records([{**GOOD, "id": "x-1", "first_error": -1}], "f")
    assert records[0]["id"] == "x-1" and records[0]["first_error"] == -1


def test_corrupt_jsonl_line_is_named(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + '{"prompt": "x", "completions": [\n')
    with pytest.raises(PRMError, match=r"train.jsonl: row 2 is not valid JSON"):
        read_rows(path)


def test_non_utf8_is_named(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
    with pytest.raises(PRMError, match="row 2 is not UTF-8"):
        read_rows(path)


def test_unknown_suffix_and_missing_file(tmp_path):
    with pytest.raises(PRMError, match="no such file"):
        read_rows(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(PRMError, match="unknown data format"):
        read_rows(tmp_path / "x.csv")


def test_all_readers_keep_label_values_and_types(tmp_path):
    """Float labels stay floats, None stays None, through JSON, Parquet and a datasets folder."""
    import datasets
    import pandas as pd

    rows = [{"prompt": "p1", "completions": ["a", "b", "c"], "labels": [0.25, None, 1.0]},
            {"prompt": "p2", "completions": ["a", "b"], "labels": [1.0, 0.0]}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "d.json").write_text(json.dumps(rows))
    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "dd"))
    for name in ["d.jsonl", "d.json", "d.parquet", "ds", "dd", "dd#train"]:
        records, _ = load_records(tmp_path / name if "#" not in name else f"{tmp_path}/{name}")
        assert [r["labels"] for r in records] == [[0.25, None, 1.0], [1.0, 0.0]], name
        assert all(isinstance(x, float) for x in records[1]["labels"]), name
