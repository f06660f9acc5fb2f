"""Read rows from JSONL, JSON, Parquet and `datasets` folders (saved with `save_to_disk`).

Readers return plain Python lists of dicts, so labels keep their exact values: no library casts a float label
to an int or a -100 to True on the way in.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from prmkit.data.records import LabelScheme, NeutralPolicy, ValidationReport, validate_records
from prmkit.errors import PRMError

SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}


def read_rows(path: str | Path) -> list[dict]:
    """All rows of a data file or `datasets` folder. `folder#split` picks a split of a DatasetDict."""
    text = str(path)
    split = None
    if "#" in text and not Path(text).exists():
        text, split = text.rsplit("#", 1)
    path = Path(text)
    if not path.exists():
        raise PRMError(f"{path}: no such file or folder; check the path (data.train / data.val)")
    if path.is_dir():
        return _read_dataset_folder(path, split)
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise PRMError(f"{path}: unknown data format '{path.suffix}'; use .jsonl, .json, .parquet "
                       "or a folder written by datasets' save_to_disk")
    return {"jsonl": _read_jsonl, "json": _read_json, "parquet": _read_parquet}[kind](path)


def load_records(path: str | Path, *, scheme: LabelScheme = "auto", neutral: NeutralPolicy = "positive",
                 skip_invalid: bool = False) -> tuple[list[dict], ValidationReport]:
    """Read and validate: the records in contract form, and what was read, kept and skipped."""
    return validate_records(read_rows(path), str(path), scheme=scheme, neutral=neutral, skip_invalid=skip_invalid)


def write_jsonl(records: Iterable[dict], path: str | os.PathLike) -> int:
    """Write records as UTF-8 JSON lines via a temporary file, so a failed run never leaves half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.",
                                         suffix=".tmp", delete=False)
    count = 0
    try:
        with handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return count


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with _open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                # utf-8-sig on the first line: editors on Windows start a UTF-8 file with a byte-order mark
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise PRMError(f"{path}: row {line_number} is not UTF-8 text; re-encode the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise PRMError(f"{path}: row {line_number} is not valid JSON ({err.msg} at column {err.colno}); "
                               "fix or delete that line") from None
            except (ValueError, RecursionError) as err:
                raise PRMError(f"{path}: row {line_number} cannot be read ({_json_limit(err)}); "
                               "fix or delete that line") from None
    return rows


def _read_json(path: Path) -> list[dict]:
    with _open(path, "rb") as handle:
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


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return [_plain(row) for row in pq.read_table(path).to_pylist()]
    except Exception as err:  # pyarrow raises several unrelated types for a damaged file, reading or converting
        raise PRMError(f"{path}: cannot read as Parquet ({_first_line(err)}); check that the file is complete") \
            from None


def _read_dataset_folder(path: Path, split: str | None) -> list[dict]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise PRMError(f"{path}: a folder, but not one written by datasets' save_to_disk; "
                       "point to a .jsonl/.json/.parquet file or such a folder") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split is None:
            if list(loaded) != ["train"] and "train" not in loaded:
                raise PRMError(f"{path}: holds splits {list(loaded)}; pick one with '{path}#SPLIT'")
            split = "train"
        if split not in loaded:
            raise PRMError(f"{path}: no split '{split}'; it has {list(loaded)}")
        loaded = loaded[split]
    # to_list goes through Arrow's Python conversion: values come back as stored, not cast by a Features schema.
    return [_plain(row) for row in loaded.to_list()]


def _plain(value: Any) -> Any:
    """Arrow can hand back numpy scalars or arrays; make them Python values so validation sees what a user wrote."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return value


def _json_limit(err: Exception) -> str:
    """The two ways valid-looking JSON still fails in Python: a number too long to convert, nesting too deep."""
    if isinstance(err, RecursionError):
        return "values nested too deeply"
    return _first_line(err)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def _open(path: Path, mode: str):
    try:
        return path.open(mode)
    except OSError as err:
        raise PRMError(f"{path}: cannot open ({err.strerror})") from None
