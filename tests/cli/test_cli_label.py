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


def test_label_samples_without_logprobs_and_continues_a_file_written_with_them(tiny_llama, tmp_path, request):
    """A label never reads a sample's log-prob, so `prmkit label` samples with logprobs off (no extra forward), and
    they are not among the settings a resumed output must match: a file written with them (as every label output
    was before the option) is continued to the bytes an unbroken run writes, since the samples are the same."""
    from prmkit.cli.common import generation_options
    from prmkit.data.synthetic import generate_records
    from prmkit.generation import load_generator
    from prmkit.labeling.runner import label_file

    data, out = tmp_path / "problems.jsonl", tmp_path / "labels.jsonl"
    write_jsonl(generate_records(2, seed=7), data)
    argv = ["label", str(data), str(out), "--policy", str(tiny_llama), "--k", "2", "--max-new-tokens", "6",
            "--problems-per-batch", "1", "--generation-batch-size", "4", "--system-prompt", "", "--temperature",
            "1.0", "--device", "cpu", "--checker-workers", "1"]
    args = build_parser().parse_args(argv)
    assert generation_options(args).logprobs is False
    before = load_generator(str(tiny_llama), generation_options(args).replace(logprobs=True))
    assert label_file(before, data, out, label_options(args)).rollouts > 0
    whole = out.read_bytes()
    out.write_bytes(whole.split(b"\n")[0] + b"\n")  # the second problem's record is still to come

    drawn = request.getfixturevalue("samples_drawn_without_logprobs")  # from here on
    assert main(argv) == 0
    assert drawn and all(s.logprob is None for s in drawn)
    assert out.read_bytes() == whole
