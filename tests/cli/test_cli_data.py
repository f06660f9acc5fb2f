import json

from prmkit.cli import main
from prmkit.data.io import load_records
from prmkit.data.rows import read_rows


def test_synth_then_stats_then_split(tmp_path, capsys):
    assert main(["data", "synth", str(tmp_path / "s"), "--rows", "40", "--val-rows", "10", "--seed", "3"]) == 0
    train, _ = load_records(tmp_path / "s" / "train.jsonl")
    held_out, _ = load_records(tmp_path / "s" / "val.jsonl")
    assert len(train) == 40 and len(held_out) == 10
    assert main(["data", "stats", str(tmp_path / "s" / "train.jsonl"), "--json", str(tmp_path / "st.json")]) == 0
    stats = json.loads((tmp_path / "st.json").read_text())
    assert stats["rows"] == 40 and stats["steps"] == sum(len(r["completions"]) for r in train)
    assert main(["data", "split", str(tmp_path / "s" / "train.jsonl"), "--val-fraction", "0.25",
                 "--out-dir", str(tmp_path / "split")]) == 0
    a = read_rows(tmp_path / "split" / "train.jsonl")
    b = read_rows(tmp_path / "split" / "val.jsonl")
    assert len(a) + len(b) == 40 and not {r["prompt"] for r in a} & {r["prompt"] for r in b}


def test_validate_lists_every_bad_row_and_exits_1(tmp_path, capsys):
    good = {"prompt": "p", "completions": ["a"], "labels": [1]}
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([json.dumps(good), json.dumps({**good, "labels": [5]}), "{oops",
                               json.dumps({**good, "completions": []})]) + "\n")
    assert main(["data", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "row 2, field 'labels[0]'" in out and "row 3" in out and "row 4, field 'completions'" in out


def test_convert_with_options(tmp_path, capsys):
    source = tmp_path / "pb.json"
    source.write_text(json.dumps([{"id": "x", "problem": "q", "steps": ["a", "b", "c"], "label": 1,
                                   "final_answer_correct": False}]))
    assert main(["data", "convert", "--from", "processbench", str(source), str(tmp_path / "o.jsonl"),
                 "after_error=negative"]) == 0
    assert read_rows(tmp_path / "o.jsonl")[0]["labels"] == [1.0, 0.0, 0.0]
    assert main(["data", "convert", "--from", "processbench", str(source), str(tmp_path / "o.jsonl"),
                 "bogus=1"]) == 2
    assert "no option 'bogus'" in capsys.readouterr().err
