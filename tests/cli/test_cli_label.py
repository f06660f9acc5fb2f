"""`prmkit label` on the command line: flags become options, bad input stops before any model is loaded."""

from __future__ import annotations

from prmkit.cli import build_parser, main
from prmkit.cli.label import label_options, unescape
from prmkit.files import write_jsonl


def test_flags_become_label_options():
    args = build_parser().parse_args(["label", "in.jsonl", "out.jsonl", "--policy", "smollm2-135m", "--method",
                                      "omega", "--k", "3", "--after-error", "null", "--delimiter", "\\n---\\n",
                                      "--solutions", "2", "--gold-field", "final"])
    options = label_options(args)
    assert (options.method, options.k, options.after_error, options.solutions) == ("omega", 3, "null", 2)
    assert options.delimiter == "\n---\n" and options.gold_field == "final"
    assert options.label_kind == "hard"


def test_unescape():
    assert unescape("\\n\\n") == "\n\n"
    assert unescape("a\\\\nb\\t") == "a\\nb\t"


def test_bad_input_is_reported_before_a_model_loads(tmp_path, capsys):
    data = tmp_path / "problems.jsonl"
    write_jsonl([{"question": "What is 2 + 2?", "answer": "#### 4", "completions": ["2 + 2 = 4"]},
                 {"question": "What is 3 + 3?", "completions": ["3 + 3 = 6"]}], data)
    code = main(["label", str(data), str(tmp_path / "out.jsonl"), "--policy", str(tmp_path / "no-model")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{data}: 1 of 2 rows cannot be labelled" in err
    assert "row 2, field 'gold_answer/answer': missing" in err and "--gold-field" in err


def test_option_conflicts_exit_with_a_message(tmp_path, capsys):
    code = main(["label", "in.jsonl", "out.jsonl", "--policy", "x", "--method", "omega", "--label", "soft"])
    assert code == 2
    assert "label=soft needs method=mc" in capsys.readouterr().err


def test_a_missing_input_file(tmp_path, capsys):
    code = main(["label", str(tmp_path / "nope.jsonl"), str(tmp_path / "out.jsonl"), "--policy", "x"])
    assert code == 2
    assert "no such file" in capsys.readouterr().err
