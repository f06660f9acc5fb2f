"""One file, the same row numbers in every command: a file that starts with a byte-order mark and has blank lines
gives the same rows to `train`, `data validate`, `data stats`, `score` and `eval`, and a bad row is named by the same
number (its line in the file) in each of them. `eval --limit` names rows by their place in the file, not in its
sample."""

from __future__ import annotations

import json

import pytest

from prmkit.cli import main

GOOD = {"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2.", "So 2."], "labels": [1, 1]}
BAD = {"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 4."], "labels": [1, 0]}  # a label too many
NO_CHAIN = {"prompt": "What is 3 + 3?", "answer": 6}  # nothing to score


def write_file(path, rows):
    """Byte-order mark, a blank line after the first row, two blank lines before the last one."""
    lines = [json.dumps(rows[0]), "", *map(json.dumps, rows[1:-1]), "", "", json.dumps(rows[-1])]
    path.write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode("utf-8"))
    return path


@pytest.fixture
def files(tmp_path):
    good = write_file(tmp_path / "good.jsonl", [GOOD, GOOD, GOOD, GOOD])
    labels = write_file(tmp_path / "labels.jsonl", [GOOD, GOOD, GOOD, BAD])  # BAD is on line 7
    chains = write_file(tmp_path / "chains.jsonl", [GOOD, GOOD, GOOD, NO_CHAIN])  # NO_CHAIN is on line 7
    return good, labels, chains


def test_a_bom_file_with_blank_lines_reads_the_same_in_every_command(files, tiny_run, tiny_llama, tmp_path,
                                                                      capsys):
    good, _, _ = files
    assert main(["data", "validate", str(good)]) == 0
    assert "4 rows, 0 invalid" in capsys.readouterr().out
    assert main(["score", str(tiny_run), str(good), str(tmp_path / "scored.jsonl"), "--device", "cpu"]) == 0
    assert len((tmp_path / "scored.jsonl").read_text().splitlines()) == 4
    assert main(["eval", str(tiny_run), str(good), "--device", "cpu", "--out", str(tmp_path / "eval")]) == 0
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["splits"]["good"]["rows"] == 4
    assert main(["train", *train_args(tiny_llama, good, tmp_path)]) == 0
    assert json.loads((tmp_path / "runs" / "prm" / "summary.json").read_text())["train_rows"] == 4


def test_a_bad_row_has_the_same_number_in_every_command(files, tiny_run, tiny_llama, tmp_path, capsys):
    _, labels, chains = files
    assert main(["data", "validate", str(labels)]) == 1
    assert "labels.jsonl: row 7, field 'labels'" in capsys.readouterr().out
    assert main(["train", *train_args(tiny_llama, labels, tmp_path)]) == 2
    assert "labels.jsonl: row 7, field 'labels'" in capsys.readouterr().err
    assert main(["eval", str(tiny_run), str(labels), "--device", "cpu", "--out", str(tmp_path / "e1")]) == 2
    assert "labels.jsonl: row 7, field 'labels'" in capsys.readouterr().err
    assert main(["score", str(tiny_run), str(chains), str(tmp_path / "s.jsonl"), "--device", "cpu"]) == 2
    assert "chains.jsonl: row 7: no chain to score" in capsys.readouterr().err
    # --limit 2 keeps the 1st and 3rd rows (evenly spaced); the 3rd is on line 4 and is named so, not "row 2"
    sampled = write_file(tmp_path / "sampled.jsonl", [GOOD, GOOD, NO_CHAIN, GOOD])
    assert main(["eval", str(tiny_run), str(sampled), "--limit", "2", "--device", "cpu",
                 "--out", str(tmp_path / "e2")]) == 2
    assert "sampled.jsonl: row 4: no chain to score" in capsys.readouterr().err


def train_args(model, data, tmp_path) -> list[str]:
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    return [str(config), f"model.base={model}", f"data.train={data}", "data.max_length=64",
            f"output_dir={tmp_path / 'runs'}", "training.max_steps=1", "training.batch_size=2"]
