"""A step score read from a language model's own next-token distribution, no PRM training: does the model that
wrote the samples (or another one) tell a problem's right samples from its wrong ones, and through which reading?

bench/arithmetic_knowledge.py found the sums in the policy (its log-prob of a stated result orders true above false
rows of the same words 0.854 of the time) and every PRM at chance on them. Almost every wrong sample here holds an
arithmetic slip (bench/results/error_kinds_room.json), so a model's reading of the stated results is the signal a
PRM lacks. Each sample is scored by one teacher-forced pass of each model in --models
(`prmkit.generation.confidence`), and each step gets these readings of its tokens:
- `mean`: the mean log-prob per token (the `lowest-step` confidence of bench/confidence.py);
- `lowest-token`: the least likely token's log-prob;
- `margin`: the widest gap between a written token and the model's first choice there (0 where it wrote the model's
  first choice everywhere), which a hard but right step does not pay and a slip does;
- `result-logprob` and `result-margin`: the same two over the tokens of the step's stated results only (the
  numbers after each `=`, bench/lifecycle/exact.py's equations); 0 for a step that states none.
A sample's score under one reading is its lowest step (exp of it, a probability like a PRM's score). `learned`
stacks the five: a logistic regression (`prmkit.training.head_init.fit_linear_head`) on each step's running lowest
of every reading (a step after a slip is wrong too), fitted to the exact step labels of the training solutions a
PRM of bench/data_curve.py trains on, its sample score the lowest step's probability; with several models, one more
stacks all of theirs. `exact step labels` scores a sample 1 when the exact judge labels every step right, else 0: a
PRM that never misjudges a step, the ceiling of any process score where some samples reach the gold answer through
a false step. Each reading is also judged against the steps instead of the answer (`within_problem_auroc_by_steps`,
right meaning every step right), which leaves such samples out of the question.

    python bench/lm_step_features.py --work /work/curve-room --size 192 --models policy,smollm2-135m

Judged on WORK/val/samples.jsonl: within-problem AUROC and weighted best-of-N against majority voting, the PRMs'
table. Validation only: this chooses a reading, and nothing here reads held-out problems. Each sample's per-token
values are cached beside its split's samples (lm-token-values.jsonl for the policy, lm-token-values-NAME.jsonl for
another model), read again for the same model folder.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from arithmetic_knowledge import model_folder  # noqa: E402
from confidence import step_of_each_token  # noqa: E402
from data_curve import drawn_by_policy, sampling_policy, subset  # noqa: E402
from lifecycle.exact import equations  # noqa: E402
from lifecycle.onpolicy import DELIMITER  # noqa: E402
from prmkit.evaluation.metrics import within_problem_auroc  # noqa: E402
from prmkit.evaluation.within_problem import WEIGHTED, step_label_ceiling, within_problem_metrics  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402

READINGS = ("mean", "lowest-token", "margin", "result-logprob", "result-margin")
LEARNED = "learned"
# The exact judge's own step labels as a score: what a PRM that never misjudges a step would do. A sample that
# reaches the gold answer through a false step is right by its answer and wrong by its steps, so even this score
# orders some pairs the wrong way: the ceiling of any process score judged by answers.
EXACT = "exact step labels"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="bench/data_curve.py's work folder (train/ and val/)")
    parser.add_argument("--models", default="policy",
                        help="comma-separated causal LMs whose readings are taken: policy (the one that drew the "
                        "samples), a prmkit alias (smollm2-135m) or a local folder")
    parser.add_argument("--size", type=int, default=192,
                        help="training solutions the learned reading is fitted on, chosen as data_curve chooses")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "lm_step_features.json"))
    return parser.parse_args(argv)


def result_tokens(steps: list[str], offsets: list[tuple[int, int]]) -> list[bool]:
    """For each token of the steps joined at DELIMITER, whether it covers a character of a stated result."""
    spans, at = [], 0
    for step in steps:
        spans += [(at + e.result_start, at + e.result_end) for e in equations(step)]
        at += len(step) + len(DELIMITER)
    return [any(begin < end_ and start < end for start, end_ in spans) for begin, end in offsets]


def step_readings(steps: list[str], values: dict) -> list[dict[str, float]]:
    """Each step's READINGS from one sample's per-token values (`logprobs`, `margins`, `step` and `result` per
    token, in order)."""
    out = []
    for k in range(len(steps)):
        own = [i for i, step in enumerate(values["step"]) if step == k]
        results = [i for i in own if values["result"][i]]

        def lowest(name: str, tokens: list[int]) -> float:
            return min((values[name][i] for i in tokens), default=0.0)

        out.append({"mean": sum(values["logprobs"][i] for i in own) / len(own) if own else 0.0,
                    "lowest-token": lowest("logprobs", own), "margin": lowest("margins", own),
                    "result-logprob": lowest("logprobs", results), "result-margin": lowest("margins", results)})
    return out


def running_lowest(readings: list[dict[str, float]]) -> list[list[float]]:
    """Each step's features for the learned reading: every reading's lowest over this step and all before it."""
    out, low = [], None
    for step in readings:
        current = [step[name] for name in READINGS]
        low = current if low is None else [min(a, b) for a, b in zip(low, current)]
        out.append(list(low))
    return out


def token_values(model, tokenizer, rows: list[dict]) -> list[dict]:
    """Per row (`prompt`, `steps`): each solution token's log-prob and margin under `model`, the step it lies in
    and whether it is part of a stated result."""
    from prmkit.generation.base import chat_prompt
    from prmkit.generation.confidence import completion_logprobs
    from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT

    prompts, completions, owners = [], [], []
    for row in rows:
        prompts.append(tokenizer(chat_prompt(tokenizer, row["prompt"], "", DEFAULT_SYSTEM_PROMPT),
                                 add_special_tokens=False)["input_ids"])
        encoded = tokenizer(DELIMITER.join(row["steps"]), add_special_tokens=False, return_offsets_mapping=True)
        completions.append(encoded["input_ids"])
        owners.append((step_of_each_token(row["steps"], encoded["offset_mapping"]),
                       result_tokens(row["steps"], encoded["offset_mapping"])))
    scored = completion_logprobs(model, prompts, completions, batch_size=16)
    return [{"logprobs": list(s.token_logprobs), "margins": list(s.token_margins), "step": step, "result": result}
            for s, (step, result) in zip(scored, owners)]


def cached_values(path: Path, policy: str, rows: list[dict], compute) -> list[dict]:
    """`compute(rows)`'s per-token values, from `path` when it holds them for this policy and these solutions."""
    keys = [[row["prompt"], row["steps"]] for row in rows]
    if path.is_file():
        cached = read_jsonl(path)
        if [c["key"] for c in cached] == keys and all(c["policy"] == policy for c in cached):
            return [c["values"] for c in cached]
    values = compute(rows)
    write_jsonl([{"key": key, "policy": policy, "values": v} for key, v in zip(keys, values)], path)
    return values


