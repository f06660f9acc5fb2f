"""AdamW variants on a full fine-tune of SmolLM2-135M: optimizer-step time and the run's peak RSS.

    python bench/optimizer_step.py --repeats 3 --out bench/results/optimizer.json

Each variant runs in a fresh process (so peak RSS is its own), the variants interleaved over `--repeats` rounds
(3 by default; medians with min-max, and the machine's sgemm rate measured in each process): 3 training steps
of a 4 x 256-token batch, one thread, the same model and batch; `foreach` is transformers' `adamw_torch` (lists
of tensors, full-size temporaries), `fused` is `adamw_torch_fused` (one kernel, no temporaries), `single` is the
per-tensor loop.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("foreach", "fused", "single")


def one(kind: str) -> dict:
    import torch
    from common import backbone_path, sgemm_gflops

    from prmkit.model import load_token_classifier

    torch.set_num_threads(1)
    sgemm = sgemm_gflops()
    torch.manual_seed(0)
    model = load_token_classifier(backbone_path())
    flags = {"fused": True} if kind == "fused" else {"foreach": kind == "foreach"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, **flags)
    ids = torch.randint(100, 1000, (4, 256))
    start, in_step = time.perf_counter(), 0.0
    for _ in range(3):
        model(input_ids=ids).logits.float().pow(2).mean().backward()
        t = time.perf_counter()
        optimizer.step()
        in_step += time.perf_counter() - t
        optimizer.zero_grad(set_to_none=True)
    return {"variant": kind, "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3),
            "optimizer_step_s": round(in_step / 3, 3), "wall_s": round(time.perf_counter() - start, 1),
            "sgemm_gflops": round(sgemm, 1)}


def summarise(kind: str, runs: list[dict]) -> dict:
    """One variant's rounds: medians, the optimizer step's min-max, and every round as measured."""
    steps = [r["optimizer_step_s"] for r in runs]
    return {"variant": kind, "peak_rss_gb": statistics.median(r["peak_rss_gb"] for r in runs),
            "optimizer_step_s": statistics.median(steps), "optimizer_step_s_min": min(steps),
            "optimizer_step_s_max": max(steps), "sgemm_gflops": statistics.median(r["sgemm_gflops"] for r in runs),
            "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every variant")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "optimizer.json")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    load = Path("/proc/loadavg").read_text().split()[:2]
    runs: dict[str, list[dict]] = {kind: [] for kind in VARIANTS}
    for _ in range(args.repeats):
        for kind in VARIANTS:
            done = subprocess.run([sys.executable, __file__, "--one", kind], capture_output=True, text=True, check=True)
            runs[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
    results = [summarise(kind, rounds) for kind, rounds in runs.items()]
    args.out.write_text(json.dumps({"results": results, "load_average": load, "command": " ".join(sys.argv)},
                                   indent=2) + "\n")
    for r in results:
        print({key: value for key, value in r.items() if key != "runs"})


if __name__ == "__main__":
    main()
