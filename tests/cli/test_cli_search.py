"""`prmkit search` flags: each one lands in its option (selection settings also from a `search-tune` file), escapes
in --delimiter are read, and bad input stops the command with a message before any model is loaded."""

from __future__ import annotations

import json

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


def search_args(*flags: str):
    return build_parser().parse_args(["search", "r", "d.jsonl", "o.jsonl", "--policy", "m", *flags])


def test_selection_flags_and_a_tuned_settings_file(tmp_path):
    options = search_options(search_args("--method", "softmax-weighted", "--vote-temperature", "inf",
                                         "--keep-fraction", "0.25", "--mob-fraction", "0.75", "--mob-resamples", "9"))
    assert (options.vote_temperature, options.keep_fraction, options.mob_fraction, options.mob_resamples) == (
        float("inf"), 0.25, 0.75, 9)
    assert options.selection("softmax-weighted") == {"vote_temperature": float("inf")}
    assert search_options(search_args()).selection("filtered-majority") == {"keep_fraction": 0.5}
    tuned = tmp_path / "tuned.json"
    tuned.write_text(json.dumps({"settings": {"vote_temperature": 0.3, "keep_fraction": 0.75}}))
    from_file = search_options(search_args("--select-settings", str(tuned), "--mob-resamples", "50"))
    assert (from_file.vote_temperature, from_file.keep_fraction, from_file.mob_resamples) == (0.3, 0.75, 50)


def test_a_setting_given_by_flag_and_by_file_is_refused(tmp_path, capsys):
    data = tmp_path / "p.jsonl"
    write_jsonl([{"prompt": "ok"}], data)
    tuned = tmp_path / "tuned.json"
    tuned.write_text(json.dumps({"settings": {"keep_fraction": 0.75}}))
    assert main(["search", "r", str(data), str(tmp_path / "o.jsonl"), "--policy", "m", "--select-settings",
                 str(tuned), "--keep-fraction", "0.5"]) == 2
    assert "--keep-fraction and --select-settings" in capsys.readouterr().err
    assert main(["search", "r", str(data), str(tmp_path / "o.jsonl"), "--policy", "m", "--select-settings",
                 str(tmp_path / "missing.json")]) == 2
    assert "no such file; write it with `prmkit search-tune" in capsys.readouterr().err
    assert main(["search", "r", str(data), str(tmp_path / "o.jsonl"), "--policy", "m", "--keep-fraction", "0"]) == 2
    assert "keep_fraction=0.0; use a share of the samples in (0, 1]" in capsys.readouterr().err


def test_search_tune_needs_a_json_out(tmp_path, capsys):
    assert main(["search-tune", str(tmp_path / "val.jsonl"), "--out", str(tmp_path / "s.yaml")]) == 2
    assert "give a .json path" in capsys.readouterr().err
