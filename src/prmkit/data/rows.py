"""The one row reader: every command that reads a data file (train, data validate/stats/split/convert, score, eval,
label, search) reads it here, so one file gives the same rows and the same row numbers everywhere. A dataset named
by id (`owner/name:config#split`) is a data file too (`prmkit.data.hub`).

A row's number is where a user finds it: the line of a .jsonl file (blank lines count, as in an editor), the
1-based position in a .json array, a Parquet file, a `datasets` folder or a dataset's split. A UTF-8 byte-order
mark (Windows editors write one) is read past in every format. Rows come back as plain Python values, so labels
keep their exact values: no library casts a float label to an int or a -100 to True on the way in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from prmkit.data.hub import (SYNTAX, is_saved_dataset, parse_dataset_id, pick_split, plain, read_hub_dataset,
                             read_repository_folder)
from prmkit.errors import PRMError

SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Row:
    number: int  # 1-based, as a user counts (see the module docstring)
    value: Any  # the parsed row; None when `problem` says why it could not be read
    problem: str | None = None  # only in lenient reading: why this line is not a row


class RowReader:
    """Iterate a data file as `Row`s, streaming where the format allows (JSONL, Parquet).

    `folder#split` picks a split of a `datasets` DatasetDict folder; `owner/name`, `owner/name#split` and
    `owner/name:config#split` name a dataset on the hub, or a local folder laid out as one (see `prmkit.data.hub`).
    A .jsonl, .json or .parquet file has no splits: `file#train` is the whole file (as for a dataset without
    splits, which `datasets` calls 'train'), and any other split is refused rather than read as every row.
    With `lenient=True` a .jsonl line that is not UTF-8 JSON comes back as a Row with `problem` set instead of
    stopping the read, so `prmkit data validate` can list every bad line. `progress_total` and `progress_done`
    measure the read in bytes for JSONL and in rows otherwise, for a progress bar.
    """

    def __init__(self, path: str | Path, *, lenient: bool = False):
        text, self.split, self.config, self.dataset_id = str(path), None, None, None
        if not Path(text).exists():  # a local path that exists always wins over a split, a config or an id
            if "#" in text:
                text, self.split = text.rsplit("#", 1)
            if ":" in text and not Path(text).exists() and Path(text.rsplit(":", 1)[0]).is_dir():
                text, self.config = text.rsplit(":", 1)
            if not Path(text).exists():
                self.dataset_id = parse_dataset_id(str(path))
        self.path, self.lenient = Path(str(path) if self.dataset_id else text), lenient
        self.source = str(path)  # as the user wrote it, with any config and split, for messages
        if self.dataset_id is not None:
            self.kind = "hub"
        elif not self.path.exists():
            raise PRMError(f"{self.path}: no such file or folder; check the path (a dataset on the hub is named "
                           f"{SYNTAX})")
        elif self.path.is_dir():
            self.kind = "datasets"
        else:
            self.kind = SUFFIXES.get(self.path.suffix.lower())
            if self.kind is None:
                raise PRMError(f"{self.path}: unknown data format '{self.path.suffix}'; use .jsonl, .json, "
                               f".parquet, a folder written by datasets' save_to_disk or a dataset id ({SYNTAX})")
            if self.split not in (None, "train"):
                raise PRMError(_no_splits_message(self.path, self.kind, self.split))
        self.progress_done = 0
        self._in_memory: list | None = None

    def __iter__(self) -> Iterator[Row]:
        if self.kind == "jsonl":
            yield from self._jsonl()
        elif self.kind == "parquet":
            yield from self._parquet()
        else:
            for index, value in enumerate(self._whole()):
                self.progress_done = index + 1
                yield Row(index + 1, value)

    @property
    def progress_total(self) -> int:
        if self.kind == "jsonl":
            return self.path.stat().st_size
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(self.path).metadata.num_rows
        return len(self._whole())

    def _jsonl(self) -> Iterator[Row]:
        with _open(self.path) as handle:
            for number, raw in enumerate(handle, start=1):
                self.progress_done += len(raw)
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    yield self._bad(number, "is not UTF-8 text; re-encode the file as UTF-8")
                    continue
                if not line.strip():
                    continue
                try:
                    yield Row(number, json.loads(line))
                except json.JSONDecodeError as err:
                    yield self._bad(number, f"is not valid JSON ({err.msg} at column {err.colno}); fix or delete "
                                            "that line")
                except (ValueError, RecursionError) as err:
                    yield self._bad(number, f"cannot be read ({_json_limit(err)}); fix or delete that line")

    def _bad(self, number: int, message: str) -> Row:
        if not self.lenient:
            raise PRMError(f"{self.path}: row {number} {message}")
        return Row(number, None, message)

    def _parquet(self) -> Iterator[Row]:
        import pyarrow.parquet as pq

        number = 0
        try:
            batches = pq.ParquetFile(self.path).iter_batches(batch_size=PARQUET_BATCH_ROWS)
            for batch in batches:
                for value in batch.to_pylist():
                    number += 1
                    self.progress_done = number
                    yield Row(number, plain(value))
        except PRMError:
            raise
        except Exception as err:  # pyarrow raises several unrelated types for a damaged file
            raise PRMError(f"{self.path}: cannot read as Parquet ({_first_line(err)}); check that the file is "
                           "complete") from None

    def _whole(self) -> list:
        """A .json array, a `datasets` folder or a hub dataset is read whole (none can be streamed row by row)."""
        if self._in_memory is None:
            if self.kind == "json":
                self._in_memory = _read_json(self.path)
            elif self.kind == "hub":
                self._in_memory = read_hub_dataset(self.dataset_id)
            else:
                self._in_memory = _read_dataset_folder(self.path, self.config, self.split)
        return self._in_memory


def read_rows(path: str | Path) -> list:
    """Every row's value, in file order (for code that needs no row numbers, such as the format converters)."""
    return [row.value for row in RowReader(path)]


