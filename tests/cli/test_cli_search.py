"""`prmkit search` flags: each one lands in its option, escapes in --delimiter are read, and bad input stops the
command with a message before any model is loaded."""

from __future__ import annotations

from prmkit.cli import build_parser, main
from prmkit.cli.search import search_options, unescape
from prmkit.files import write_jsonl


def test_flags_are_the_option_fields():
    args = build_parser().parse_args([
        "search", "run", "data.jsonl", "out.jsonl", "--policy", "m", "--method", "dvts", "--n", "8",
        "--beam-width", "2", "--temperature", "0.6", "--max-new-tokens", "99", "--delimiter", "\\nStep",
        "--aggregate", "min", "--max-rounds", "7", "--seed", "3", "--problems-per-batch", "5", "--limit", "9",
        "--problem-field", "q", "--gold-field", "a", "--overwrite"])
    options = search_options(args)
    assert (options.method, options.n, options.beam_width, options.temperature, options.max_new_tokens) == (
        "dvts", 8, 2, 0.6, 99)
    assert (options.delimiter, options.aggregate, options.max_rounds, options.seed) == ("\nStep", "min", 7, 3)
    assert (options.problems_per_batch, options.limit, options.problem_field, options.gold_field) == (5, 9, "q", "a")
    assert options.overwrite and options.budgets is None
    budgets = search_options(build_parser().parse_args([
        "search", "r", "d.jsonl", "o.jsonl", "--policy", "m", "--budgets", "8,1,2", "--budget-methods",
        "greedy,best-of-n"]))
    assert budgets.budgets == (1, 2, 8) and budgets.budget_methods == ("greedy", "best-of-n")


def test_delimiter_escapes():
    assert unescape("\\n\\n") == "\n\n" and unescape("a\\tb") == "a\tb" and unescape("\\\\n") == "\\n"
    assert unescape("plain") == "plain"


def test_bad_rows_and_outputs_stop_before_any_model_loads(tmp_path, capsys):
    data = tmp_path / "p.jsonl"
    write_jsonl([{"prompt": "ok"}, {"problem_text": "?"}], data)
    assert main(["search", "no-such-run", str(data), str(tmp_path / "o.jsonl"), "--policy", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "row 2, field 'prompt/problem/question': missing" in err
    write_jsonl([{"prompt": "ok"}], data)
    assert main(["search", "no-such-run", str(data), str(tmp_path / "o.csv"), "--policy", "m"]) == 2
    assert "give a .jsonl path" in capsys.readouterr().err
    assert main(["search", "r", str(data), str(tmp_path / "o.jsonl"), "--policy", "m", "--method", "beam",
                 "--n", "3"]) == 2
    assert "n=3 is not a multiple of beam_width=4" in capsys.readouterr().err
