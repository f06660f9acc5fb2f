"""Shared-prefix scoring and keys/values kept across a search's rounds.

Groups: a GRPO-like group (8 completions of one prompt) and a best-of-16 group, GSM8K questions as prompts and
GSM8K gold solutions (of other questions, cut into steps at their lines) as completions, scored by SmolLM2-135M as a
PRM with prefix reuse off and on, alternating in one process; and the control, the same chains each with a prompt
of its own, where nothing can be shared. Scores must agree to 1e-5 and every group must pick the same best chain.

Search: prmkit's own beam search (16 beams, beam width 4, 8 rounds) and DVTS (4 subtrees of width 4, 8 rounds) over
GSM8K questions, with a scripted policy whose steps are lines of GSM8K gold solutions (picked by a hash of the
problem, the beam and the sample, so every variant gets the same samples for the same beams; a beam sometimes
states an answer from its fourth step on, and ends). Each search runs in four variants, alternating: a full pass of
every chain, shared prefixes within each round's call (`reuse_prefix`, no caches kept), keys and values kept across
rounds (`PRMScorer.kept_caches`, the search's default), and kept within a tight budget (`--tight-mb`). Reported: PRM
seconds (inside `score_many`), tokens the model read (padding included), the kept caches' peak MiB, and whether
every variant chose the same solutions with scores within 1e-5.

    python bench/prefix_reuse.py --threads 1 --out bench/results/prefix_reuse.json

Reads ../shared/data/gsm8k/test.jsonl (or --gsm8k).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from common import peak_rss_mib, sgemm_gflops, untrained_scorer  # noqa: E402

from prmkit.generation.base import Sample  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
SEP = "\x1f"  # between the problem and the prefix in a LinePolicy prompt
STEP = "\n\n"  # the search's delimiter


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


class LinePolicy:
    """A scripted policy (prmkit's Generator contract) whose steps are lines of GSM8K solutions: the k-th sample of
    a (problem, prefix) in a call is a line picked by a hash of the three, so equal beams get equal samples in every
    variant. From the fourth step on, one sample in six states an answer, which ends its beam."""

    name = "bench:gsm8k-lines"
    options = None

    def __init__(self, lines: list[str]):
        self.lines = lines

    def prompt(self, problem: str, prefix: str = "") -> str:
        return f"{problem}{SEP}{prefix}"

    def generate(self, prompts, n=1, *, stop=(), max_new_tokens=None, temperature=None, seed=None):
        seen: Counter = Counter()
        out = []
        for prompt in prompts:
            row = []
            for _ in range(n):
                k = seen[prompt]
                seen[prompt] += 1
                pick = zlib.crc32(f"{prompt}|{k}".encode())
                text = self.lines[pick % len(self.lines)]
                if prompt.split(SEP, 1)[1].count(STEP) >= 3 and pick % 6 == 0:
                    text += f" The answer is {pick % 100}."
                ended = "stop" if stop else "eos"
                row.append(Sample(text, len(text.split()) + 1, ended, stop[0] if stop else None))
            out.append(row)
        return out

    def close(self) -> None:
        pass


class TimedScorer:
    """The scorer as a search sees it, with the seconds spent in `score_many`; `kept_caches` only when `keep`, so
    the search keeps caches across rounds or does not (a scorer without it scores every round afresh)."""

    def __init__(self, scorer, keep: bool):
        self.scorer, self.seconds, self.outputs = scorer, 0.0, []
        if keep:
            self.kept_caches = scorer.kept_caches

    def score_many(self, chains):
        start = time.perf_counter()
        scores = self.scorer.score_many(chains)
        self.seconds += time.perf_counter() - start
        self.outputs.append((list(chains), scores))
        return scores


SEARCH_VARIANTS = ("full", "within_call", "kept", "kept_tight")


def search_variant(scorer, method: str, problems: list[str], lines: list[str], variant: str, tight_mb: float,
                   tokens: list) -> dict:
    """One search in one variant: its results, PRM seconds, tokens read, the score_many calls and the kept peak."""
    from prmkit.search.options import SearchOptions
    from prmkit.search.tree import beam_search, dvts

    scorer.reuse_prefix = variant != "full"
    timed = TimedScorer(scorer, keep=variant.startswith("kept"))
    options = SearchOptions(method=method, n=16, beam_width=4, max_rounds=8, problems_per_batch=len(problems))
    search = beam_search if method == "beam" else dvts
    budget = {"max_mb": tight_mb} if variant == "kept_tight" else {}  # else the search's default
    # held around the search (which then uses this store) only to read its peak
    keeping = scorer.kept_caches(**budget) if variant.startswith("kept") else contextlib.nullcontext()
    tokens.clear()
    with keeping as store:
        results = search(LinePolicy(lines), timed, problems, options, seed=0)
    scorer.reuse_prefix = True
    return {"results": results, "seconds": timed.seconds, "tokens": sum(tokens), "calls": timed.outputs,
            "peak_mib": store.peak_bytes / 2 ** 20 if store is not None else 0.0,
            "dropped": store.dropped if store is not None else 0}


def compare_searches(runs: dict) -> tuple[bool, float | None]:
    """Whether every variant chose the same solutions (and candidates), and the largest difference between the
    variants' scores of the same chains (None where their calls differ)."""
    reference = runs["full"]
    same = all([c.text for r in run["results"] for c in r.candidates] ==
               [c.text for r in reference["results"] for c in r.candidates] for run in runs.values())
    difference = 0.0
    for run in runs.values():
        for (chains, scores), (want_chains, want) in zip(run["calls"], reference["calls"]):
            if chains != want_chains:
                return same, None
            difference = max([difference] + [abs(a - b) for x, y in zip(scores, want) for a, b in zip(x, y)
                                              if a is not None and b is not None])
    return same, difference


def measure_search(scorer, method: str, problems: list[str], lines: list[str], repeats: int, tight_mb: float,
                   tokens: list) -> dict:
    seconds: dict = {v: [] for v in SEARCH_VARIANTS}
    runs = {}
    for _ in range(repeats):
        for variant in SEARCH_VARIANTS:
            runs[variant] = search_variant(scorer, method, problems, lines, variant, tight_mb, tokens)
            seconds[variant].append(runs[variant]["seconds"])
    same, difference = compare_searches(runs)
    medians = {v: statistics.median(seconds[v]) for v in SEARCH_VARIANTS}
    return {
        "problems": len(problems), "calls": len(runs["full"]["calls"]),
        "chains_scored": sum(len(chains) for chains, _ in runs["full"]["calls"]),
        "prm_seconds": medians, "speedup_vs_full": {v: medians["full"] / medians[v] for v in SEARCH_VARIANTS},
        "tokens_read": {v: runs[v]["tokens"] for v in SEARCH_VARIANTS},
        "kept_peak_mib": {v: runs[v]["peak_mib"] for v in ("kept", "kept_tight")},
        "kept_dropped": {v: runs[v]["dropped"] for v in ("kept", "kept_tight")},
        "tight_mb": tight_mb, "same_choices": same, "max_score_difference": difference, "seconds": seconds}


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
    parser.add_argument("--search-problems", type=int, default=1, help="problems searched together")
    parser.add_argument("--tight-mb", type=float, default=256, help="the kept caches' budget in the tight variant")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--skip-groups", action="store_true", help="measure the searches only")
    parser.add_argument("--skip-searches", action="store_true", help="measure the groups only")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "prefix_reuse.json"))
    args = parser.parse_args()
    if not Path(args.gsm8k).is_file():
        sys.exit(f"{args.gsm8k} is missing: this benchmark reads GSM8K's test questions (--gsm8k PATH)")

    if args.threads:
        torch.set_num_threads(args.threads)
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
    for name, (size, chains) in ({} if args.skip_groups else shapes).items():
        sgemm_before = sgemm_gflops()  # the machine's matmul rate around each measurement: drift shows there
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
            "seconds": times, "sgemm_gflops": [sgemm_before, sgemm_gflops()]}
        results[name]["speedup"] = results[name]["chains_per_s_on"] / results[name]["chains_per_s_off"]
        print(f"{name}: {results[name]['chains_per_s_off']:.2f} -> {results[name]['chains_per_s_on']:.2f} chains/s "
              f"({results[name]['speedup']:.2f}x), max score difference {difference:.1e}, "
              f"same best chain: {results[name]['same_best_chain']}", flush=True)
    lines = [step for row in rows for step in row["steps"]]
    problems = [row["question"] for row in rows[:args.search_problems]]
    for method in () if args.skip_searches else ("beam", "dvts"):
        name = f"{method}_search_8_rounds"
        sgemm_before = sgemm_gflops()
        results[name] = found = measure_search(scorer, method, problems, lines, args.repeats, args.tight_mb, tokens)
        found["sgemm_gflops"] = [sgemm_before, sgemm_gflops()]
        print(f"{name}: PRM seconds " + ", ".join(f"{v} {s:.1f}" for v, s in found["prm_seconds"].items()) +
              f"; tokens {found['tokens_read']}; kept peak {found['kept_peak_mib']} MiB; same choices "
              f"{found['same_choices']}, max score difference {found['max_score_difference']}", flush=True)
    out = {"command": "python bench/prefix_reuse.py " + " ".join(sys.argv[1:]), "machine": f"{os.cpu_count()} cores",
           "torch_threads": torch.get_num_threads(), "peak_rss_mib": peak_rss_mib(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
