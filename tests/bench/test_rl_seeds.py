"""bench/rl_seeds.py on hand-made judged files: each problem's accuracy averaged over the seeds, paired against the
starting policy and the control; a run not read for every seed is reported unread and never pooled; a file judged on
other problems stops the summary."""

import json

import pytest

import rl_seeds

PROMPTS = ["p1", "p2", "p3", "p4"]


def write(path, correct, prompts=PROMPTS):
    path.write_text("".join(json.dumps({"prompt": p, "correct": bool(c)}) + "\n" for p, c in zip(prompts, correct)))


@pytest.fixture
def work(tmp_path):
    write(tmp_path / "validation-before.jsonl", [0, 0, 1, 0])
    write(tmp_path / "validation-lr-1e-05-step-16.jsonl", [1, 0, 1, 0])          # control, seed 0
    write(tmp_path / "validation-lr-1e-05-seed-1-step-16.jsonl", [1, 1, 1, 0])   # control, seed 1
    write(tmp_path / "validation-lr-1e-05-sum-step-16.jsonl", [0, 0, 1, 1])
    write(tmp_path / "validation-lr-1e-05-sum-seed-1-step-16.jsonl", [1, 0, 0, 1])
    write(tmp_path / "held-out-before.jsonl", [0, 1, 0, 0])
    write(tmp_path / "held-out-lr-1e-05-step-16.jsonl", [1, 1, 0, 0])
    write(tmp_path / "held-out-lr-1e-05-seed-1-step-16.jsonl", [1, 1, 1, 0])
    write(tmp_path / "held-out-lr-1e-05-sum-step-16.jsonl", [0, 1, 1, 1])        # sum read on held out for seed 0 only
    return tmp_path


def test_each_problem_is_averaged_over_the_seeds_and_paired_with_the_start_and_the_control(work, tmp_path):
    result = rl_seeds.main(["--work", str(work), "--runs", "lr-1e-05,lr-1e-05-sum", "--seeds", "0,1",
                            "--out", str(tmp_path / "out.json")])
    validation = result["splits"]["validation"]
    control, process = validation["runs"]["lr-1e-05"], validation["runs"]["lr-1e-05-sum"]
    assert control["seeds"]["0"]["after"]["accuracy"] == pytest.approx(0.5)
    assert control["seeds"]["1"]["after"]["accuracy"] == pytest.approx(0.75)
    # per problem over seeds: control [1, .5, 1, 0], sum [.5, 0, .5, 1], before [0, 0, 1, 0]
    assert control["over seeds"]["after"]["accuracy"] == pytest.approx(2.5 / 4)
    assert control["over seeds"]["after - before"]["difference"] == pytest.approx((1 + .5 + 0 + 0) / 4)
    assert "after - control" not in control["over seeds"]
    assert process["over seeds"]["after - control"]["difference"] == pytest.approx((-.5 - .5 - .5 + 1) / 4)
    low, high = (process["over seeds"]["after - control"][k] for k in ("low", "high"))
    assert low <= -0.125 <= high
    assert json.loads((tmp_path / "out.json").read_text())["splits"]["validation"]["before"]["accuracy"] == 0.25


def test_a_run_not_read_for_every_seed_is_reported_unread_and_not_pooled(work, tmp_path):
    result = rl_seeds.main(["--work", str(work), "--runs", "lr-1e-05,lr-1e-05-sum", "--seeds", "0,1",
                            "--out", str(tmp_path / "out.json")])
    held_out = result["splits"]["held-out"]["runs"]
    assert held_out["lr-1e-05"]["over seeds"]["after - before"]["difference"] == pytest.approx((1 + 0 + .5) / 4)
    assert held_out["lr-1e-05-sum"]["unread_seeds"] == [1]
    assert "over seeds" not in held_out["lr-1e-05-sum"]
    assert held_out["lr-1e-05-sum"]["seeds"]["0"]["after"]["accuracy"] == pytest.approx(0.75)


def test_a_file_judged_on_other_problems_stops_the_summary(work, tmp_path):
    write(work / "validation-lr-1e-05-seed-1-step-16.jsonl", [1, 1, 1, 0], prompts=["p1", "p2", "p4", "p3"])
    with pytest.raises(SystemExit, match="other problems"):
        rl_seeds.main(["--work", str(work), "--runs", "lr-1e-05", "--seeds", "0,1", "--out", str(tmp_path / "o.json")])


def test_a_folder_without_judged_files_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="rl_control.py"):
        rl_seeds.main(["--work", str(tmp_path), "--runs", "lr-1e-05", "--out", str(tmp_path / "o.json")])
