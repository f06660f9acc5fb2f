"""Shared-prefix scoring: a GRPO-like group (8 completions of one prompt) and a best-of-16 group, GSM8K questions as
prompts and GSM8K gold solutions (of other questions, cut into steps at their lines) as completions, and the PRM
calls of an 8-round beam search (16 beams, beam width 4: each round, 4 parents of r - 1 steps with 4 children of
one new step each, every child scored whole), scored by SmolLM2-135M as a PRM with prefix reuse off and on,
alternating in one process. Also the control: the same chains, each with a prompt of its own, where nothing can be
shared. Scores must agree to 1e-5 and every group must pick the same best chain; the tokens the model reads are
counted.

    python bench/prefix_reuse.py --out bench/results/prefix_reuse.json

Reads ../shared/data/gsm8k/test.jsonl (or --gsm8k).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from common import peak_rss_mib, untrained_scorer  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]


def gsm8k_rows(path: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()[:n]]
    for row in rows:
        lines = [re.sub(r"<<[^>]*>>", "", line).strip() for line in row["answer"].split("\n")]
        row["steps"] = [line for line in lines if line and not line.startswith("####")]
    return rows


def groups(rows: list[dict], size: int, count: int) -> list[tuple[str, list[str]]]:
    """`count` groups of `size` chains: row k's question with the solutions of rows k+1 .. k+size (so lengths
    vary as real samples do)."""
    chains = []
    for g in range(count):
        question = rows[g * size]["question"]
        chains += [(question, rows[(g * size + 1 + j) % len(rows)]["steps"]) for j in range(size)]
    return chains


def beam_rounds(rows: list[dict], problems: int, rounds: int = 8, width: int = 4) -> list[list[tuple[str, list]]]:
    """The score_many call of each round of a beam search over `problems` problems: 4 parents per problem whose
    steps are lines of other GSM8K solutions, each with 4 children that add one more line."""
    lines = [step for row in rows for step in row["steps"]]
    calls = []
    for r in range(1, rounds + 1):
        call = []
        for p in range(problems):
            question = rows[p]["question"]
            for j in range(width):
                base = (p * 97 + j * 31) % (len(lines) - 64)
                parent = lines[base:base + r - 1]
                call += [(question, parent + [lines[base + r - 1 + 8 * (c + 1)]]) for c in range(width)]
        calls.append(call)
    return calls


def off_and_on(scorer, work, tokens: list, repeats: int) -> tuple[dict, dict, dict]:
    """`work()` with prefix reuse off, then on, `repeats` times: seconds per run, the last outputs and the tokens
    the model read (counted into `tokens` by a hook), per mode."""
    times: dict = {"off": [], "on": []}
    outputs, read = {}, {}
    for _ in range(repeats):
        for mode in ("off", "on"):
            scorer.reuse_prefix = mode == "on"
            tokens.clear()
            start = time.perf_counter()
            outputs[mode] = work()
            times[mode].append(time.perf_counter() - start)
            read[mode] = sum(tokens)
    return times, outputs, read


def best_per_group(scores: list[list[float]], size: int) -> list[int]:
    mins = [min(s) for s in scores]
    return [max(range(size), key=lambda j: mins[g + j]) for g in range(0, len(mins), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gsm8k", default=str(ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"))
    parser.add_argument("--chains", type=int, default=64, help="chains per shape (groups x group size)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--beam-problems", type=int, default=4, help="problems per beam-search round")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "prefix_reuse.json"))
    args = parser.parse_args()
    if not Path(args.gsm8k).is_file():
        sys.exit(f"{args.gsm8k} is missing: this benchmark reads GSM8K's test questions (--gsm8k PATH)")

    scorer = untrained_scorer(args.batch_size)
    rows = gsm8k_rows(Path(args.gsm8k), 4 * args.chains)
    shapes = {"grpo_group_8": (8, groups(rows, 8, args.chains // 8)),
              "best_of_16": (16, groups(rows, 16, args.chains // 16))}
    unshared = [(rows[2 * args.chains + i]["question"], steps) for i, (_, steps) in
                enumerate(shapes["grpo_group_8"][1])]
    shapes["no_shared_prompt"] = (8, unshared)
    scorer.score_many(unshared[:4])  # warm-up
    tokens = []
    scorer.model.register_forward_pre_hook(lambda module, a, kwargs: tokens.append(kwargs["input_ids"].numel()),
                                           with_kwargs=True)

    results = {}
    for name, (size, chains) in shapes.items():
        tokenized = [scorer.tokenize(p, s) for p, s in chains]
        prompt_share = statistics.mean(len(scorer.tokenize(p, []).input_ids) / len(c.input_ids)
                                       for (p, _), c in zip(chains, tokenized))
        times, outputs, read = off_and_on(scorer, lambda: scorer.score_many(chains), tokens, args.repeats)
        difference = max(abs(a - b) for x, y in zip(outputs["off"], outputs["on"]) for a, b in zip(x, y))
        results[name] = {
            "chains": len(chains), "group_size": size,
            "mean_tokens": statistics.mean(len(c.input_ids) for c in tokenized), "prompt_share": prompt_share,
            "chains_per_s_off": len(chains) / statistics.median(times["off"]),
            "chains_per_s_on": len(chains) / statistics.median(times["on"]),
            "max_score_difference": difference, "tokens_read_off": read["off"], "tokens_read_on": read["on"],
            "same_best_chain": best_per_group(outputs["off"], size) == best_per_group(outputs["on"], size),
            "seconds": times}
        results[name]["speedup"] = results[name]["chains_per_s_on"] / results[name]["chains_per_s_off"]
        print(f"{name}: {results[name]['chains_per_s_off']:.2f} -> {results[name]['chains_per_s_on']:.2f} chains/s "
              f"({results[name]['speedup']:.2f}x), max score difference {difference:.1e}, "
              f"same best chain: {results[name]['same_best_chain']}", flush=True)
    calls = beam_rounds(rows, args.beam_problems)
    times, outputs, read = off_and_on(scorer, lambda: [scorer.score_many(call) for call in calls], tokens,
                                      args.repeats)
    difference = max(abs(a - b) for x, y in zip(outputs["off"], outputs["on"]) for u, v in zip(x, y)
                     for a, b in zip(u, v))
    results["beam_8_rounds"] = {
        "problems": args.beam_problems, "chains_scored": sum(map(len, calls)),
        "prm_seconds_off": statistics.median(times["off"]), "prm_seconds_on": statistics.median(times["on"]),
        "tokens_read_off": read["off"], "tokens_read_on": read["on"], "max_score_difference": difference,
        "same_choices": all(best_per_group(x, 4) == best_per_group(y, 4)
                            for x, y in zip(outputs["off"], outputs["on"])),
        "seconds": times}
    beam = results["beam_8_rounds"]
    beam["speedup"] = beam["prm_seconds_off"] / beam["prm_seconds_on"]
    print(f"beam_8_rounds: PRM {beam['prm_seconds_off']:.1f} -> {beam['prm_seconds_on']:.1f} s "
          f"({beam['speedup']:.2f}x), tokens {read['off']} -> {read['on']}, max score difference {difference:.1e}, "
          f"same choices: {beam['same_choices']}", flush=True)
    out = {"command": "python bench/prefix_reuse.py " + " ".join(sys.argv[1:]), "machine": f"{os.cpu_count()} cores",
           "torch_threads": torch.get_num_threads(), "peak_rss_mib": peak_rss_mib(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
