"""PRM training data from the policy itself, at scale: k sampled solutions for each of many training problems,
every step labelled by the exact judge, the problems whose samples both pass and fail kept, and a minimal pair
made from each right solution. Writes a PRM training file whose rows carry `correct` (the final answer's grade),
for a ranking loss between the right and wrong chains of one problem (`group`).

    python bench/lifecycle/onpolicy.py --problems 1000 --k 8 --work onpolicy-work   # the cached benchmark policy
    python bench/lifecycle/onpolicy.py --problems 10 --k 4 --work /tmp/onpolicy-rate --out /tmp/rate.json

Sampling appends one line per problem to WORK/samples.jsonl a batch of problems at a time, so a killed run loses
at most one batch: run the same command again to go on (a half-written batch is sampled again whole, with the same
seeds, and only its missing problems are appended). WORK/prm-train.jsonl is made anew from the samples at the
end (WORK/prm-eval.jsonl with --split validation or held_out: every sample of every problem, for prmkit eval).
The results file records the sampling rate measured (problems, samples and tokens per second, summed over every
run that wrote the samples) and the time it projects for --project problems.

The problems come from their own seed and leave out every problem the rest of the benchmark uses (the policy's SFT
chains, and the first BENCHMARK_SPLIT_CAP of the label, held-out, validation and scale splits), so a PRM trained
on them is never judged on a problem it saw.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle.exact import exact_labels  # noqa: E402
from lifecycle.minimal_pairs import minimal_pairs  # noqa: E402
from lifecycle.policy import PolicyRecipe, build_policy, policy_folder  # noqa: E402
from lifecycle.problems import disjoint_splits, gold_values, problem_rows  # noqa: E402
from prmkit.answers import AnswerChecker, sample_answer  # noqa: E402
from prmkit.data.problems import AppendedJsonl, batches, derive_seed  # noqa: E402
from prmkit.data.records import split_steps  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402
from prmkit.generation import GenerationOptions, load_generator  # noqa: E402

BENCHMARK_SPLIT_CAP = 1000  # problems of each other split left out: more than any bench/loop.py run here uses
DELIMITER = "\n\n"  # the policy's step layout (bench/lifecycle/problems.py solution_text)
# what a samples line must share with the run continuing it: the same problems sampled the same way
IDENTITY = ("policy", "k", "temperature", "max_new_tokens", "seed")
# bench/loop.py's evaluation splits, at its default sizes, so that a file made here holds its problems
EVALUATION_SPLITS = {"held_out": 200, "validation": 64}
LOOP_LABEL_PROBLEMS = 48


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="onpolicy-work", help="folder for the samples and the training file")
    parser.add_argument("--policy", default=None, help="policy folder or model alias (default: the cached "
                        "benchmark policy, built first if missing: bench/lifecycle/policy.py)")
    parser.add_argument("--problems", type=int, default=1000, help="training problems to sample")
    parser.add_argument("--limit", type=int, default=None,
                        help="sample and keep only the first LIMIT problems of the draw of --problems (the same "
                             "problems under the same ids: a draw of fewer --problems is another draw)")
    parser.add_argument("--split", choices=("onpolicy", *EVALUATION_SPLITS), default="onpolicy",
                        help="onpolicy: training problems (kept by pass rate, with minimal pairs); validation or "
                             "held_out: the first --problems of bench/loop.py's split of that name, every problem "
                             "and every sample kept as drawn, no minimal pairs (an evaluation file for prmkit eval)")
    parser.add_argument("--k", type=int, default=8, help="sampled solutions per problem")
    parser.add_argument("--min-pass-rate", type=float, default=0.0,
                        help="keep a problem whose share of right samples is above this (default: %(default)s)")
    parser.add_argument("--max-pass-rate", type=float, default=1.0,
                        help="... and below this (default: %(default)s: problems with both outcomes)")
    parser.add_argument("--pairs", type=int, default=1, help="minimal pairs per right solution (0: none)")
    parser.add_argument("--all-right-problems", action="store_true",
                        help="also keep the problems whose every sample was right: their distinct solutions and "
                             "minimal pairs are right-wrong pairs of one problem that cost no more sampling")
    parser.add_argument("--temperature", type=float, default=GenerationOptions().temperature)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--problems-per-batch", type=int, default=16)
    parser.add_argument("--generation-batch-size", type=int, default=32)
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto",
                        help="auto: vllm where this Python has it (run the script with .venv-vllm/bin/python), "
                        "else transformers")
    parser.add_argument("--cpu-memory-share", type=float, default=0.2,
                        help="vLLM on CPU: share of the node's memory it reserves (its GPU default, 0.9, fails to "
                             "start beside other jobs)")
    parser.add_argument("--project", type=int, default=1000, help="problems the results project the time of")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "onpolicy.json"))
    args = parser.parse_args(argv)
    if args.limit is not None and not 1 <= args.limit <= args.problems:
        parser.error(f"--limit {args.limit}: give 1 to --problems ({args.problems})")
    if args.problems < 1 or args.k < 1 or args.problems_per_batch < 1 or args.pairs < 0:
        parser.error(f"--problems {args.problems}, --k {args.k}, --problems-per-batch {args.problems_per_batch}, "
                     f"--pairs {args.pairs}: use 1 or more (0 or more pairs)")
    if not 0 <= args.min_pass_rate < args.max_pass_rate <= 1:
        parser.error(f"--min-pass-rate {args.min_pass_rate} --max-pass-rate {args.max_pass_rate}: give "
                     "0 <= min < max <= 1")
    return args


def onpolicy_problems(n: int, sft_chains: int) -> list[dict]:
    """Up to n problem rows (id, prompt, gold_answer, gold_steps) that no other split of the benchmark holds. A split
    drawn at another size is another pool (problems.small_number_problems), so bench/loop.py's evaluation problems,
    drawn at its sizes, are also left out by prompt (the few that coincide are dropped, and the ids of the others
    stay)."""
    others = {"sft": sft_chains, **{name: BENCHMARK_SPLIT_CAP for name in ("label", "held_out", "validation",
                                                                           "scale")}}
    evaluation = {p["prompt"] for split, size in EVALUATION_SPLITS.items()
                  for p in evaluation_problems(split, size, sft_chains)}
    return [p for p in problem_rows(disjoint_splits({**others, "onpolicy": n})["onpolicy"])
            if p["prompt"] not in evaluation]


def evaluation_problems(split: str, n: int, sft_chains: int) -> list[dict]:
    """The first n problems of bench/loop.py's split `split` (drawn at loop's default sizes, so they are its
    problems); every one of them lies outside the training problems of `onpolicy_problems`."""
    sizes = {"sft": sft_chains, "label": LOOP_LABEL_PROBLEMS, **EVALUATION_SPLITS}
    if n > sizes[split]:  # a larger draw is another pool (problems.small_number_problems), not loop's problems
        raise ValueError(f"--split {split} holds {sizes[split]} problems (bench/loop.py's); ask for at most that many")
    return problem_rows(disjoint_splits(sizes)[split][:n])


def judged_samples(problem: dict, samples, checker: AnswerChecker) -> list[dict]:
    """The policy's samples of one problem: steps, final answer and its grade, exact step labels."""
    golds = gold_values(problem["gold_steps"])
    out = []
    for sample in samples:
        steps = split_steps(sample.text, DELIMITER)
        answer = sample_answer(sample.text, sample.finish_reason)
        out.append({"steps": steps, "answer": answer, "correct": checker.check(answer, problem["gold_answer"]),
                    "labels": exact_labels(problem["prompt"], steps, golds, problem["gold_answer"]),
                    "tokens": sample.tokens, "finish_reason": sample.finish_reason})
    return out


