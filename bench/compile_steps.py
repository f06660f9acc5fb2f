"""Optimizer-step times of one prmkit LoRA run, eager and compiled (`training.torch_compile`), each in its own
process: the first step (which waits for the compilation) apart from the median of the rest, and the peak RSS.

    python bench/compile_steps.py --rows ROWS.jsonl --steps 20 --repeats 3 --out bench/results/compile_steps.json

Modes: `eager`; `regional`, what `training.torch_compile` does (the decoder layer compiled once and reused for every
layer); `whole`, the whole model compiled as one graph (transformers' other setting, for comparison). Each compiled
mode runs twice with its own kernel cache: emptied first (a user's first compiled run), then as that run left it.
The modes are interleaved over `--repeats` rounds (3 by default, a fresh cache each round); each figure is the
median over rounds with every round kept, and each process measures the machine's sgemm rate before it trains.
SmolLM2-135M, LoRA r16 all-linear, fully random batches of 4, max_length 256, separator "\\n", as bench/peers.py
trains it (the learning rate is prmkit's default, which does not change a step's time). ROWS is stepwise rows, e.g.
the PRM800K rows that bench/peers.py writes (../shared/peers/prm800k_rows.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def run_one(mode: str, rows: str, steps: int, out_dir: str) -> dict:
    """Inside the child process: train `steps` optimizer steps and time each one."""
    from prmkit.backbones import resolve_base
    from prmkit.config import load_config
    from prmkit.training import trainer

    times: list[float] = []
    last = [time.perf_counter()]
    step_end = trainer.FinalStepFlow.on_step_end

    def timed_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        return step_end(self, args, state, control, **kwargs)

    def train_begin(self, args, state, control, **kwargs):  # the first step is timed from here, not from loading
        last[0] = time.perf_counter()

    trainer.FinalStepFlow.on_step_end = timed_step_end
    trainer.FinalStepFlow.on_train_begin = train_begin
    if mode == "whole":
        accelerator_args = trainer.PRMTrainer._build_accelerator_args

        def whole_model(self, **kwargs):
            args = accelerator_args(self, **kwargs)
            args["dynamo_plugin"].use_regional_compilation = False
            return args

        trainer.PRMTrainer._build_accelerator_args = whole_model
    config = load_config(None, [
        f"model.base={resolve_base('smollm2-135m')}", f"data.train={rows}", "data.max_length=256", "data.separator=\n",
        "data.val_fraction=0", "training.batch_size=4", f"training.max_steps={steps}", f"output_dir={out_dir}",
        f"run_name={mode}", "training.save_steps=100000", f"training.torch_compile={mode != 'eager'}"])
    sys.path.insert(0, str(ROOT / "bench"))
    from common import sgemm_gflops

    sgemm = round(sgemm_gflops(), 1)
    trainer.train(config, overwrite=True)
    return {"sgemm_gflops": sgemm, "first_step_s": round(times[0], 2),
            "median_step_s": round(statistics.median(times[1:]), 3), "steps_s": [round(t, 3) for t in times],
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--modes", default="eager,regional,whole")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every mode (medians kept)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "compile_steps.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prmkit-compile-steps-"))
    if args.child:
        print(json.dumps(run_one(args.child, args.rows, args.steps, str(work))))
        shutil.rmtree(work, ignore_errors=True)
        return

    rounds: dict[str, list[dict]] = {}
    for repeat in range(args.repeats):
        for mode in args.modes.split(","):
            cache = work / f"inductor-{mode}-{repeat}"
            for cache_state in ("cold", "warm") if mode != "eager" else ("-",):
                name = mode if mode == "eager" else f"{mode}-{cache_state}"
                done = subprocess.run([sys.executable, __file__, "--rows", args.rows, "--steps", str(args.steps),
                                       "--child", mode], env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)},
                                      capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
                rounds.setdefault(name, []).append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(name, {k: v for k, v in rounds[name][-1].items() if k != "steps_s"}, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    results = {name: {key: statistics.median(r[key] for r in found) for key in
                      ("first_step_s", "median_step_s", "peak_rss_gib", "sgemm_gflops")} | {"rounds": found}
               for name, found in rounds.items()}
    eager = results.get("eager", {}).get("median_step_s")
    for found in results.values():
        if eager:
            found["step_speedup_vs_eager"] = round(eager / found["median_step_s"], 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python bench/compile_steps.py " + " ".join(sys.argv[1:]),
                                    "machine": f"{os.cpu_count()} cores", "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
