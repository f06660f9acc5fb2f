"""bench/lifecycle/onpolicy.py: which sampled problems and solutions become PRM training rows, and sampling that
a kill interrupts goes on to the same samples (on a tiny random policy)."""

import json

import pytest

from lifecycle import onpolicy
from prmkit.files import read_jsonl

PROMPT = "Mia has 3 bags of 4 apples and eats 2. How many apples are left?"
RIGHT = ["She has 3 * 4 = 12 apples.", "After eating 2, 12 - 2 = 10 are left. The answer is \\boxed{10}."]
WRONG = ["She has 3 + 4 = 7 apples.", "After eating 2, 7 - 2 = 5 are left. The answer is \\boxed{5}."]


def sample(steps: list[str], correct: bool, labels: list[int]) -> dict:
    return {"steps": steps, "answer": None, "correct": correct, "labels": labels, "tokens": 20,
            "finish_reason": "eos"}


def row(problem_id: int, samples: list[dict], prompt: str = PROMPT) -> dict:
    return {"id": problem_id, "prompt": prompt, "gold_answer": "10", "seconds": 2.0, "samples": samples}


def test_problems_with_both_outcomes_are_kept_with_their_distinct_solutions_and_minimal_pairs():
    rows = [row(0, [sample(RIGHT, True, [1, 1]), sample(RIGHT, True, [1, 1]), sample(WRONG, False, [0, 0]),
                    sample([], False, [])]),
            row(1, [sample(RIGHT, True, [1, 1])] * 4, prompt="all right"),
            row(2, [sample(WRONG, False, [0, 0])] * 4, prompt="all wrong")]
    records, counts = onpolicy.training_rows(rows, 0.0, 1.0, pairs=1, seed=0)
    # problem 0 only (pass rate 1/2); the repeated right solution once, the empty sample dropped, one pair
    assert [(r["source"], r["correct"], r["labels"]) for r in records] == \
        [("policy", True, [1, 1]), ("policy", False, [0, 0]), ("minimal-pair", False, records[2]["labels"])]
    assert records[2]["labels"] in ([0, 0], [1, 0]) and all(r["group"] == PROMPT for r in records)
    assert counts == {"problems_kept": 1, "rows": 3, "policy_rows": 2, "minimal_pairs": 1, "correct_rows": 1,
                      "steps": 6, "samples_without_steps": 1, "wrong_steps": 4 - sum(records[2]["labels"])}
    # a band that keeps problems right at least half the time and below all the time, without pairs
    records, counts = onpolicy.training_rows(rows, 0.4, 1.0, pairs=0, seed=0)
    assert counts["problems_kept"] == 1 and counts["minimal_pairs"] == 0
    assert onpolicy.training_rows(rows, 0.6, 1.0, pairs=1, seed=0)[1]["rows"] == 0


def test_all_right_problems_add_their_solutions_and_minimal_pairs_but_never_all_wrong_ones():
    rows = [row(0, [sample(RIGHT, True, [1, 1]), sample(WRONG, False, [0, 0])]),
            row(1, [sample(RIGHT, True, [1, 1])] * 4, prompt="all right"),
            row(2, [sample(WRONG, False, [0, 0])] * 4, prompt="all wrong")]
    records, counts = onpolicy.training_rows(rows, 0.0, 1.0, pairs=2, seed=0, all_right=True)
    assert counts["problems_kept"] == 2 and "all wrong" not in {r["prompt"] for r in records}
    one_sided = [r for r in records if r["prompt"] == "all right"]
    # one distinct right solution (four repeats), and its pairs: wrong rows of the same problem to rank it against
    assert [r["source"] for r in one_sided][0] == "policy" and len(one_sided) >= 2
    assert all(r["source"] == "minimal-pair" and not r["correct"] for r in one_sided[1:])
    assert onpolicy.training_rows(rows, 0.0, 1.0, pairs=2, seed=0)[1]["problems_kept"] == 1


def test_an_evaluation_file_keeps_every_problem_and_every_sample_as_drawn():
    rows = [row(0, [sample(RIGHT, True, [1, 1]), sample(RIGHT, True, [1, 1]), sample(WRONG, False, [0, 0])]),
            row(1, [sample(RIGHT, True, [1, 1])] * 2, prompt="all right")]
    records, counts = onpolicy.training_rows(rows, 0.0, 1.0, pairs=0, seed=0, keep_all=True)
    # best-of-N draws repeats, so an evaluation keeps them; one-sided problems stay (they count for accuracy)
    assert [(r["prompt"] == PROMPT, r["correct"]) for r in records] == \
        [(True, True), (True, True), (True, False), (False, True), (False, True)]
    assert counts["problems_kept"] == 2 and counts["minimal_pairs"] == 0


