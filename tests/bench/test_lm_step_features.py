"""bench/lm_step_features.py: each step's readings of the policy's per-token values, the running lowest the learned
reading is fitted on, and the whole run on a faked work folder with a policy that knows the sums."""

import json
import math
import re

import pytest

import lm_step_features
from lifecycle.onpolicy import DELIMITER

STEPS = ["He has 2 + 3 = 5 apples.", "Then 5 * 4 = 21 in all."]


def words(text: str) -> list[tuple[int, int]]:
    """A tokenizer stand-in: every run of non-spaces is a token, with its character span."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def test_only_the_tokens_of_stated_results_are_marked():
    offsets = words(DELIMITER.join(STEPS))
    marked = [DELIMITER.join(STEPS)[begin:end] for (begin, end), hit in
              zip(offsets, lm_step_features.result_tokens(STEPS, offsets)) if hit]
    assert marked == ["5", "21"]


def test_each_step_reads_its_own_tokens_and_a_step_without_results_reads_zero():
    values = {"logprobs": [-0.1, -0.3, -2.0, -0.2, -0.4], "margins": [0.0, -0.2, -1.5, 0.0, -0.1],
              "step": [0, 0, 0, 1, 1], "result": [False, False, True, False, False]}
    first, second = lm_step_features.step_readings(["a", "b"], values)
    assert first == {"mean": pytest.approx(-0.8), "lowest-token": -2.0, "margin": -1.5,
                     "result-logprob": -2.0, "result-margin": -1.5}
    assert second == {"mean": pytest.approx(-0.3), "lowest-token": -0.4, "margin": -0.1,
                      "result-logprob": 0.0, "result-margin": 0.0}
    running = lm_step_features.running_lowest([first, second])
    assert running[1] == [pytest.approx(-0.8), -2.0, -1.5, -2.0, -1.5]  # the slip in step 1 stays in step 2


def test_a_samples_score_is_its_lowest_step_for_every_model_and_reading():
    def steps(*values):
        return [{name: v for name in lm_step_features.READINGS} for v in values]

    readings = {"policy": steps(-0.1, -2.0), "base": steps(-0.5, -0.2)}
    assert lm_step_features.stacked(readings)[1] == [-2.0] * 5 + [-0.5] * 5  # each model's running lowest
    learned = {"both": (["policy", "base"], lambda features: 1.0 / (1.0 - features[0] - features[5]))}
    scores = lm_step_features.sample_scores(readings, learned)
    assert all(scores[f"policy {name}"] == pytest.approx(math.exp(-2.0)) for name in lm_step_features.READINGS)
    assert all(scores[f"base {name}"] == pytest.approx(math.exp(-0.5)) for name in lm_step_features.READINGS)
    assert scores["both"] == pytest.approx(1 / 3.5)


def test_first_choice_shares_count_steps_that_state_a_result_by_their_equations():
    steps = [["So 2 + 2 = 4.", "So 3 + 3 = 7.", "No sums here."], ["So 1 + 1 = 2."]]
    zero = {name: 0.0 for name in lm_step_features.READINGS}
    readings = [[zero, zero, zero], [{**zero, "result-margin": -1.0}]]
    shares = lm_step_features.first_choice_shares(steps, readings)
    assert shares["right"] == {"steps": 2, "first_choice_share": 0.5}
    assert shares["slip"] == {"steps": 1, "first_choice_share": 1.0}
    # the slip reads 0, the right steps 0 and -1: one pair tied, one the wrong way
    assert shares["slip_auroc"]["result-margin"] == 0.25


def arithmetic_values(rows):
    """A policy that knows the sums: sure of every token except a stated result that is wrong."""
    out = []
    for row in rows:
        text = DELIMITER.join(row["steps"])
        offsets = words(text)
        results = lm_step_features.result_tokens(row["steps"], offsets)
        starts, at = [], 0
        for step in row["steps"]:
            starts.append(at)
            at += len(step) + len(DELIMITER)
        step_of = [max(k for k, s in enumerate(starts) if s <= begin) for begin, _ in offsets]
        wrong = set()
        for k, step in enumerate(row["steps"]):
            for a, op, b, c in re.findall(r"(\d+) ([-+*]) (\d+) = (\d+)", step):
                if eval(f"{a} {op} {b}") != int(c):
                    wrong.add((k, c))
        logprobs = [-3.0 if hit and (step_of[i], text[b:e]) in wrong else -0.05
                    for i, ((b, e), hit) in enumerate(zip(offsets, results))]
        out.append({"logprobs": logprobs, "margins": [min(0.0, v + 0.05) for v in logprobs], "step": step_of,
                    "result": results})
    return out


def faked_work(tmp_path):
    def sample(right: bool, seed: int) -> dict:
        total = 5 if right else 6
        steps = [f"He has {seed} + 3 = {seed + 3} apples.",
                 f"Then 2 + 3 = {total} in all. The answer is \\boxed{{{total}}}."]
        return {"steps": steps, "answer": str(total), "correct": right, "labels": [1, int(right)],
                "finish_reason": "eos"}

    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    settings = {"policy": "the-policy"}
    train = [{"id": p, "prompt": f"problem {p}", "settings": settings,
              "samples": [sample(right, p + s) for s, right in enumerate((True, False, True, False))]}
             for p in range(3)]
    (tmp_path / "train" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    rows = [{"prompt": p["prompt"], "completions": s["steps"], "labels": s["labels"], "correct": s["correct"],
             "source": "policy"} for p in train for s in p["samples"]]
    (tmp_path / "train" / "prm-train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    val = [{"id": p, "prompt": f"val {p}", "samples": [sample(right, p + s) for s, right in
                                                      enumerate((True, False, False, True))]} for p in range(4)]
    (tmp_path / "val" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val))


def test_a_policy_that_knows_the_sums_orders_every_pair_by_its_results(tmp_path):
    faked_work(tmp_path)
    calls = []

    def values_for(policy):
        calls.append(policy)
        return arithmetic_values

    out = tmp_path / "result.json"
    result = lm_step_features.main(["--work", str(tmp_path), "--size", "8", "--out", str(out)], values_for=values_for)
    assert calls == ["the-policy"]
    assert result["training"]["solutions"] == 8  # two whole problems of four solutions
    readings = result["readings"]
    assert readings["policy result-logprob"]["within_problem_auroc"]["auroc"] == 1.0
    assert readings["policy result-margin"]["within_problem_auroc"]["auroc"] == 1.0
    assert readings["policy learned"]["within_problem_auroc"]["auroc"] == 1.0
    # the wrong samples' wrong sum is their only unlikely token, so it shows in the pooled readings too
    assert readings["policy lowest-token"]["within_problem_auroc"]["auroc"] == 1.0
    assert json.loads(out.read_text())["readings"].keys() == readings.keys()
    assert result["first_choice"]["policy"]["slip"]["first_choice_share"] == 0.0  # it never writes a wrong sum
    assert result["first_choice"]["policy"]["right"]["first_choice_share"] == 1.0

    assert readings[lm_step_features.EXACT]["within_problem_auroc"]["auroc"] == 1.0
    assert result["validation"]["right_samples_with_a_wrong_step"] == 0

    def never(policy):
        raise AssertionError("the per-token values were cached and should not be computed again")

    again = lm_step_features.main(["--work", str(tmp_path), "--size", "8", "--out", str(out)], values_for=never)
    assert again["readings"] == readings


def test_a_right_answer_reached_through_a_false_step_caps_the_exact_labels(tmp_path):
    faked_work(tmp_path)
    val = [json.loads(line) for line in (tmp_path / "val" / "samples.jsonl").read_text().splitlines()]
    val[0]["samples"][0]["labels"] = [0, 0]  # right by its answer, a false step on the way
    (tmp_path / "val" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val))
    result = lm_step_features.main(["--work", str(tmp_path), "--size", "8", "--out", str(tmp_path / "r.json")],
                                   values_for=lambda policy: arithmetic_values)
    assert result["validation"]["right_samples_with_a_wrong_step"] == 1
    # judged by its steps the lucky sample is wrong, and the exact labels order every pair
    assert result["readings"][lm_step_features.EXACT]["within_problem_auroc_by_steps"]["auroc"] == 1.0
    # problem 0: the lucky right sample ties both wrong ones (a half each), the other wins both: 3 of 4 pairs
    exact = result["readings"][lm_step_features.EXACT]["within_problem_auroc"]
    assert exact["auroc"] == pytest.approx((0.75 + 1 + 1 + 1) / 4)