def fit(features: list[list[float]], labels: list[int], names: list[str]):
    """A learned reading: a logistic regression from the running lowest readings (`names`, in order) to the step
    label."""
    import torch

    from prmkit.training.head_init import fit_linear_head

    weight, bias = fit_linear_head(torch.tensor(features, dtype=torch.float32),
                                   torch.tensor(labels, dtype=torch.float32), "bce")

    def step_probability(row_features: list[float]) -> float:
        logit = float(torch.tensor(row_features, dtype=torch.float32) @ weight + bias)
        return 1.0 / (1.0 + math.exp(-logit))

    step_probability.weights = {name: round(float(w), 4) for name, w in zip(names, weight)}
    step_probability.bias = round(float(bias), 4)
    return step_probability


def stacked(readings: dict[str, list[dict[str, float]]]) -> list[list[float]]:
    """Each step's running lowest readings of every model in `readings` (model -> its step readings), side by
    side."""
    per_model = [running_lowest(steps) for steps in readings.values()]
    return [sum(parts, []) for parts in zip(*per_model)]


def feature_names(models: list[str]) -> list[str]:
    return [f"{model} {reading}" for model in models for reading in READINGS]


def sample_scores(readings: dict[str, list[dict[str, float]]], learned: dict) -> dict[str, float]:
    """A sample's score under every model's every reading (exp of its lowest step), and under each learned reading
    (`learned`: name -> (its models, its step probability)), its lowest step's probability."""
    scores = {f"{model} {name}": math.exp(min(step[name] for step in steps))
              for model, steps in readings.items() for name in READINGS}
    for name, (models, step_probability) in learned.items():
        scores[name] = min(step_probability(f) for f in stacked({m: readings[m] for m in models}))
    return scores


def first_choice_shares(steps: list[list[str]], readings: list[list[dict[str, float]]]) -> dict:
    """Over the validation steps that state a result: how often a step whose every equation is true (`right`) or
    one with a false equation (`slip`) wrote the model's own first choice at every result token (margin 0), and
    how well each result reading tells the two apart (`slip_auroc`: a right step above a slip). A slip the model
    would have made itself is one its reading cannot see."""
    from prmkit.evaluation.metrics import auroc

    counts = {"right": [0, 0], "slip": [0, 0]}
    values: dict[str, list[float]] = {"result-logprob": [], "result-margin": []}
    truths = []
    for sample_steps, sample_readings in zip(steps, readings):
        for step, reading in zip(sample_steps, sample_readings):
            found = equations(step)
            if found:
                right = all(e.true for e in found)
                kind = counts["right" if right else "slip"]
                kind[0] += 1
                kind[1] += reading["result-margin"] == 0.0
                truths.append(right)
                for name in values:
                    values[name].append(reading[name])
    shares = {kind: {"steps": total, "first_choice_share": round(first / total, 4) if total else None}
              for kind, (total, first) in counts.items()}
    return {**shares, "slip_auroc": {name: auroc(v, truths) for name, v in values.items()}}


def exact_score(sample: dict) -> float | None:
    """1.0 for a sample whose every step the exact judge labels right, 0.0 otherwise (None without labels)."""
    return float(min(sample["labels"])) if sample.get("labels") else None