def done_problems(output: AppendedJsonl, identity: dict, problems: list[dict]) -> set[int]:
    """The ids already sampled; a line sampled otherwise, or for another problem under its id, is an error that says
    how to go on. A draw of n problems is not the first n of a larger draw, so another --problems in the same folder
    puts other prompts under the same ids."""
    prompts = {p["id"]: p["prompt"] for p in problems}
    done = set()
    for number, line in output.lines():
        row = json.loads(line)
        theirs = {name: row["settings"].get(name) for name in IDENTITY}
        if theirs != identity:
            changed = ", ".join(f"{name}: {theirs[name]!r} there, {identity[name]!r} now"
                                for name in IDENTITY if theirs[name] != identity[name])
            raise ValueError(f"{output.path}: line {number} was sampled with other settings ({changed}); run with "
                             "the same settings to continue it, or give another --work folder")
        if row["id"] in prompts and prompts[row["id"]] != row["prompt"]:
            raise ValueError(f"{output.path}: line {number} holds another problem under id {row['id']} (sampled "
                             "for another --problems or --split); run with the same ones to continue it, or give "
                             "another --work folder")
        done.add(row["id"])
    return done


def sample_problems(args: argparse.Namespace, policy: str, problems: list[dict], output: AppendedJsonl,
                    backend: str) -> int:
    """Sample every problem not yet in `output`, a batch at a time; returns how many were sampled now."""
    identity = {"policy": policy, "k": args.k, "temperature": args.temperature,
                "max_new_tokens": args.max_new_tokens, "seed": args.seed}
    done = done_problems(output, identity, problems)
    todo = [(number, batch) for number, batch in batches(problems, args.problems_per_batch)
            if any(p["id"] not in done for p in batch)]
    if not todo:
        return 0
    options = GenerationOptions(backend=backend, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                seed=args.seed, generation_batch_size=args.generation_batch_size,
                                gpu_memory_utilization=args.cpu_memory_share)
    generator = load_generator(policy, options)
    sampled = 0
    with AnswerChecker(workers=1) as checker:
        for number, batch in todo:
            started = time.perf_counter()
            # the whole batch, as an unbroken run samples it: a batch's samples depend on every prompt in it
            outputs = generator.generate([generator.prompt(p["prompt"]) for p in batch], n=args.k,
                                         seed=derive_seed(args.seed, "onpolicy", number))
            share = (time.perf_counter() - started) / len(batch)
            rows = [{"id": p["id"], "prompt": p["prompt"], "gold_answer": p["gold_answer"], "batch": number,
                     "seconds": round(share, 3), "settings": identity,
                     "samples": judged_samples(p, samples, checker)}
                    for p, samples in zip(batch, outputs) if p["id"] not in done]
            output.append(rows)
            sampled += len(rows)
            right = sum(s["correct"] for r in rows for s in r["samples"])
            print(f"batch {number}: {len(rows)} problems, {right}/{len(rows) * args.k} samples right, "
                  f"{share * len(batch):.1f} s", flush=True)
    generator.close()
    return sampled


