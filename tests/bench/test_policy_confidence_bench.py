"""bench/confidence.py on the tiny model: each sample's confidences are the policy's log-probs of its own text, the
groups feed prmkit's within-problem metrics, validation chooses among the three and the held-out read takes the
chosen one only."""

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import confidence
from prmkit.generation.base import chat_prompt
from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT


def sample(steps, answer, correct, finish="eos"):
    return {"steps": steps, "answer": answer, "correct": correct, "finish_reason": finish, "tokens": 9}


PROBLEMS = [
    {"id": 0, "prompt": "Tom has 3 apples and buys 4. How many?", "gold_answer": "7", "samples": [
        sample(["3 + 4 = 7", "The answer is \\boxed{7}."], "7", True),
        sample(["3 + 4 = 8", "The answer is \\boxed{8}."], "8", False),
        sample(["3 + 4 = 7", "The answer is \\boxed{7}."], "7", True)]},
    {"id": 1, "prompt": "Ann has 9 pens and loses 2. How many?", "gold_answer": "7", "samples": [
        sample(["9 - 2 = 6", "The answer is \\boxed{6}."], "6", False),
        sample(["9 - 2 = 7", "so 7 pens"], None, False, "length"),
        sample(["9 - 2 = 7", "The answer is \\boxed{7}."], "7", True)]},
]


@pytest.fixture
def samples(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return path


def naive_token_logprobs(model, prompt_ids, completion_ids):
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float().log_softmax(-1)
    return [logits[len(prompt_ids) - 1 + i, t].item() for i, t in enumerate(completion_ids)]


def naive_logprob(model, prompt_ids, completion_ids):
    return sum(naive_token_logprobs(model, prompt_ids, completion_ids))


def scored_first_problem(folder):
    """The tiny policy, its tokenizer, the confidences of PROBLEMS and the first problem's prompt ids."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompt = tokenizer(chat_prompt(tokenizer, PROBLEMS[0]["prompt"], "", DEFAULT_SYSTEM_PROMPT),
                       add_special_tokens=False)["input_ids"]
    return model, tokenizer, confidence.confidences(model, tokenizer, PROBLEMS), prompt


def test_each_confidence_is_the_policys_log_prob_of_the_samples_own_text(tiny_llama):
    model, tokenizer, scores, prompt = scored_first_problem(tiny_llama)
    text = "3 + 4 = 8\n\nThe answer is \\boxed{8}."
    whole = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert scores[0][1]["sum"] == pytest.approx(naive_logprob(model, prompt, whole), abs=1e-4)
    assert scores[0][1]["mean"] == pytest.approx(scores[0][1]["sum"] / len(whole), abs=1e-6)
    head = tokenizer(text[:text.rfind("{") + 1], add_special_tokens=False)["input_ids"]
    answer = tokenizer("8", add_special_tokens=False)["input_ids"]
    assert scores[0][1]["answer"] == pytest.approx(naive_logprob(model, prompt + head, answer), abs=1e-4)
    assert scores[0][0] == scores[0][2]  # the same text, the same confidence
    assert scores[1][1]["answer"] is None and scores[1][1]["mean"] is not None  # no boxed answer to read


def test_the_lowest_token_and_the_lowest_step_read_each_tokens_log_prob(tiny_llama):
    model, tokenizer, scores, prompt = scored_first_problem(tiny_llama)
    steps = ["3 + 4 = 8", "The answer is \\boxed{8}."]
    text = "\n\n".join(steps)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    tokens = naive_token_logprobs(model, prompt, encoded["input_ids"])
    assert scores[0][1]["lowest-token"] == pytest.approx(min(tokens), abs=1e-4)
    # by hand: a token belongs to the first step until a token starts inside the second step's text
    second = text.index("The")
    owners = [0 if begin < second else 1 for begin, _ in encoded["offset_mapping"]]
    assert owners[0] == 0 and owners[-1] == 1
    assert confidence.step_of_each_token(steps, encoded["offset_mapping"]) == owners
    means = [sum(t for t, o in zip(tokens, owners) if o == k) / owners.count(k) for k in (0, 1)]
    assert scores[0][1]["lowest-step"] == pytest.approx(min(means), abs=1e-4)
    # the mean is a weighted mean of the steps' means, each at least the lowest token
    assert scores[0][1]["lowest-token"] <= scores[0][1]["lowest-step"] <= scores[0][1]["mean"] + 1e-9


def test_lowest_step_mean_by_hand():
    assert confidence.lowest_step_mean((-0.5, -1.5, -0.25, -0.25), [0, 0, 1, 1]) == -1.0
    assert confidence.lowest_step_mean((), []) is None


def test_the_confidences_compared_on_validation_are_a_choice(samples):
    args = confidence.parse_args(["--samples", str(samples), "--split", "validation",
                                  "--confidences", "mean,lowest-step"])
    assert args.confidences == ("mean", "lowest-step")
    with pytest.raises(SystemExit):
        confidence.parse_args(["--samples", str(samples), "--split", "validation", "--confidences", "mean,median"])


def test_validation_compares_all_three_and_the_held_out_read_takes_the_chosen_one(tiny_llama, samples, tmp_path):
    out = tmp_path / "confidence.json"
    result = confidence.main(["--samples", str(samples), "--split", "validation", "--policy", str(tiny_llama),
                              "--out", str(out)])
    validation = result["validation"]
    assert set(validation["confidences"]) == set(confidence.PREREGISTERED)  # the others only when asked
    assert validation["problems"] == 2 and validation["samples"] == 6 and validation["problems_with_both_outcomes"] == 2
    medians = validation["median_mean_logprob"]
    assert medians["right"] < 0 and medians["wrong"] < 0  # log-probs of real samples, both outcomes present
    chosen = validation["chosen"]
    aurocs = {name: c["within_problem_auroc"]["auroc"] for name, c in validation["confidences"].items()}
    assert aurocs[chosen] == max(aurocs.values())
    mean = validation["confidences"]["mean"]
    assert mean["at_n"] == 3 and "majority vote" in mean and "weighted best-of-N - majority vote" in mean["versus_majority"]

    cache = samples.with_name("confidence-scores.jsonl")
    cached_at = cache.stat().st_mtime_ns
    scores = [json.loads(line)["confidences"] for line in cache.read_text().splitlines()]
    groups = confidence.groups(PROBLEMS, scores)
    assert groups[0]["scores"]["mean"][1] == pytest.approx(math.exp(scores[0][1]["mean"]))  # a probability
    assert 0 < groups[0]["scores"]["sum"][0] <= groups[0]["scores"]["mean"][0] <= 1

    held = confidence.main(["--samples", str(samples), "--split", "held_out", "--confidence", chosen,
                            "--policy", str(tiny_llama), "--out", str(out)])
    assert set(held["held_out"]["confidences"]) == {chosen} and "chosen" not in held["held_out"]
    assert json.loads(out.read_text())["validation"]["chosen"] == chosen  # the validation entry is kept
    assert cache.stat().st_mtime_ns == cached_at  # the same samples' log-probs are read, not computed again


def test_the_held_out_read_needs_the_confidence_validation_chose(samples):
    with pytest.raises(SystemExit):
        confidence.parse_args(["--samples", str(samples), "--split", "held_out"])
    with pytest.raises(SystemExit):
        confidence.parse_args(["--samples", str(samples), "--split", "validation", "--confidence", "mean"])
