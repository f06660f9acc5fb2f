"""The baseline a PRM must beat at choosing among a problem's samples: the policy's own confidence in each sample,
its log-probability under the policy's raw distribution (`prmkit.generation.confidence`). Within-problem AUROC,
best-of-N, weighted best-of-N and the vote-aware rules against majority voting, on the samples that
bench/lifecycle/onpolicy.py drew for an evaluation split (the same files the PRMs of bench/ranking.py are judged
on), so a PRM's table and this one compare.

Confidences per sample, chosen between on validation problems only, each as a probability (exp of the log-prob)
so that it weighs votes as a PRM's score does (weighted best-of-N sums them per answer). The preregistered three:
- `mean`: the per-token probability of the whole solution, exp(mean log-prob) (the length-fair one);
- `sum`: the solution's probability, exp(total log-prob) (favours short solutions);
- `answer`: the probability of the final answer's tokens given everything before them.
Two that look where in the sample the policy was unsure (`--confidences` with all five, validation only; the
held-out problems were read for the first three, so these go to a results file of their own):
- `lowest-token`: the probability of the least likely token (one slip fades in the mean, not here);
- `lowest-step`: the lowest per-token probability of any one step, each step's exp(mean log-prob): the policy's
  confidence as a process score, step by step, aggregated by `min` as prmkit's PRMs are.

    python bench/lifecycle/onpolicy.py --split validation --problems 64 --k 8 --work /work/ranking/val
    python bench/confidence.py --samples /work/ranking/val/samples.jsonl --split validation
    python bench/confidence.py --samples /work/ranking/val/samples.jsonl --split validation \
        --confidences mean,sum,answer,lowest-token,lowest-step --out bench/results/confidence_steps.json

The held-out read (`--split held_out --confidence C`) takes the confidence the validation run chose and reports that
one only. Writes bench/results/confidence.json (one entry per split, the others kept); each sample's log-probs go
to confidence-scores.jsonl beside the samples, read again by a later call for the same policy.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle.analysis import confidence_score  # noqa: E402
from lifecycle.onpolicy import DELIMITER  # noqa: E402
from lifecycle.policy import PolicyRecipe, build_policy  # noqa: E402
from prmkit.evaluation.within_problem import WEIGHTED, within_problem_metrics  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402
from prmkit.generation.base import chat_prompt  # noqa: E402
from prmkit.generation.confidence import completion_logprobs  # noqa: E402
from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT  # noqa: E402

PREREGISTERED = ("mean", "sum", "answer")
CONFIDENCES = (*PREREGISTERED, "lowest-token", "lowest-step")
ANSWER_OPENS = "\\boxed{"  # the policy closes with "The answer is \\boxed{N}."


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", required=True, help="WORK/samples.jsonl of bench/lifecycle/onpolicy.py")
    parser.add_argument("--split", choices=("validation", "held_out"), required=True)
    parser.add_argument("--confidences", default=",".join(PREREGISTERED),
                        help=f"validation only: the confidences compared, comma-separated, of {', '.join(CONFIDENCES)}")
    parser.add_argument("--confidence", choices=CONFIDENCES, default=None,
                        help="held_out only: the confidence the validation run chose (the one read)")
    parser.add_argument("--policy", default=None, help="the policy that drew the samples (default: the cached "
                        "benchmark policy)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "confidence.json"))
    args = parser.parse_args(argv)
    if (args.split == "held_out") != (args.confidence is not None):
        parser.error("--confidence goes with --split held_out, and only there: validation compares --confidences, "
                     "held-out problems read the one validation chose")
    args.confidences = tuple(args.confidences.split(","))
    unknown = [name for name in args.confidences if name not in CONFIDENCES]
    if unknown:
        parser.error(f"--confidences: {', '.join(unknown)} unknown; choose from {', '.join(CONFIDENCES)}")
    return args


def solution_text(sample: dict) -> str:
    return DELIMITER.join(sample["steps"])


def step_of_each_token(steps: list[str], offsets: list[tuple[int, int]]) -> list[int]:
    """For each token of the steps joined at DELIMITER (`offsets`: its characters in that text), the step it belongs
    to: the step its first character lies in, the delimiter going with the step it closes."""
    starts, at = [], 0
    for step in steps:
        starts.append(at)
        at += len(step) + len(DELIMITER)
    return [max(0, bisect.bisect_right(starts, begin) - 1) for begin, _ in offsets]


def lowest_step_mean(token_logprobs: tuple[float, ...], owners: list[int]) -> float | None:
    """The lowest of the steps' mean token log-probs."""
    per_step: dict[int, list[float]] = {}
    for value, step in zip(token_logprobs, owners):
        per_step.setdefault(step, []).append(value)
    return min(sum(v) / len(v) for v in per_step.values()) if per_step else None


