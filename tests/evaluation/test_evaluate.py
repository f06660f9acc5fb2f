"""`prmkit eval` end to end on a tiny run: metrics.json, report.html and PNGs; ProcessBench threshold transfer;
best-of-N grouping; raw ProcessBench files; the shared real data when present."""

import json
from pathlib import Path

import pytest

from prmkit.cli import main
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.evaluation.evaluate import evaluate, evenly_spaced
from prmkit.evaluation.options import EvalOptions
from prmkit.evaluation.processbench import evaluate_threshold
from prmkit.files import write_jsonl
from prmkit.scoring.options import ScoringOptions

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CPU = ScoringOptions(device="cpu")


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def run(tiny_run):
    return tiny_run


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval-data")
    write_jsonl(generate_records(10, seed=21), folder / "a.jsonl")
    write_jsonl(generate_records(8, seed=22), folder / "b.jsonl")
    # three candidates per problem with known correctness and answers, as a candidates row and as records
    write_jsonl([{"prompt": "What is 2 + 2?", "candidates": ["2 + 2 = 4.", ["2 + 2 = 5.", "So 5."], "4"],
                  "correct": [True, False, True], "answers": ["4", "5", "4"]},
                 {"prompt": "What is 3 + 3?", "candidates": [["3 + 3 = 6."], ["3 + 3 = 7."]],
                  "correct": [True, False]}], folder / "cands.jsonl")
    write_jsonl([{"prompt": "What is 5 - 1?", "completions": [c], "correct": ok, "answer": a}
                 for c, ok, a in (("5 - 1 = 4.", True, "4"), ("5 - 1 = 3.", False, "3"), ("It is 4.", True, "4"))]
                + [{"prompt": "Lonely?", "completions": ["Yes."], "correct": True}], folder / "grouped.jsonl")
    # raw ProcessBench layout, converted on the fly
    (folder / "pb.json").write_text(json.dumps([
        {"id": "pb-0", "problem": "What is 2 + 3?", "steps": ["2 + 3 = 6.", "So 6."], "label": 0,
         "final_answer_correct": False},
        {"id": "pb-1", "problem": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "So 5."], "label": -1,
         "final_answer_correct": True}]))
    return folder


