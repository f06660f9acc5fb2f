"""Fuzz the data readers: random, truncated and corrupted bytes, and odd-but-parseable JSON.

The promise: `read_rows` and `load_records` either return rows or raise PRMError, never another exception, and
never hang (each example runs under a SIGALRM budget). Whatever `load_records` accepts tokenizes without error.
"""

from __future__ import annotations

import io
import json
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis, a dev dependency: pip install hypothesis")

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tiny_models import build_tokenizer

from prmkit.data.io import load_records
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError
from prmkit.tokenize import tokenize_records

TOKENIZER = build_tokenizer()
SETTINGS = settings(max_examples=120, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
SECONDS_PER_EXAMPLE = 10
GOOD_ROWS = [{"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 4.", "The answer is 4."], "labels": [1, 0]},
             {"prompt": "Half of 8?", "completions": ["8 / 2 = 4."], "labels": [0.75]},
             {"prompt": "Rate it", "completions": ["a", "b", "c"], "labels": [-1, 0, 1]}]


@contextmanager
def time_limit(seconds: int):
    """Turn a hang into a test failure (hypothesis' deadline only reports after the call returns)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"reader still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_file(data: bytes, suffix: str) -> None:
    """Read bytes as a file of this format; only PRMError may escape, and accepted records must tokenize."""
    with tempfile.TemporaryDirectory() as folder, time_limit(SECONDS_PER_EXAMPLE):
        path = Path(folder) / f"data{suffix}"
        path.write_bytes(data)
        try:
            rows = read_rows(path)
        except PRMError:
            return
        assert isinstance(rows, list)
        try:
            records, report = load_records(path, skip_invalid=True)
        except PRMError:
            return
        assert report.rows_kept == len(records) <= len(rows)
        tokenize_records(TOKENIZER, records, separator="\n\n", max_length=64)


def encoded(rows: list, suffix: str) -> bytes:
    if suffix == ".jsonl":
        return "".join(json.dumps(r) + "\n" for r in rows).encode()
    if suffix == ".json":
        return json.dumps(rows).encode()
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


FORMATS = st.sampled_from([".jsonl", ".json", ".parquet"])


@SETTINGS
@given(st.binary(max_size=3000), FORMATS)
@example(b"[" * 100_000, ".json")  # nesting deeper than Python's recursion limit
@example(b"{\"a\":" * 50_000 + b"\n", ".jsonl")
@example(b"[" + b"1" * 5000 + b"]", ".json")  # an integer past Python's int-from-str digit limit
@example(b"1" * 5000 + b"\n", ".jsonl")
@example(b"\xef\xbb\xbf" + encoded(GOOD_ROWS, ".jsonl"), ".jsonl")  # a UTF-8 byte-order mark
@example(b"PAR1" + b"\x00" * 64 + b"PAR1", ".parquet")  # magic bytes, garbage metadata
@example(b"", ".parquet")
def test_random_bytes_give_rows_or_prmerror(data, suffix):
    read_file(data, suffix)


@SETTINGS
@given(FORMATS, st.data())
def test_truncated_or_corrupted_files_give_rows_or_prmerror(suffix, data):
    whole = encoded(GOOD_ROWS, suffix)
    cut = data.draw(st.integers(0, len(whole)), label="cut")
    damaged = bytearray(whole[:cut])
    for _ in range(data.draw(st.integers(0, 4), label="flips")):
        if damaged:
            index = data.draw(st.integers(0, len(damaged) - 1))
            damaged[index] = data.draw(st.integers(0, 255))
    read_file(bytes(damaged), suffix)


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-10 ** 400, 10 ** 400),
                         st.floats(allow_nan=True, allow_infinity=True),
                         st.text(max_size=20), st.sampled_from(["\ud83d", "ok\udc00", "", " ", "\n\n"]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4)), max_leaves=12)
ROW_LIKE = st.fixed_dictionaries({}, optional={"prompt": JSON_VALUES, "completions": JSON_VALUES,
                                               "labels": JSON_VALUES, "extra": JSON_VALUES})


@SETTINGS
@given(st.lists(st.one_of(ROW_LIKE, JSON_VALUES), max_size=6), st.sampled_from([".jsonl", ".json"]))
def test_any_json_rows_give_records_or_prmerror(rows, suffix):
    read_file(encoded(rows, suffix), suffix)


# Any code point, lone UTF-16 surrogates included: JSON can carry them as escapes ("\ud83d").
ANY_TEXT = st.lists(st.one_of(st.characters(), st.sampled_from(["\ud83d", "\udc00", "\x00", "\n\n"])),
                    min_size=1, max_size=15).map("".join)


@st.composite
def plausible_row(draw):
    """A row of the right shape with any text and label values: the part of the input space random JSON
    rarely reaches, and the one that passes validation and goes on to the tokenizer."""
    steps = draw(st.lists(ANY_TEXT, min_size=1, max_size=3))
    labels = draw(st.lists(st.one_of(st.sampled_from([-1, 0, 1, True, None, 0.5, 2, 10 ** 400]), st.floats()),
                           min_size=len(steps), max_size=len(steps)))
    return {"prompt": draw(ANY_TEXT), "completions": steps, "labels": labels}


@SETTINGS
@given(st.lists(plausible_row(), min_size=1, max_size=4), st.sampled_from([".jsonl", ".json"]))
def test_rows_with_any_text_and_labels_give_records_or_prmerror(rows, suffix):
    read_file(encoded(rows, suffix), suffix)


@SETTINGS
@given(st.lists(st.fixed_dictionaries({
    "prompt": st.one_of(st.text(max_size=20), st.none(), st.integers()),
    "completions": st.one_of(st.lists(st.text(max_size=10), max_size=3), st.text(max_size=5)),
    "labels": st.one_of(st.lists(st.one_of(st.floats(-2, 2), st.none()), max_size=3),
                        st.lists(st.integers(-3, 3), max_size=3))}), min_size=1, max_size=5))
def test_parquet_rows_of_any_shape_give_records_or_prmerror(rows):
    try:
        data = encoded(rows, ".parquet")
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return  # Arrow cannot write these mixed types; nothing to read
    read_file(data, ".parquet")


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_good_rows_still_read_in_every_format(suffix, tmp_path):
    path = tmp_path / f"good{suffix}"
    path.write_bytes(encoded(GOOD_ROWS[:2], suffix))
    records, report = load_records(path)
    assert report.rows_kept == 2 and records[1]["labels"] == [0.75]
