"""The RL runs of bench/rl_control.py across seeds: one seed's paired interval covers the problems, not the run, so a
reward that wins on one seed may lose on the next. This reads the judged files a work folder already holds (nothing
trains or generates) and reports, per split, each seed's greedy accuracy and, over the seeds together, each problem's
accuracy averaged over the seeds, against the starting policy and against the control, with the paired bootstrap
over problems.

    python bench/rl_seeds.py --work rl-work --runs lr-1e-05,lr-1e-05-sum-exact --seeds 0,1 --step 16

The first run named is the control. A split is pooled only over runs judged there for every seed: bench/rl_control.py
reads the held-out problems only for a run that beat the starting policy on validation, and a seed whose held-out
file is missing is reported as unread rather than left out, which would keep only the seeds that did well.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle import analysis  # noqa: E402
from rl_control import judged_file, seed_suffix  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic  # noqa: E402

SPLITS = ("validation", "held-out")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="bench/rl_control.py's work folder")
    parser.add_argument("--runs", required=True,
                        help="run names as bench/rl_control.py names them at seed 0, the control first")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--step", type=int, default=16, help="the judged step compared")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "rl_seeds.json"))
    args = parser.parse_args(argv)
    args.runs = [name.strip() for name in args.runs.split(",") if name.strip()]
    args.seeds = [int(seed) for seed in args.seeds.split(",")]
    if len(args.runs) < 1 or not args.seeds:
        parser.error("--runs and --seeds each need at least one entry")
    return args


def judged(path: Path, prompts: list[str], before: Path) -> list[int] | None:
    """Per problem, 1 if right, from a judged file on exactly `prompts` (those of `before`); None when there is no
    file."""
    if not path.is_file():
        return None
    rows = read_jsonl(path)
    if [row["prompt"] for row in rows] != prompts:
        raise SystemExit(f"{path}: judged on other problems than {before}; every run compared must come from one "
                         "work folder and one --validation/--held-out")
    return [int(row["correct"]) for row in rows]


def seed_mean(per_seed: list[list[int]]) -> list[float]:
    """Each problem's accuracy averaged over the seeds: the unit the bootstrap resamples stays the problem."""
    return [sum(values) / len(values) for values in zip(*per_seed)]


def split_summary(work: Path, split: str, runs: list[str], seeds: list[int], step: int) -> dict | None:
    before_path = judged_file(work, split)  # the starting policy, judged once for all runs and seeds
    if not before_path.is_file():
        return None
    prompts = [row["prompt"] for row in read_jsonl(before_path)]
    before = judged(before_path, prompts, before_path)
    out = {"before": analysis.bootstrap_accuracy(before), "runs": {}}
    pooled = {}
    for run in runs:
        per_seed = {seed: judged(judged_file(work, split, run + seed_suffix(seed), step), prompts, before_path)
                    for seed in seeds}
        entry = {"seeds": {str(seed): {"after": analysis.bootstrap_accuracy(correct),
                                       "after - before": analysis.paired_bootstrap(correct, before)}
                           for seed, correct in per_seed.items() if correct is not None},
                 "unread_seeds": [seed for seed, correct in per_seed.items() if correct is None]}
        if not entry["unread_seeds"]:
            pooled[run] = seed_mean(list(per_seed.values()))
            entry["over seeds"] = {"after": analysis.bootstrap_accuracy(pooled[run]),
                                   "after - before": analysis.paired_bootstrap(pooled[run], before)}
            if run != runs[0] and runs[0] in pooled:
                entry["over seeds"]["after - control"] = analysis.paired_bootstrap(pooled[run], pooled[runs[0]])
        out["runs"][run] = entry
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work)
    result = {
        "command": "python bench/rl_seeds.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "control": args.runs[0], "seeds": args.seeds, "step": args.step,
        "splits": {split: summary for split in SPLITS
                   if (summary := split_summary(work, split, args.runs, args.seeds, args.step)) is not None},
    }
    if not result["splits"]:
        raise SystemExit(f"{work}: no validation-before.jsonl; run bench/rl_control.py with --work {work} first")
    write_json_atomic(Path(args.out), result)
    for split, summary in result["splits"].items():
        print(f"{split}: before {summary['before']['accuracy']:.3f}")
        for run, entry in summary["runs"].items():
            seeds = ", ".join(f"seed {seed} {e['after']['accuracy']:.3f}" for seed, e in entry["seeds"].items())
            pooled = entry.get("over seeds")
            line = f"  {run}: {seeds}"
            if pooled:
                line += f"; over seeds {pooled['after']['accuracy']:.3f}"
                for key in ("after - before", "after - control"):
                    if key in pooled:
                        d = pooled[key]
                        line += f", {key} {d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
            if entry["unread_seeds"]:
                line += f" (unread for seeds {entry['unread_seeds']})"
            print(line)
    return result


if __name__ == "__main__":
    main()