def test_evaluation_problems_are_loops_and_never_training_problems():
    training = {p["prompt"] for p in onpolicy.onpolicy_problems(2000, 1000)}
    validation = onpolicy.evaluation_problems("validation", 8, 1000)
    held_out = onpolicy.evaluation_problems("held_out", 8, 1000)
    assert len(validation) == len(held_out) == 8
    prompts = [p["prompt"] for p in validation + held_out]
    assert len(set(prompts)) == 16
    # every problem of loop's splits, which at 2,000 training problems the draw alone would hold one of each
    everything = onpolicy.evaluation_problems("validation", 64, 1000) + onpolicy.evaluation_problems("held_out", 200,
                                                                                                     1000)
    assert not training & {p["prompt"] for p in everything}
    assert onpolicy.evaluation_problems("validation", 64, 1000)[:8] == validation
    with pytest.raises(ValueError, match="holds 64 problems"):
        onpolicy.evaluation_problems("validation", 65, 1000)


def test_a_right_answer_after_a_wrong_step_is_no_source_of_pairs_and_is_counted():
    lucky = sample(["She has 3 * 4 = 13 apples.", "The answer is \\boxed{10}."], True, [0, 0])
    rows = [row(0, [lucky, sample(WRONG, False, [0, 0])])]
    assert onpolicy.training_rows(rows, 0.0, 1.0, pairs=2, seed=0)[1]["minimal_pairs"] == 0
    assert onpolicy.judge_disagreements(rows) == {"samples": 2, "right_answer_with_a_wrong_step": 1,
                                                  "wrong_answer_with_every_step_right": 0}


def test_the_rate_sums_every_run_and_projects_the_time_of_more_problems():
    rows = [row(0, [sample(RIGHT, True, [1, 1])] * 2), row(1, [sample(WRONG, False, [0, 0])] * 2)]
    measured = onpolicy.rate(rows, k=2, project=1000)
    assert measured["seconds"] == 4.0 and measured["samples_per_second"] == 1.0
    assert measured["tokens_per_second"] == 20.0 and measured["projected_seconds_for_1000_problems"] == 2000


def without_seconds(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


@pytest.mark.slow
def test_sampling_killed_mid_batch_goes_on_to_the_same_samples(tiny_llama, tmp_path):
    def run(work, *extra):
        return onpolicy.main(["--policy", str(tiny_llama), "--work", str(work), "--problems", "3", "--k", "2",
                              "--max-new-tokens", "8", "--problems-per-batch", "2", "--backend", "transformers",
                              "--out", str(tmp_path / "rate.json"), *extra])

    result = run(tmp_path / "whole")
    whole = read_jsonl(tmp_path / "whole" / "samples.jsonl")
    assert [r["id"] for r in whole] == [0, 1, 2] and all(len(r["samples"]) == 2 for r in whole)
    assert all(len(s["labels"]) == len(s["steps"]) for r in whole for s in r["samples"])
    assert json.loads((tmp_path / "rate.json").read_text())["sampling"]["samples"] == 6
    assert result["sampling"]["projected_seconds_for_1000_problems"] > 0 and not result["benchmark_policy"]

    # killed while writing problem 1: the first batch's second line is torn
    (tmp_path / "killed").mkdir()
    text = (tmp_path / "whole" / "samples.jsonl").read_text()
    lines = text.splitlines(keepends=True)
    (tmp_path / "killed" / "samples.jsonl").write_text(lines[0] + lines[1][:40])
    run(tmp_path / "killed")
    again = read_jsonl(tmp_path / "killed" / "samples.jsonl")
    assert without_seconds(again) == without_seconds(whole)
    assert again[0]["seconds"] == whole[0]["seconds"]  # the line written before the kill is kept as it was
    with pytest.raises(ValueError, match="k: 2 there, 3 now"):
        run(tmp_path / "killed", "--k", "3")
    # --limit keeps the first problems of the same draw: nothing is sampled again, the rows are those problems'
    assert run(tmp_path / "killed", "--limit", "2")["sampling"]["samples"] == 4
    assert read_jsonl(tmp_path / "killed" / "problems.jsonl") == read_jsonl(tmp_path / "whole" / "problems.jsonl")[:2]
    # another draw of problems puts other prompts under the same ids: refused, not taken as done
    with pytest.raises(ValueError, match="another problem under id 0"):
        run(tmp_path / "killed", "--problems", "4")
