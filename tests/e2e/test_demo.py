"""The demo end to end on a tiny model (small flags): the printed numbers are the ones in the report files."""

import json

import pytest

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.demo import DemoOptions, demo_config, position_baseline, run_demo
from prmkit.evaluation.evaluate import evaluate
from prmkit.evaluation.options import EvalOptions
from prmkit.scoring.options import ScoringOptions


def test_tiny_demo_writes_report_loss_plot_and_results(tmp_path, tiny_llama):
    out = tmp_path / "demo"
    results = run_demo(DemoOptions(out=out, base=str(tiny_llama), rows=24, val_rows=8, steps=3, batch_size=4,
                                   top_layers=1, num_layers=1))
    for name in ("report.html", "loss.png", "results.json", "data/train.jsonl", "data/held_out.jsonl",
                 "prm/prmkit.json"):
        assert (out / name).is_file(), name
    saved = json.loads((out / "results.json").read_text())
    assert saved == json.loads(json.dumps(results))
    assert saved["optimizer_steps"] == 3 and saved["held_out_rows"] == 8
    # the demo's held-out numbers are what `prmkit eval` measures on the same file with the saved model
    evaluated = evaluate(out / "prm", [out / "data" / "held_out.jsonl"], EvalOptions(out=tmp_path / "eval"),
                         ScoringOptions(device="cpu"), progress=lambda *_: None).splits["held_out"]["step"]
    for key in ("auroc", "accuracy", "n_steps"):
        assert saved["after"][key] == pytest.approx(evaluated[key], abs=1e-6), key
    assert saved["before"]["n_steps"] == saved["after"]["n_steps"]
    # and the config it trained with was built as values: the recipe flags are in the run's config.yaml
    config = load_config(out / "prm" / "config.yaml")
    assert (config.model.num_layers, config.lora.top_layers, config.training.max_steps) == (1, 1, 3)
    html = (out / "report.html").read_text()
    held_out = [json.loads(line) for line in (out / "data" / "held_out.jsonl").read_text().splitlines()]
    assert all(row["completions"][0].split(" ")[0] in html for row in held_out)
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_position_baseline_sees_only_step_order():
    rows = generate_records(200, seed=4)
    # labels that depend on position only are perfectly predicted by it
    by_position = [{**r, "labels": [1.0 if i < 2 else 0.0 for i in range(len(r["labels"]))]} for r in rows]
    assert position_baseline(by_position)["auroc"] > 0.95
    # and the real labels are predicted only in part: a PRM must beat this number, not 0.5
    assert 0.55 < position_baseline(rows)["auroc"] < 0.9


def test_demo_config_keeps_paths_that_yaml_would_cut(tmp_path):
    """A folder name with ' #' would end a YAML value at the '#'; the demo builds its config as values."""
    out = tmp_path / "my runs #1"
    config = demo_config(DemoOptions(out=out))
    assert config.output_dir == str(out) and config.data.train == str(out / "data" / "train.jsonl")