def test_cli_eval_writes_metrics_report_and_plots(run, data, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", str(run), str(data / "a.jsonl"), str(data / "cands.jsonl"), "--out", str(out),
                 "--device", "cpu", "--threshold", "0.6"]) == 0
    printed = capsys.readouterr().out
    assert "ProcessBench" in printed and "best-of-N" in printed and "metrics.json" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["threshold"] == {"value": 0.6, "source": "--threshold"}
    a = metrics["splits"]["a"]
    assert a["rows"] == 10 and a["step"]["n_steps"] > 0
    assert {"auroc", "accuracy", "precision", "recall", "f1", "mse", "ece"} <= set(a["step"])
    assert {"f1", "error_accuracy", "correct_accuracy", "oracle_f1"} <= set(a["processbench"])
    assert metrics["processbench_average_f1"] == a["processbench"]["f1"]
    bon = metrics["splits"]["cands"]["best_of_n"]
    assert bon["n_problems"] == 2 and bon["random"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    # the second row has no answers: its candidates vote for nothing, so its vote is a random pick (1/2)
    assert bon["majority_vote"] == pytest.approx((1 + 1 / 2) / 2) and "note" not in bon
    assert set(bon["prm"]) == {"min", "max", "mean", "last", "prod", "geometric_mean"}
    for name in ("roc.png", "calibration.png", "training_loss.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC), name
    page = (out / "report.html").read_text()
    assert page.count('<section class="chain">') == 10 + 5 and "candidate 1" in page


def test_threshold_calibrated_on_one_split_is_applied_to_all(run, data, tmp_path):
    metrics = evaluate(run, [data / "a.jsonl", data / "b.jsonl"],
                       EvalOptions(calibrate_on=data / "a.jsonl", out=tmp_path / "cal"), CPU, progress=quiet).to_dict()
    threshold = metrics["threshold"]
    assert threshold["source"].startswith("calibrated on") and "a.jsonl" in threshold["source"]
    a, b = (metrics["splits"][n]["processbench"] for n in ("a", "b"))
    assert a["threshold"] == b["threshold"] == threshold["value"]
    assert a["f1"] == pytest.approx(threshold["calibration_f1"]) and a["f1"] == pytest.approx(a["oracle_f1"])
    assert metrics["processbench_average_f1"] == pytest.approx((a["f1"] + b["f1"]) / 2)
    # the default output folder sits in the run folder, named after the data
    default = evaluate(run, [data / "b.jsonl"], scoring=CPU, progress=quiet)
    assert default.out == run / "eval" / "b" and (run / "eval" / "b" / "metrics.json").is_file()


def test_best_of_n_groups_records_by_prompt_and_raw_processbench(run, data, tmp_path):
    metrics = evaluate(run, [data / "grouped.jsonl", data / "pb.json"], EvalOptions(out=tmp_path / "g"), CPU,
                       progress=quiet).to_dict()
    grouped = metrics["splits"]["grouped"]["best_of_n"]
    assert grouped["n_problems"] == 1 and grouped["mean_candidates"] == 3  # the lonely problem is left out
    assert grouped["random"] == pytest.approx(2 / 3) and grouped["majority_vote"] == 1.0
    pb = metrics["splits"]["pb"]
    assert pb["processbench"]["n_error"] == 1 and pb["processbench"]["n_correct"] == 1
    assert pb["best_of_n"]["n_problems"] == 1  # both pb rows share a problem and carry final_answer_correct


def test_user_errors(run, data, tmp_path):
    with pytest.raises(PRMError, match="both --threshold and --calibrate-on"):
        EvalOptions(threshold=0.5, calibrate_on=data / "a.jsonl", out=tmp_path)
    with pytest.raises(PRMError, match="no row has 'first_error'"):
        evaluate(run, [data / "a.jsonl"], EvalOptions(calibrate_on=data / "cands.jsonl", out=tmp_path), CPU,
                 progress=quiet)
    with pytest.raises(PRMError, match="no data file"):
        evaluate(run, [], EvalOptions(out=tmp_path))


def test_limit_takes_rows_evenly_spaced():
    assert evenly_spaced(list(range(10)), 4) == [0, 2, 5, 7]
    assert evenly_spaced(list(range(3)), 5) == [0, 1, 2] and evenly_spaced([1, 2], None) == [1, 2]
    with pytest.raises(PRMError, match="limit=0"):
        evenly_spaced([1, 2], 0)


@pytest.mark.skipif(not (SHARED_DATA / "processbench" / "gsm8k.json").is_file(),
                    reason=f"real ProcessBench data not found in {SHARED_DATA / 'processbench'}")
def test_real_processbench_rows(run, tmp_path):
    metrics = evaluate(run, [SHARED_DATA / "processbench" / "gsm8k.json"], EvalOptions(limit=6, out=tmp_path), CPU,
                       progress=quiet).to_dict()
    result = metrics["splits"]["gsm8k"]["processbench"]
    assert result["n_error"] + result["n_correct"] == 6 and result["n_error"] and result["n_correct"]
    assert set(evaluate_threshold([[0.0]], [0], 0.5)) <= set(result)  # the keys of the pure function


def rated_run(run, tmp_path, scheme: str) -> Path:
    """A copy of the tiny run whose metadata says its training data was read with `scheme`."""
    import shutil

    copy = tmp_path / f"run-{scheme}"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("eval", "checkpoint-*"))
    metadata = json.loads((copy / "prmkit.json").read_text())
    (copy / "prmkit.json").write_text(json.dumps({**metadata, "label_scheme": scheme}))
    return copy


def test_labels_are_read_with_the_runs_label_scheme(run, tmp_path):
    write_jsonl([{"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 4.", "So 4."], "labels": [1, 0]}],
                tmp_path / "no-minus-one.jsonl")
    notes, rated = [], rated_run(run, tmp_path, "ternary")
    split = evaluate(rated, [tmp_path / "no-minus-one.jsonl"],
                     EvalOptions(out=tmp_path / "t"), CPU, progress=notes.append).splits["no-minus-one"]
    # trained on ratings: the 0 is neutral (positive), so the chain has no first error; detected per file it was
    # binary and the 0 a wrong step
    assert split["label_scheme"] == "ternary" and split["processbench"]["n_correct"] == 1
    assert split["step"]["positive_rate"] == 1.0
    assert any("--label-scheme binary" in note for note in notes)
    given = evaluate(rated, [tmp_path / "no-minus-one.jsonl"],
                     EvalOptions(out=tmp_path / "b", label_scheme="binary"), CPU, progress=quiet)
    assert given.splits["no-minus-one"]["processbench"]["n_error"] == 1


