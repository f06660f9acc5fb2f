"""The lifecycle's labelling stage (`prmkit label`, the benchmark policy, transformers backend) in one process and
in two shards under torchrun on the same machine, interleaved rounds; the merged shards must equal the one-process
file byte for byte. On 2 CPU cores two processes share the cores a single process already uses (torch's threads),
so this measures what sharding costs or saves here; on a machine with one GPU per shard each shard has a device of
its own (an expectation, not measured here).

    python bench/label_shards.py --problems 16 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from common import sgemm_gflops  # noqa: E402
from lifecycle.policy import PolicyRecipe, build_policy  # noqa: E402
from lifecycle.problems import disjoint_splits, problem_rows  # noqa: E402
from prmkit.files import write_json_atomic, write_jsonl  # noqa: E402

LABEL = ("--method", "mc", "--k", "4", "--solutions", "2", "--max-new-tokens", "128", "--problems-per-batch", "4",
         "--backend", "transformers")


def label(command: list[str], env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "label_shards.json"))
    args = parser.parse_args(argv)
    policy = str(build_policy(PolicyRecipe()))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    rounds = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        data = work / "problems.jsonl"
        write_jsonl(problem_rows(disjoint_splits({"sft": PolicyRecipe().chains, "label": args.problems})["label"]),
                    data)
        for index in range(args.rounds):
            one, sharded = work / f"one-{index}.jsonl", work / f"sharded-{index}.jsonl"
            runs = {"one_process": [sys.executable, "-m", "prmkit", "label", str(data), str(one), "--policy", policy,
                                    *LABEL],
                    "two_shards": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m",
                                   "prmkit", "label", str(data), str(sharded), "--policy", policy, *LABEL]}
            order = list(runs) if index % 2 == 0 else list(runs)[::-1]
            entry = {"order": order, "sgemm_gflops": round(sgemm_gflops(), 1)}
            for name in order:
                entry[f"{name}_s"] = round(label(runs[name], env), 1)
                print(name, entry[f"{name}_s"], flush=True)
            subprocess.run([sys.executable, "-m", "prmkit", "merge", str(sharded)], check=True, capture_output=True)
            entry["identical"] = sharded.read_bytes() == one.read_bytes()
            rounds.append(entry)
    medians = {name: statistics.median(r[f"{name}_s"] for r in rounds) for name in ("one_process", "two_shards")}
    result = {"command": "python bench/label_shards.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "settings": vars(args) | {"label": LABEL},
              "rounds": rounds, "median_s": medians,
              "two_shards_over_one": round(medians["two_shards"] / medians["one_process"], 3),
              "per_round": [round(r["two_shards_s"] / r["one_process_s"], 3) for r in rounds],
              "identical": all(r["identical"] for r in rounds)}
    write_json_atomic(args.out, result)
    print(result["median_s"], result["two_shards_over_one"], result["identical"])
    return result


if __name__ == "__main__":
    main()