def training_rows(rows: list[dict], min_rate: float, max_rate: float, pairs: int, seed: int,
                  keep_all: bool = False, all_right: bool = False) -> tuple[list, dict]:
    """The PRM training records of the sampled problems whose pass rate lies strictly between the bounds (with
    `all_right`, also those whose every sample was right): each distinct sampled solution with its exact labels,
    and `pairs` minimal pairs of each right one; and counts.
    keep_all: every problem and every sample (repeats included, as best-of-N draws them), for evaluation; a
    sample with no step cannot be scored and is left out in both cases (counted as `samples_without_steps`)."""
    records, kept = [], 0
    for row in rows:
        rate = sum(s["correct"] for s in row["samples"]) / len(row["samples"])
        if not keep_all and not min_rate < rate < max_rate and not (all_right and rate == 1):
            continue
        kept += 1
        seen = set()
        for index, sample in enumerate(row["samples"]):
            if not sample["steps"] or (not keep_all and tuple(sample["steps"]) in seen):
                continue
            seen.add(tuple(sample["steps"]))
            records.append({"prompt": row["prompt"], "completions": sample["steps"], "labels": sample["labels"],
                            "correct": sample["correct"], "answer": sample["answer"],
                            "gold_answer": row["gold_answer"], "group": row["prompt"], "source": "policy",
                            "problem": row["id"], "sample": index})
    policy_records = len(records)
    records += minimal_pairs(records, pairs, seed)
    steps = [label for r in records for label in r["labels"]]
    counts = {"problems_kept": kept, "rows": len(records), "policy_rows": policy_records,
              "minimal_pairs": len(records) - policy_records,
              "correct_rows": sum(bool(r["correct"]) for r in records), "steps": len(steps),
              "samples_without_steps": sum(not s["steps"] for r in rows for s in r["samples"]),
              "wrong_steps": steps.count(0)}
    return records, counts


