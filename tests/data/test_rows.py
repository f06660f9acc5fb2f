"""The one row reader: rows keep the numbers a user sees in the file, in every format, with or without a byte-order
mark; lenient reading reports a bad line instead of stopping."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prmkit.data.io import load_records
from prmkit.data.rows import RowReader, read_rows
from prmkit.errors import PRMError

GOOD = {"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2."], "labels": [1]}


def write_lines(path, lines, bom=False):
    text = "\n".join(lines) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


@pytest.mark.parametrize("bom", [False, True])
def test_jsonl_rows_are_numbered_by_line_blank_lines_included(tmp_path, bom):
    path = write_lines(tmp_path / "rows.jsonl", [json.dumps({"a": 1}), "", "   ", json.dumps({"a": 2}), "",
                                                  json.dumps({"a": 3})], bom=bom)
    rows = list(RowReader(path))
    assert [(row.number, row.value) for row in rows] == [(1, {"a": 1}), (4, {"a": 2}), (6, {"a": 3})]


def test_a_bad_line_is_named_by_its_line_number_or_reported_when_lenient(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", [json.dumps(GOOD), "", '{"prompt": ', json.dumps(GOOD)], bom=True)
    with pytest.raises(PRMError, match=r"rows.jsonl: row 3 is not valid JSON"):
        list(RowReader(path))
    rows = list(RowReader(path, lenient=True))
    assert [row.number for row in rows] == [1, 3, 4]
    assert rows[1].value is None and "not valid JSON" in rows[1].problem and rows[0].problem is None


def test_json_parquet_and_bom_json_number_rows_by_position(tmp_path):
    values = [{"a": i} for i in range(3)]
    (tmp_path / "rows.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(values).encode())
    pq.write_table(pa.Table.from_pylist(values), tmp_path / "rows.parquet")
    for name in ("rows.json", "rows.parquet"):
        rows = list(RowReader(tmp_path / name))
        assert [(row.number, row.value) for row in rows] == [(1, values[0]), (2, values[1]), (3, values[2])], name
    assert read_rows(tmp_path / "rows.parquet") == values


def test_progress_is_measured_in_bytes_for_jsonl_and_rows_otherwise(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", [json.dumps(GOOD)] * 3)
    reader = RowReader(path)
    assert reader.progress_total == path.stat().st_size
    list(reader)
    assert reader.progress_done == reader.progress_total
    (tmp_path / "rows.json").write_text(json.dumps([GOOD] * 4))
    reader = RowReader(tmp_path / "rows.json")
    assert reader.progress_total == 4 and len(list(reader)) == 4 and reader.progress_done == 4


def test_validation_problems_name_the_file_row_numbers(tmp_path):
    bad = {**GOOD, "labels": [7]}
    path = write_lines(tmp_path / "train.jsonl", ["", json.dumps(GOOD), "", json.dumps(bad)], bom=True)
    with pytest.raises(PRMError, match=r"train.jsonl: row 4, field 'labels\[0\]'"):
        load_records(path)