def test_a_rating_under_a_binary_run_names_the_flag(run, tmp_path):
    write_jsonl([{"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 4.", "So 5."], "labels": [0, -1]}],
                tmp_path / "rated.jsonl")
    assert json.loads((run / "prmkit.json").read_text())["label_scheme"] == "binary"
    with pytest.raises(PRMError, match=r"row 1, field 'labels': label -1 is a -1/0/\+1 rating.*--label-scheme"):
        evaluate(run, [tmp_path / "rated.jsonl"], EvalOptions(out=tmp_path / "x"), CPU, progress=quiet)
    metrics = evaluate(run, [tmp_path / "rated.jsonl"], EvalOptions(out=tmp_path / "y", label_scheme="ternary"),
                       CPU, progress=quiet).splits["rated"]
    assert metrics["label_scheme"] == "ternary" and metrics["step"]["positive_rate"] == 0.5


def test_majority_vote_counts_spellings_of_one_answer_together(run, tmp_path):
    write_jsonl([{"prompt": "What is 10 * 100?", "candidates": ["1000.", "1,000.", "999.", "999.", "1000.0."],
                  "correct": [True, True, False, False, True], "answers": [1000, "1,000", "999", "999", 1000.0]}],
                tmp_path / "spellings.jsonl")
    metrics = evaluate(run, [tmp_path / "spellings.jsonl"], EvalOptions(out=tmp_path / "s"), CPU, progress=quiet)
    assert metrics.splits["spellings"]["best_of_n"]["majority_vote"] == 1.0


def test_steps_past_max_length_are_shown_warned_and_left_out_of_f1_seen(run, data, tmp_path, capsys):
    long_chain = {"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 5, as we check by counting on."] * 6,
                  "labels": [1] * 5 + [0]}  # its first error is the last step, which max_length cuts
    write_jsonl([long_chain, {**long_chain, "completions": ["2 + 3 = 6."], "labels": [0]}], tmp_path / "long.jsonl")
    out = tmp_path / "eval"
    assert main(["eval", str(run), str(tmp_path / "long.jsonl"), "--out", str(out), "--device", "cpu",
                 "--max-length", "48"]) == 0
    printed = capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    split = metrics["splits"]["long"]
    assert split["steps"] == 7 and split["steps_unscored"] >= 1 and split["unscored_share"] >= 0.1
    pb = split["processbench"]
    assert pb["n_error"] == 2 and pb["scored"]["n_error"] == 1 and pb["scored"]["chains_left_out"] == 1
    [warning] = metrics["warnings"]
    assert "long: " in warning and "past max_length 48" in warning and "--max-length " in warning
    assert f"{split['steps_unscored']}/7)" in printed  # the share beside the split's numbers
    assert "warning: long:" in printed and "F1 seen" in printed


def test_raw_benchmark_rows_the_conversion_skips_are_counted_and_printed(run, tmp_path):
    row = {"idx": 3, "classification": "circular", "modified_question": "What is 2 + 3?",
           "modified_process": ["2 + 3 = 5.", "So 6."], "error_steps": [2], "original_process": []}
    write_jsonl([row, {**row, "modified_question": "Again?"}, {**row, "idx": 4, "error_steps": [9]},
                 {**row, "idx": 5}], tmp_path / "bench.jsonl")
    printed = []
    metrics = evaluate(run, [tmp_path / "bench.jsonl"], EvalOptions(out=tmp_path / "e"), CPU,
                       progress=printed.append).splits["bench"]
    assert metrics["rows"] == 2 and metrics["prmbench"]["overall"]["chains"] == 2
    assert metrics["conversion"]["rows_read"] == 4 and metrics["conversion"]["rows_skipped"] == 2
    assert set(metrics["conversion"]["skipped"]) == {"repeated (classification, idx): the first row is kept",
                                                     "error_steps number outside 1..len(modified_process)"}
    assert any("2 of 4 raw prmbench rows were skipped" in line for line in printed)


@pytest.mark.skipif(not (SHARED_DATA / "processbench" / "math.json").is_file(),
                    reason=f"real ProcessBench data not found in {SHARED_DATA / 'processbench'}")
def test_real_processbench_chains_cut_by_max_length_are_warned_about(run, tmp_path):
    result = evaluate(run, [SHARED_DATA / "processbench" / "math.json"], EvalOptions(limit=6, out=tmp_path),
                      ScoringOptions(device="cpu", max_length=128), progress=quiet)
    split = result.splits["math"]
    assert split["unscored_share"] > 0.1 and split["conversion"]["rows_read"] == 6
    assert result.warnings and "--max-length" in result.warnings[0]
    seen = split["processbench"]["scored"]
    assert seen["n_error"] + seen["n_correct"] + seen["chains_left_out"] == 6 and seen["chains_left_out"] > 0