def judge_disagreements(rows: list[dict]) -> dict:
    """Samples whose final grade and exact labels disagree: a right answer reached through a step the judge
    calls wrong (a lucky or unparsed step), and a wrong answer after steps it calls right."""
    samples = [s for r in rows for s in r["samples"] if s["steps"]]
    return {"samples": len(samples),
            "right_answer_with_a_wrong_step": sum(s["correct"] and 0 in s["labels"] for s in samples),
            "wrong_answer_with_every_step_right": sum(not s["correct"] and 0 not in s["labels"] for s in samples)}


def rate(rows: list[dict], k: int, project: int) -> dict:
    """What the samples cost, summed over every run that wrote them, and the time `project` problems would take."""
    seconds = max(sum(r["seconds"] for r in rows), 1e-9)
    tokens = sum(s["tokens"] for r in rows for s in r["samples"])
    per_problem = seconds / len(rows)
    return {"problems": len(rows), "samples": len(rows) * k, "tokens": tokens, "seconds": round(seconds, 1),
            "problems_per_second": round(len(rows) / seconds, 4),
            "samples_per_second": round(len(rows) * k / seconds, 3),
            "tokens_per_second": round(tokens / seconds, 1), "tokens_per_sample": round(tokens / (len(rows) * k), 1),
            "finish_reasons": dict(Counter(s["finish_reason"] for r in rows for s in r["samples"])),
            f"projected_seconds_for_{project}_problems": round(per_problem * project),
            f"projected_hours_for_{project}_problems": round(per_problem * project / 3600, 2)}


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    if args.policy is None:
        policy = str(build_policy(PolicyRecipe()))
    else:  # a folder, or an alias of prmkit's (smollm2-135m: the untrained base, to measure the sampling rate)
        policy = str(Path(args.policy).resolve()) if Path(args.policy).exists() else args.policy
    backend = "vllm" if args.backend == "vllm" or (args.backend == "auto" and importlib.util.find_spec("vllm")) \
        else "transformers"
    evaluation = args.split != "onpolicy"
    problems = evaluation_problems(args.split, args.problems, PolicyRecipe().chains) if evaluation \
        else onpolicy_problems(args.problems, PolicyRecipe().chains)
    problems = problems[:args.limit]
    write_jsonl(problems, work / "problems.jsonl")
    output = AppendedJsonl(work / "samples.jsonl", holds="one line per sampled problem")
    sample_problems(args, policy, problems, output, backend)
    wanted = {p["id"] for p in problems}
    rows = [r for r in read_jsonl(output.path) if r["id"] in wanted]
    records, counts = training_rows(rows, args.min_pass_rate, args.max_pass_rate, 0 if evaluation else args.pairs,
                                    args.seed, keep_all=evaluation, all_right=args.all_right_problems)
    data_file = work / ("prm-eval.jsonl" if evaluation else "prm-train.jsonl")
    write_jsonl(records, data_file)
    rates = [sum(s["correct"] for s in r["samples"]) / args.k for r in rows]
    result = {
        "command": "python bench/lifecycle/onpolicy.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "backend": backend, "policy": policy,
        "benchmark_policy": policy == str(policy_folder(PolicyRecipe())), "settings": vars(args),
        "sampling": rate(rows, args.k, args.project),
        "pass_rates": {f"{value:.3f}": count for value, count in sorted(Counter(rates).items())},
        "training_file": {"path": str(data_file), **counts},
        "judge": judge_disagreements(rows)}
    write_json_atomic(args.out, result)
    print(json.dumps({key: result[key] for key in ("sampling", "training_file", "judge")}, indent=1))
    return result


if __name__ == "__main__":
    main()