def _read_json(path: Path) -> list:
    with _open(path) as handle:
        try:
            data = json.loads(handle.read().decode("utf-8-sig"))
        except UnicodeDecodeError:
            raise PRMError(f"{path}: not UTF-8 text; re-encode the file as UTF-8") from None
        except json.JSONDecodeError as err:
            raise PRMError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                           "a .json file must hold one array of rows (use .jsonl for one row per line)") from None
        except (ValueError, RecursionError) as err:
            raise PRMError(f"{path}: cannot be read ({_json_limit(err)})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise PRMError(f"{path}: expected a JSON array of rows, got {type(data).__name__}")
    return data


def _read_dataset_folder(path: Path, config: str | None, split: str | None) -> list:
    """A folder written by `save_to_disk`, else a folder laid out as a dataset repository (read as the hub's is)."""
    if not is_saved_dataset(path):
        return read_repository_folder(path, config, split)
    if config is not None:
        raise PRMError(f"{path}: a folder written by datasets' save_to_disk has no configs; drop ':{config}'")
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise PRMError(f"{path}: a folder, but not one written by datasets' save_to_disk; "
                       "point to a .jsonl/.json/.parquet file or such a folder") from None
    return pick_split(loaded, split, str(path))


def _no_splits_message(path: Path, kind: str, split: str) -> str:
    """Why `file#split` is refused: reading the whole file would hand back every row, a test split's among them."""
    name = {"jsonl": "JSONL", "json": "JSON", "parquet": "Parquet"}[kind]
    return (f"{path}#{split}: a local {name} file has no splits, so '#{split}' would read every row; drop "
            f"'#{split}', or split the file with `prmkit data split {path} --val-fraction 0.1 --out-dir DIR` and "
            "pass DIR/train.jsonl or DIR/val.jsonl (a folder written by datasets' save_to_disk keeps its splits: "
            "FOLDER#SPLIT)")


def _json_limit(err: Exception) -> str:
    """The two ways valid-looking JSON still fails in Python: a number too long to convert, nesting too deep."""
    if isinstance(err, RecursionError):
        return "values nested too deeply"
    return _first_line(err)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def _open(path: Path):
    try:
        return path.open("rb")
    except OSError as err:
        raise PRMError(f"{path}: cannot open ({err.strerror})") from None
