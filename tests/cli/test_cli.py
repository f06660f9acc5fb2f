"""The command line: bad input ends with a clear message and a non-zero exit, never a traceback."""

import json
import subprocess
import sys

import pytest

from prmkit.cli import main
from prmkit.errors import PRMError

GOOD = {"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2."], "labels": [1]}


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "prmkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def write_config(tmp_path, model_dir, train_rows, *extra):
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in train_rows) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"model: {{base: {model_dir}}}\ndata: {{train: {data}, max_length: 64}}\n"
                   f"output_dir: {tmp_path / 'runs'}\ntraining: {{max_steps: 1, batch_size: 2}}\n")
    return cfg


@pytest.mark.parametrize("rows, fragment", [
    ([GOOD, '{"prompt": "x", "completions": [', GOOD], "row 2 is not valid JSON"),
    ([GOOD, {**GOOD, "labels": [3]}], "row 2, field 'labels[0]': label 3 is outside [0, 1]"),
    ([{**GOOD, "labels": [1, 0]}], "row 1, field 'labels': has 2 labels for 1 steps"),
    ([{**GOOD, "completions": [""]}], "field 'completions[0]': is an empty step"),
    ([{**GOOD, "prompt": " "}], "field 'prompt': is empty"),
    ([{**GOOD, "labels": ["1"]}], "label '1' is a str"),
])
def test_bad_data_exits_2_with_a_message(tmp_path, tiny_llama, rows, fragment, capsys):
    assert main(["train", str(write_config(tmp_path, tiny_llama, rows))]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "train.jsonl" in err
    assert not (tmp_path / "runs" / "prm").exists() or not any((tmp_path / "runs" / "prm").iterdir())


def test_bad_data_in_a_real_process_has_no_traceback(tmp_path, tiny_llama):
    result = run_cli("train", str(write_config(tmp_path, tiny_llama, [GOOD, {**GOOD, "labels": [float("nan")]}])))
    assert result.returncode == 2
    assert "row 2, field 'labels[0]'" in result.stderr and "Traceback" not in result.stderr


def test_unknown_key_and_missing_model(tmp_path, tiny_llama, capsys):
    cfg = write_config(tmp_path, tiny_llama, [GOOD])
    assert main(["train", str(cfg), "training.lrr=0.1"]) == 2
    assert "did you mean training.lr?" in capsys.readouterr().err
    assert main(["train", str(cfg), f"model.base={tmp_path / 'no-such-model'}"]) == 2
    assert "model.base" in capsys.readouterr().err


def test_debug_lets_the_exception_through(tmp_path, tiny_llama):
    cfg = write_config(tmp_path, tiny_llama, [{**GOOD, "labels": [9]}])
    with pytest.raises(PRMError, match="outside"):
        main(["--debug", "train", str(cfg)])


def test_skip_invalid_trains_on_the_valid_rows(tmp_path, tiny_llama):
    cfg = write_config(tmp_path, tiny_llama, [GOOD, {**GOOD, "labels": [9]}, GOOD, GOOD])
    assert main(["train", str(cfg), "data.skip_invalid=true"]) == 0
    summary = json.loads((tmp_path / "runs" / "prm" / "summary.json").read_text())
    assert summary["rows_skipped_invalid"] == 1 and summary["train_rows"] == 3


def test_too_long_rows_are_reported_not_trained(tmp_path, tiny_llama, capsys):
    long_row = {**GOOD, "completions": ["1 + 1 = 2. " * 40]}
    cfg = write_config(tmp_path, tiny_llama, [long_row])
    assert main(["train", str(cfg)]) == 2
    assert "first step longer than max_length" in capsys.readouterr().err


def test_existing_run_is_kept(tmp_path, tiny_llama, capsys):
    cfg = write_config(tmp_path, tiny_llama, [GOOD, GOOD])
    assert main(["train", str(cfg)]) == 0
    weights = (tmp_path / "runs" / "prm" / "adapter_model.safetensors").read_bytes()
    assert main(["train", str(cfg)]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (tmp_path / "runs" / "prm" / "adapter_model.safetensors").read_bytes() == weights
    assert main(["train", str(cfg), "--overwrite"]) == 0


def test_config_command_prints_resolved_yaml(capsys):
    assert main(["config", "training.lr=0.5"]) == 0
    assert "lr: 0.5" in capsys.readouterr().out


def test_help_lists_every_command_without_loading_torch():
    """`prmkit --help` (and every subcommand's --help) is answered before torch or transformers is imported:
    those take seconds to load, and a user asking for help should not wait for them."""
    code = ("import sys\nfrom prmkit.cli import build_parser\nparser = build_parser()\n"
            "names = sorted(parser._subparsers._group_actions[0].choices)\n"
            "print(' '.join(names)); print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    commands, heavy = result.stdout.splitlines()
    assert {"train", "config", "export", "demo", "data", "score", "eval"} <= set(commands.split())
    assert heavy == "[]"
    assert run_cli("--help").returncode == 0