def confidences(model, tokenizer, problems: list[dict]) -> list[list[dict[str, float | None]]]:
    """Per problem, per sample: each confidence of CONFIDENCES (None where the sample wrote no boxed answer)."""
    prompts, completions, owners, step_owners = [], [], [], {}
    for p, problem in enumerate(problems):
        prompt = tokenizer(chat_prompt(tokenizer, problem["prompt"], "", DEFAULT_SYSTEM_PROMPT),
                           add_special_tokens=False)["input_ids"]
        for s, sample in enumerate(problem["samples"]):
            text = solution_text(sample)
            prompts.append(prompt)
            encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            completions.append(encoded["input_ids"])
            owners.append((p, s, "whole"))
            step_owners[p, s] = step_of_each_token(sample["steps"], encoded["offset_mapping"])
            cut = text.rfind(ANSWER_OPENS)
            if cut != -1 and sample["answer"] is not None:
                head = tokenizer(text[:cut + len(ANSWER_OPENS)], add_special_tokens=False)["input_ids"]
                prompts.append(prompt + head)
                completions.append(tokenizer(str(sample["answer"]), add_special_tokens=False)["input_ids"])
                owners.append((p, s, "answer"))
    results = completion_logprobs(model, prompts, completions, batch_size=16)
    out = [[{name: None for name in CONFIDENCES} for _ in problem["samples"]] for problem in problems]
    for (p, s, part), result in zip(owners, results):
        if part == "whole":
            out[p][s]["mean"], out[p][s]["sum"] = result.mean, result.logprob
            out[p][s]["lowest-token"] = result.lowest
            out[p][s]["lowest-step"] = lowest_step_mean(result.token_logprobs, step_owners[p, s])
        else:
            out[p][s]["answer"] = result.logprob
    return out


def cached_confidences(path: Path, policy: str, problems: list[dict], compute) -> list[list[dict]]:
    """The log-probs of every sample, from `path` when it holds them for this policy and these problems, else
    computed now (`compute()`) and written there."""
    if path.is_file():
        rows = read_jsonl(path)
        if [r["id"] for r in rows] == [p["id"] for p in problems] and all(r["policy"] == policy for r in rows) \
                and all(set(CONFIDENCES) <= set(c) for r in rows for c in r["confidences"]):
            return [r["confidences"] for r in rows]
    scores = compute()
    write_jsonl([{"id": p["id"], "policy": policy, "confidences": c} for p, c in zip(problems, scores)], path)
    return scores


def policy_confidences(policy: Path, samples_path: Path, problems: list[dict]) -> list[list[dict]]:
    """Every sample's confidences under `policy`, cached beside the samples (confidence-scores.jsonl)."""
    def compute():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(policy)
        model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32).eval()
        return confidences(model, tokenizer, problems)

    return cached_confidences(samples_path.with_name("confidence-scores.jsonl"), str(policy), problems, compute)


def groups(problems: list[dict], scores: list[list[dict]]) -> list[dict]:
    """prmkit.evaluation.within_problem's groups: one per problem, the samples in drawing order, each confidence
    as a probability."""
    return [{"key": problem["id"], "correct": [bool(s["correct"]) for s in problem["samples"]],
             "answers": [s["answer"] for s in problem["samples"]],
             "truncated": [s["finish_reason"] == "length" for s in problem["samples"]],
             "scores": {name: [confidence_score(sample[name]) for sample in per_sample] for name in CONFIDENCES}}
            for problem, per_sample in zip(problems, scores)]


def summary(metrics: dict, n: int) -> dict:
    """What the tables print: within-problem AUROC and, at N, the choosers against majority voting."""
    by_n = metrics["by_n"]
    methods, versus = by_n["methods"], by_n["versus_majority"]
    return {"within_problem_auroc": metrics["auroc"][by_n["aggregation"]],
            "at_n": n, **{name: methods[name][str(n)] for name in methods},
            "versus_majority": {name: values[str(n)] for name, values in versus.items()}}


def main(argv=None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    policy = Path(args.policy) if args.policy else build_policy(PolicyRecipe())
    problems = read_jsonl(args.samples)
    scores = policy_confidences(policy, Path(args.samples), problems)
    data = groups(problems, scores)
    n = min(len(g["correct"]) for g in data)
    names = args.confidences if args.split == "validation" else (args.confidence,)
    judged = {name: within_problem_metrics(data, CONFIDENCES, correct_from="answer", aggregation=name)
              for name in names}
    both = [(problem, per_sample) for problem, per_sample in zip(problems, scores)
            if 0 < sum(s["correct"] for s in problem["samples"]) < len(problem["samples"])]
    per_token = {outcome: statistics.median(c["mean"] for problem, per_sample in both
                                            for s, c in zip(problem["samples"], per_sample)
                                            if bool(s["correct"]) == outcome and c["mean"] is not None)
                 for outcome in (True, False)} if both else {}
    entry = {"command": "python bench/confidence.py " + " ".join(sys.argv[1:] if argv is None else argv),
             "machine": f"{platform.machine()}, {os.cpu_count()} cores", "policy": str(policy),
             "problems": len(data), "samples": sum(len(g["correct"]) for g in data),
             "problems_with_both_outcomes": sum(0 < sum(g["correct"]) < len(g["correct"]) for g in data),
             "note": "each solution's steps joined at the policy's delimiter and tokenized again (not the sampled "
                     "ids); the answer's log-prob follows its opening \\boxed{",
             # what separates them: the median log-prob per token of right and of wrong samples, in the problems
             # with both outcomes
             "median_mean_logprob": {"right": per_token.get(True), "wrong": per_token.get(False)},
             "confidences": {name: summary(judged[name], n) for name in names}}
    if args.split == "validation":
        # the confidence with the best within-problem AUROC (each problem weighted equally), the first on a tie
        entry["chosen"] = max(names, key=lambda name: (judged[name]["auroc"][name]["auroc"] or 0.0,
                                                       -names.index(name)))
    entry["seconds"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.is_file() else {}
    result[args.split] = entry
    write_json_atomic(out, result)
    print(json.dumps({name: {"auroc": s["within_problem_auroc"], WEIGHTED: s["versus_majority"]}
                      for name, s in entry["confidences"].items()}, indent=1))
    return result


if __name__ == "__main__":
    main()
