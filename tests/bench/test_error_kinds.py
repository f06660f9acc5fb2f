"""bench/error_kinds.py: the exact judge's first wrong step sorted by kind (false arithmetic, a true equation the
solution does not need or cannot have, a wrong number stated, none), and each scorer's within-problem AUROC on the
pairs of a right sample with a wrong sample of each kind."""

import json

import pytest

import error_kinds

PROMPT = "Ethan buys 8 bags of apples with 7 in each bag. He gives 2 apples away. How many apples are left?"
GOLD = ["He has 8 * 7 = 56 apples.", "He has 56 - 2 = 54 apples left. The answer is \\boxed{54}."]
RIGHT = GOLD
SLIP = ["He has 8 * 7 = 56 apples.", "He has 56 - 2 = 53 apples left. The answer is \\boxed{53}."]
PLAN = ["He has 8 + 7 = 15 apples.", "He has 15 - 2 = 13 apples left. The answer is \\boxed{13}."]
STATED = ["He has 8 * 7 = 56 apples, so 65 in all.", "He has 65 - 2 = 63 apples left. The answer is \\boxed{63}."]
CUT = ["He has 8 * 7 = 56 apples."]


def kind(steps):
    return error_kinds.first_error_kind(PROMPT, steps, [56, 54], "54")


def test_first_wrong_steps_are_sorted_by_kind():
    assert kind(SLIP) == ("slip", 1)
    assert kind(PLAN) == ("plan", 0)
    assert kind(STATED) == ("stated", 0)
    assert kind(CUT) == ("none", -1)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_each_scorer_is_read_on_the_pairs_of_each_kind(tmp_path):
    samples = [(RIGHT, True), (SLIP, False), (PLAN, False), (RIGHT, True)]
    write(tmp_path / "prm-eval.jsonl", [{"prompt": PROMPT, "completions": s, "correct": c} for s, c in samples])
    write(tmp_path / "problems.jsonl", [{"id": 0, "prompt": PROMPT, "gold_answer": "54", "gold_steps": GOLD}])
    # the PRM ranks the slip above one right sample and the plan error below both
    write(tmp_path / "scores.jsonl", [{"prompt": PROMPT, "scores": [0.9, s]} for s in (0.5, 0.7, 0.1, 0.8)])
    write(tmp_path / "confidence-scores.jsonl",
          [{"id": 0, "confidences": [{"mean": v} for v in (-0.1, -0.9, -0.05, -0.2)]}])
    result = error_kinds.main(["--work", str(tmp_path), "--prm-scores", f"prm={tmp_path / 'scores.jsonl'}",
                               "--out", str(tmp_path / "out.json")])
    assert result["kinds"]["slip"]["wrong_samples"] == 1 and result["kinds"]["plan"]["wrong_samples"] == 1
    prm, confidence = result["within_problem_auroc"]["prm"], result["within_problem_auroc"][
        "policy confidence (mean log-prob)"]
    assert prm["slip"]["auroc"] == pytest.approx(0.5) and prm["plan"]["auroc"] == pytest.approx(1.0)
    assert prm["all"]["auroc"] == pytest.approx(0.75) and prm["all"]["pairs"] == 4
    assert confidence["slip"]["auroc"] == pytest.approx(1.0) and confidence["plan"]["auroc"] == pytest.approx(0.0)
    assert prm["stated"]["auroc"] is None  # no pair of that kind


def test_scores_of_another_file_are_refused(tmp_path):
    write(tmp_path / "prm-eval.jsonl", [{"prompt": PROMPT, "completions": RIGHT, "correct": True}])
    write(tmp_path / "problems.jsonl", [{"id": 0, "prompt": PROMPT, "gold_answer": "54", "gold_steps": GOLD}])
    write(tmp_path / "scores.jsonl", [{"prompt": "another problem", "scores": [0.9]}])
    with pytest.raises(SystemExit, match="not those of"):
        error_kinds.main(["--work", str(tmp_path), "--prm-scores", str(tmp_path / "scores.jsonl"),
                          "--out", str(tmp_path / "out.json")])
