"""`PATH#split` picks a split where the local data has splits (a folder written by `DatasetDict.save_to_disk`), and
is refused for a plain .jsonl, .json or .parquet file, which has none: read whole, `file.jsonl#test` would hand
every row, the training ones among them, to whatever asked for the test split. `#train` names a file's rows as
datasets names a split-less file's rows. Every command reads through the same reader, so training's records and
label/search's problem rows behave alike."""

from __future__ import annotations

import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prmkit.data.io import load_records
from prmkit.data.problems import read_problem_rows
from prmkit.data.rows import RowReader, read_rows
from prmkit.errors import PRMError


def record(n: int) -> dict:
    return {"prompt": f"What is {n} + 1?", "completions": [f"{n} + 1 = {n + 1}."], "labels": [True]}


TRAIN = [record(1), record(2), record(3)]
TEST = [record(7), record(8)]


@pytest.fixture
def plain_files(tmp_path):
    rows = TRAIN + TEST
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    return tmp_path


def test_a_saved_dataset_dict_folder_gives_the_split_named(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_list(TRAIN),
                          "test": datasets.Dataset.from_list(TEST)}).save_to_disk(str(tmp_path / "dd"))
    assert read_rows(f"{tmp_path / 'dd'}#test") == TEST
    assert read_rows(f"{tmp_path / 'dd'}#train") == TRAIN
    assert read_rows(tmp_path / "dd") == TRAIN  # no split named: train, never another unasked
    records, _ = load_records(f"{tmp_path / 'dd'}#test")
    assert [r["prompt"] for r in records] == ["What is 7 + 1?", "What is 8 + 1?"]
    with pytest.raises(PRMError, match=r"dd: no split 'validation'; it has \['train', 'test'\]"):
        read_rows(f"{tmp_path / 'dd'}#validation")


@pytest.mark.parametrize("name, kind", [("rows.jsonl", "JSONL"), ("rows.json", "JSON"), ("rows.parquet", "Parquet")])
def test_a_split_of_a_plain_file_is_refused_with_what_to_do(plain_files, name, kind):
    path = plain_files / name
    with pytest.raises(PRMError) as raised:
        RowReader(f"{path}#test")
    message = str(raised.value)
    assert message.startswith(f"{path}#test: a local {kind} file has no splits")
    assert "drop '#test'" in message and f"prmkit data split {path} --val-fraction" in message
    assert read_rows(f"{path}#train") == read_rows(path) == TRAIN + TEST  # the file's rows are its only split


def test_training_and_problem_readers_refuse_it_too(plain_files):
    path = f"{plain_files / 'rows.jsonl'}#test"
    with pytest.raises(PRMError, match=r"rows.jsonl#test: a local JSONL file has no splits"):
        load_records(path)
    with pytest.raises(PRMError, match=r"rows.jsonl#test: a local JSONL file has no splits"):
        read_problem_rows(path, lambda number, value: value, limit=None, purpose="labelled", expected="problems")


def test_a_path_that_exists_with_a_hash_in_it_is_read_as_that_file(tmp_path):
    path = tmp_path / "round#test" / "rows.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(TEST[0]) + "\n")
    assert read_rows(path) == [TEST[0]]
