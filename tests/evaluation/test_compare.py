"""`prmkit eval A B DATA`: several PRMs on the same data in one table and one report, each PRM's numbers those of
evaluating it alone."""

from __future__ import annotations

import json

import pytest
from public_prms import build_causal_prm, build_qwen_prm

from prmkit.evaluation.compare import prm_names, split_models


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return build_qwen_prm(tmp_path_factory.mktemp("qwen-prm"))


@pytest.fixture(scope="module")
def shepherd(tmp_path_factory):
    return build_causal_prm(tmp_path_factory.mktemp("math-shepherd"), "math-shepherd")


CHAINS = [
    ("Tom has 3 apples and buys 12 more. How many apples?", ["3 + 12 = 15.", "He has 15 apples.", "The answer is 15."]),
    ("She sells 4 boxes of 6 pens. How many pens?", ["4 * 6 = 24 pens.", "The answer is 24."]),
]


def test_the_leading_model_folders_are_the_prms_and_the_rest_is_data(qwen, tiny_run, tmp_path):
    data = tmp_path / "chains.jsonl"
    data.write_text("")
    assert split_models([str(qwen[0]), str(tiny_run), str(data), "owner/dataset"]) == (
        [str(qwen[0]), str(tiny_run)], [str(data), "owner/dataset"])
    assert split_models([str(data), str(data)]) == ([str(data)], [str(data)])  # one RUN, as before: its error
    assert prm_names(["a/prm", "b/prm", "c/other"]) == ["prm", "prm-2", "other"]


def test_prmkit_eval_puts_several_prms_side_by_side_each_as_evaluated_alone(tiny_run, qwen, shepherd, tmp_path,
                                                                          capsys):
    from prmkit.cli import main
    from prmkit.evaluation.evaluate import evaluate
    from prmkit.files import write_jsonl
    from prmkit.scoring.options import ScoringOptions

    rows = [{"prompt": p, "completions": s, "labels": [1] * (len(s) - 1) + [0]} for p, s in CHAINS]
    write_jsonl(rows, tmp_path / "chains.jsonl")
    out = tmp_path / "side-by-side"
    assert main(["eval", str(tiny_run), str(qwen[0]), str(shepherd[0]), str(tmp_path / "chains.jsonl"), "--device",
                 "cpu", "--out", str(out)]) == 0  # a prmkit run beside a Qwen-format and a Math-Shepherd-format PRM
    printed = capsys.readouterr().out
    names = [tiny_run.name, qwen[0].name, shepherd[0].name]  # the folder names (pytest numbers the tmp folders)
    assert "PRMs side by side" in printed and all(name in printed for name in names)
    comparison = json.loads((out / "comparison.json").read_text())
    assert [(r["split"], r["prm"]) for r in comparison["rows"]] == [("chains", name) for name in names]
    html = (out / "comparison.html").read_text()
    assert f'href="{names[1]}/report.html"' in html and (out / names[1] / "report.html").is_file()
    for row, folder in zip(comparison["rows"], (tiny_run, qwen[0], shepherd[0])):
        alone = evaluate(folder, [tmp_path / "chains.jsonl"], scoring=ScoringOptions(device="cpu"),
                         progress=lambda _: None).splits["chains"]
        per_prm = json.loads((out / row["prm"] / "metrics.json").read_text())["splits"]["chains"]
        assert per_prm["step"] == alone["step"] and row["AUROC"] == alone["step"]["auroc"]
        assert row["ProcessBench F1"] == alone["processbench"]["f1"]
    assert main(["eval", str(qwen[0]), str(shepherd[0]), "--device", "cpu"]) == 2  # no data after the PRMs
    assert "no data file after the PRM folders" in capsys.readouterr().err