def groups(problems: list[dict], scores: list[list[dict]]) -> list[dict]:
    """prmkit.evaluation.within_problem's groups, one per validation problem."""
    names = list(scores[0][0])
    return [{"key": problem["id"], "correct": [bool(s["correct"]) for s in problem["samples"]],
             "answers": [s["answer"] for s in problem["samples"]],
             "truncated": [s["finish_reason"] == "length" for s in problem["samples"]],
             "scores": {name: [per[name] for per in per_sample] for name in names}}
            for problem, per_sample in zip(problems, scores)]


def causal_lm_values(folder: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return lambda rows: token_values(model, tokenizer, rows)


def main(argv=None, values_for=causal_lm_values) -> dict:
    """`values_for(folder)` gives a `token_values`-like function of rows for the causal LM in FOLDER."""
    args = parse_args(argv)
    started = time.perf_counter()
    work = Path(args.work).resolve()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    train = [{"prompt": r["prompt"], "steps": r["completions"], "labels": r["labels"]}
             for r in subset(read_jsonl(work / "train" / "prm-train.jsonl"), args.size) if drawn_by_policy(r)]
    problems = read_jsonl(work / "val" / "samples.jsonl")
    flat = [{"prompt": p["prompt"], "steps": s["steps"]} for p in problems for s in p["samples"]]
    train_readings, val_readings = {}, {}
    for model in models:
        folder = model_folder(model, work)
        loaded = {}

        def compute(rows, folder=folder, loaded=loaded):
            if "values" not in loaded:
                loaded["values"] = values_for(folder)
            return loaded["values"](rows)

        cache = "lm-token-values.jsonl" if model == "policy" else f"lm-token-values-{Path(model).name}.jsonl"
        train_readings[model] = [step_readings(row["steps"], values) for row, values in
                                 zip(train, cached_values(work / "train" / cache, folder, train, compute))]
        val_readings[model] = [step_readings(row["steps"], values) for row, values in
                               zip(flat, cached_values(work / "val" / cache, folder, flat, compute))]
    labels = [int(label) for row in train for label in row["labels"]]
    learned = {}
    for chosen in ([[m] for m in models] + ([models] if len(models) > 1 else [])):
        features = [f for i in range(len(train)) for f in stacked({m: train_readings[m][i] for m in chosen})]
        name = f"{chosen[0]} {LEARNED}" if len(chosen) == 1 else f"{LEARNED}, every model"
        learned[name] = (chosen, fit(features, labels, feature_names(chosen)))
    per_sample = iter(sample_scores({m: val_readings[m][i] for m in models}, learned) for i in range(len(flat)))
    scores = [[{**next(per_sample), EXACT: exact_score(sample)} for sample in p["samples"]] for p in problems]
    data = groups(problems, scores)
    n = min(len(g["correct"]) for g in data)
    readings = {}
    by_steps = [[exact_score(sample) == 1.0 for sample in p["samples"]] for p in problems]
    ceiling = step_label_ceiling([{**g, "steps_right": right} for g, right in zip(data, by_steps)])
    for name in data[0]["scores"]:
        judged = within_problem_metrics(data, (name,), correct_from="answer", aggregation=name)
        readings[name] = {"within_problem_auroc": judged["auroc"][name],
                          # the same pairs judged by the steps instead of the answer: right means the exact judge
                          # labels every step right, so a sample right by luck counts as wrong
                          "within_problem_auroc_by_steps": within_problem_auroc(
                              [(g["scores"][name], steps_right) for g, steps_right in zip(data, by_steps)]),
                          "at_n": n,
                          "versus_majority": {rule: values[str(n)]
                                              for rule, values in judged["by_n"]["versus_majority"].items()}}
    result = {"command": "python bench/lm_step_features.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "policy": sampling_policy(work),
              "models": {m: model_folder(m, work) for m in models},
              "training": {"solutions": len(train), "steps": len(labels), "right_steps": sum(labels),
                           "learned": {name: {"weights": fn.weights, "bias": fn.bias}
                                       for name, (_, fn) in learned.items()}},
              "validation": {"problems": len(data), "samples": len(flat),
                             "problems_with_both_outcomes": sum(0 < sum(g["correct"]) < len(g["correct"])
                                                                for g in data),
                             # right by the answer, wrong by the exact judge's step labels
                             "right_samples": ceiling["right_samples"],
                             "right_samples_with_a_wrong_step": ceiling["right_with_a_wrong_step"]},
              "first_choice": {m: first_choice_shares([row["steps"] for row in flat], val_readings[m])
                               for m in models},
              "readings": readings, "seconds": round(time.perf_counter() - started, 1)}
    write_json_atomic(Path(args.out), result)
    for name, entry in readings.items():
        auroc = entry["within_problem_auroc"]
        print(f"{name:32} within-problem AUROC {auroc['auroc']:.3f}  weighted best-of-{n} - majority "
              f"{entry['versus_majority'][f'{WEIGHTED} - majority vote']['difference']:+.3f}", flush=True)
    return result


if __name__ == "__main__":
    main()
