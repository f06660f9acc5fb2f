"""PRMBench conversion: labels from error_steps, the loader's (classification, idx) dedup, skips, options and
layout errors that name the row and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prmkit.cli import main
from prmkit.data.convert import convert, convert_rows, format_options
from prmkit.data.formats_base import guess_format
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "formats" / "prmbench.jsonl"


def convert_fixture(tmp_path: Path, **options):
    out = tmp_path / "prmbench.jsonl"
    report = convert("prmbench", FIXTURE, out, **options)
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()], report


def good_row(**changes) -> dict:
    row = {"idx": "prm_test_p9_0", "classification": "circular", "modified_question": "What is 1 + 1?",
           "modified_process": ["1 + 1 = 2.", "So 2."], "error_steps": [1], "original_question": "What is 1 + 1?",
           "original_process": ["1 + 1 = 2.", "So 2."], "modified_steps": [1], "reason": "-", "question": "1 + 1?"}
    row.update(changes)
    return row


def test_rows_become_records_labelled_by_error_steps(tmp_path):
    records, report = convert_fixture(tmp_path)
    assert (report.rows_read, report.rows_converted, report.rows_written) == (7, 4, 4)
    assert report.skipped == {"repeated (classification, idx): the first row is kept": 1,
                              "error_steps number outside 1..len(modified_process)": 1,
                              "empty step in modified_process": 1}
    confidence, circular, multi, redundant = records
    # error_steps are 1-based: [3, 4] marks the third and fourth steps
    assert confidence["labels"] == [1.0, 1.0, 0.0, 0.0]
    assert confidence["prompt"].startswith("Three pencils") and len(confidence["completions"]) == 4
    assert confidence["completions"][2] == "Subtracting gives $2p=0.58$, so $p=0.58$."  # the modified chain
    assert (confidence["id"], confidence["prmbench_class"]) == ("confidence_prm_test_p1_0", "confidence")
    assert confidence["error_steps"] == [3, 4]
    # the same idx under another class is another chain; an idx that already names its class is not prefixed
    assert circular["id"] == "circular_prm_test_p1_0" and circular["labels"] == [1.0, 0.0, 0.0, 1.0]
    assert circular["completions"][0] == "1. Call the price of a pencil p and of an eraser e."  # as written
    assert multi["labels"] == [1.0, 1.0, 1.0] and multi["prmbench_class"] == "multi_solutions"
    assert redundant["prmbench_class"] == "redundency" and redundant["labels"] == [1.0, 0.0, 1.0, 1.0]
    assert report.breakdown == {"classification=confidence": 1, "classification=circular": 1,
                                "classification=multi_solutions": 1, "classification=redundency": 1}
    assert +report.label_counts == {"positive": 10, "negative": 5}
    assert any("modified_process" in choice for choice in report.choices)


def test_strip_step_prefix_removes_step_numbers_only(tmp_path):
    records, _ = convert_fixture(tmp_path, strip_step_prefix=True)
    assert records[1]["completions"][:2] == ["Call the price of a pencil p and of an eraser e.",
                                             "Assume a pencil costs 29 cents."]
    rows = [good_row(modified_process=["Step 1: 0.5 + 0.5 = 1.", "0.5 is half of 1.", "2.Two"], error_steps=[])]
    records, report = convert_rows("prmbench", rows, strip_step_prefix=True)
    # a decimal is not a step number: a space must follow the dot
    assert records[0]["completions"] == ["0.5 + 0.5 = 1.", "0.5 is half of 1.", "2.Two"]
    assert any("strip_step_prefix=True" in choice for choice in report.choices)
    assert format_options("prmbench") == {"strip_step_prefix": False}
    with pytest.raises(PRMError, match="strip_step_prefix='yes' must be true or false"):
        convert_rows("prmbench", rows, strip_step_prefix="yes")


def test_guess_format_recognises_prmbench_rows():
    assert guess_format(read_rows(FIXTURE)[0]) == "prmbench"
    assert guess_format(good_row()) == "prmbench"
    assert guess_format({"problem": "p", "steps": ["s"], "label": -1}) == "processbench"


@pytest.mark.parametrize("changes, field, problem", [
    ({"modified_process": None}, "modified_process", "expected list, got nothing"),
    ({"modified_process": "1 + 1 = 2."}, "modified_process", "expected list, got str"),
    ({"modified_process": ["1 + 1 = 2.", 2]}, "modified_process", "expected a list of strings"),
    ({"error_steps": ["1"]}, r"error_steps\[0\]", r"expected a 1-based step number \(int\), got '1'"),
    ({"error_steps": [True]}, r"error_steps\[0\]", r"expected a 1-based step number \(int\), got True"),
    ({"classification": 3}, "classification", "expected str, got int"),
    ({"classification": " "}, "classification", "is empty"),
    ({"idx": None}, "idx", "expected str or int, got nothing"),
])
def test_bad_rows_name_the_file_row_and_field(changes, field, problem):
    rows = [good_row(), good_row(**{"idx": "prm_test_p9_1", **changes})]
    with pytest.raises(PRMError, match=rf"bench.jsonl: row 2, field '{field}': {problem}.*prmbench layout"):
        convert_rows("prmbench", rows, "bench.jsonl")


def test_a_row_of_another_format_says_which(tmp_path):
    other = tmp_path / "pb.json"
    other.write_text(json.dumps([{"problem": "p", "steps": ["s"], "label": -1}]))
    with pytest.raises(PRMError, match=r"row 1, field 'idx'.*looks like 'processbench'"):
        convert("prmbench", other, tmp_path / "out.jsonl")


def test_cli_convert_from_prmbench(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["data", "convert", "--from", "prmbench", str(FIXTURE), str(out), "strip_step_prefix=true"]) == 0
    printed = capsys.readouterr().out
    assert "rows read 7, converted 4, skipped 3; records written 4" in printed
    assert len(out.read_text(encoding="utf-8").splitlines()) == 4
