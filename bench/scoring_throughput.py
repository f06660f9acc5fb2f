"""Scoring throughput on SmolLM2-135M, 8-step chains: prmkit's batched one-pass scorer vs one forward per step
prefix (how several earlier tools score) vs one-pass but one chain at a time, and the batched scorer compiled
(`compile=True`, its warm-up timed apart). All give the same scores (checked here); only the cost differs.

    python bench/scoring_throughput.py --chains 32 --repeats 3 --out bench/results/scoring.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from common import sgemm_gflops, untrained_scorer  # noqa: E402

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402


def eight_step_chains(n: int) -> list[tuple[str, list[str]]]:
    records = generate_records(2 * n, seed=7)
    chains = []
    for first, second in zip(records[::2], records[1::2]):
        steps = (first["completions"] + second["completions"])[:8]
        while len(steps) < 8:
            steps.append(steps[-1])
        chains.append((first["prompt"], steps))
    return chains


@torch.inference_mode()
def per_prefix_scores(scorer: PRMScorer, prompt: str, steps: list[str]) -> list[float]:
    """One forward per step prefix, reading the last token each time."""
    scores = []
    for k in range(1, len(steps) + 1):
        ids = scorer.tokenize(prompt, steps[:k]).input_ids
        head = scorer.model(input_ids=torch.tensor([ids])).logits[0, -1, 0]
        scores.append(torch.sigmoid(head).item())
    return scores


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", default="bench/results/scoring.json")
    args = parser.parse_args()

    batched = untrained_scorer(args.batch_size)
    single = PRMScorer(batched.model, batched.tokenizer, batched.metadata, device="cpu", batch_size=1)
    chains = eight_step_chains(args.chains)
    batched.score_many(chains[:2])  # warm-up
    compiled = PRMScorer(batched.model, batched.tokenizer, batched.metadata, device="cpu",
                         batch_size=args.batch_size, compile=True)
    warm_up_s = compiled.warm_up()  # the compilation, which a compiled scorer's first calls would wait for

    variants = {
        "batched_one_pass": lambda: batched.score_many(chains),
        "batched_one_pass_compiled": lambda: compiled.score_many(chains),
        "unbatched_one_pass": lambda: [single.score(p, s) for p, s in chains],
        "per_step_prefix": lambda: [per_prefix_scores(single, p, s) for p, s in chains],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    outputs = {}
    sgemm = []  # the machine's matmul rate before each round: a slow spell of the shared machine shows there
    for repeat in range(args.repeats):
        sgemm.append(sgemm_gflops())
        for name, fn in variants.items():
            seconds, outputs[name] = timed(fn)
            times[name].append(seconds)
            print(f"repeat {repeat + 1}: {name:20s} {args.chains / seconds:7.2f} chains/s", flush=True)
    reference = outputs["per_step_prefix"]
    max_diff = max(abs(a - b) for name in ("batched_one_pass", "unbatched_one_pass", "batched_one_pass_compiled")
                   for x, y in zip(outputs[name], reference) for a, b in zip(x, y))
    summary = {name: {"chains_per_s": args.chains / statistics.median(t)} for name, t in times.items()}
    batched = summary["batched_one_pass"]["chains_per_s"]
    summary["speedup_vs_per_prefix"] = batched / summary["per_step_prefix"]["chains_per_s"]
    summary["speedup_vs_unbatched"] = batched / summary["unbatched_one_pass"]["chains_per_s"]
    summary["compiled_vs_batched"] = summary["batched_one_pass_compiled"]["chains_per_s"] / batched
    summary["compile_warm_up_s"] = warm_up_s
    summary["max_score_difference"] = max_diff
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "seconds": times,
                                          "sgemm_gflops": sgemm}, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
