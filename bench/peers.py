"""prmkit beside the systems it replaces, each running its own code in its own environment on the same rows.

    python bench/peers.py --peers-dir PEERS --harness ../shared/peers --rows 240 [--repeats 2] [--eval-rows 300]

PEERS holds two virtual environments, made as ../shared/peers/README.md says: `trl/` (TRL 1.13.0, whose
experimental PRMTrainer is run by the harness's trl_prm.py) and `soup/` (soup-cli 0.75.2, the fine-tuning CLI whose
PRM path prmkit replaces). Every system trains on the same PRM800K phase-1 rows (the harness's prm800k_rows.py),
max_length 256, batch 4, one epoch, on the CPU, one run at a time, the systems interleaved (A B C A B C ...) over
`--repeats` rounds (3 by default), so a slow spell of the shared machine hits every system alike:

    trl LoRA       r16 all-linear, lr 1e-4, dropout 0 (peft's default, which TRL keeps)
    prmkit LoRA    the same LoRA, lr and separator ("\\n"), prmkit's defaults otherwise; "pk-lora-random" with
                   training.group_by_length=false written out (fully random batches, as TRL draws them);
                   "pk-lora-grouped" / "pk-full-grouped" with length-grouped batches (training.group_by_length=true)
    soup full      full fine-tune, lr 1e-5 (it computes full-vocabulary logits)
    prmkit full    full fine-tune, lr 1e-5
    *-compiled     pk-lora-random / pk-full with training.torch_compile=true and an empty kernel cache (a user's
                   first compiled run: the compilation is in the wall time); *-compiled-warm with a cache that an
                   untimed two-step run of the same settings filled (every later run); pk-lora-packed-compiled-warm
                   adds training.packing=true (the same batches without padding)

Each run is timed whole (`/usr/bin/time`: wall seconds and peak RSS), model loading and saving included, as a user
would wait for it, with the machine's fp32 sgemm rate measured just before it (a run on a slower spell shows there).
Each system's figure is the median of its rounds with the min-max beside it; a comparison between two systems is
the ratio of their medians, with the range of the per-round ratios (the two runs of one round ran back to back) as
its spread. With --eval-rows, each trained PRM then scores held-out phase-1 test rows with its own
tokenization and reports the AUROC of the rated last step: TRL and soup through the harness's peer_eval.py, prmkit
through PRMScorer. Results go to bench/results/peers.json and are printed as a table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from prmkit.backbones import resolve_base  # noqa: E402
from prmkit.evaluation.metrics import auroc  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from common import sgemm_gflops  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "prm800k_phase1_stepwise"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers-dir", required=True, type=Path)
    parser.add_argument("--harness", type=Path, default=ROOT.parent / "shared" / "peers")
    parser.add_argument("--rows", type=int, default=240)
    parser.add_argument("--eval-rows", type=int, default=0, help="held-out rows to score (0: timing only)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every system (median kept)")
    parser.add_argument("--systems", default="trl,pk-lora,pk-lora-random,soup,pk-full")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prmkit-peers"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peers.json")
    args = parser.parse_args()

    base = resolve_base("smollm2-135m")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    train_rows = work / "train.jsonl"
    run([sys.executable, str(args.harness / "prm800k_rows.py"),
         str(DATA / "phase1_train_plus.stepwise-critic.parquet"), str(train_rows), str(args.rows), "0"])
    if args.eval_rows:
        run([sys.executable, str(args.harness / "prm800k_rows.py"), str(DATA / "phase1_test.stepwise-critic.parquet"),
             str(work / "eval.jsonl"), str(args.eval_rows), "1"])

    commands = peer_commands(args, work, base, train_rows, max_length=256)
    systems = args.systems.split(",")
    results: dict[str, list[dict]] = {name: [] for name in systems}
    for repeat in range(args.repeats):
        for name in systems:
            out = work / f"{name}-{repeat}"
            sgemm = round(sgemm_gflops(), 1)
            measured = timed(commands[name](out), work / f"{name}-{repeat}")
            measured["rows_per_s"] = round(args.rows / measured["wall_s"], 3)
            measured["sgemm_gflops"] = sgemm
            results[name].append(measured)
            print(f"{name} #{repeat}: {measured}", flush=True)
    summary = {name: summarise(runs) for name, runs in results.items()}
    if args.eval_rows:
        for name in systems:
            summary[name]["heldout_last_step_auroc"] = evaluate(name, work / f"{name}-0", args, base,
                                                                work / "eval.jsonl")
    ratios = {}
    for ours, peer in (("pk-lora", "trl"), ("pk-lora-random", "trl"), ("pk-lora-grouped", "trl"),
                       ("pk-full-grouped", "soup"), ("pk-lora-compiled", "trl"),
                       ("pk-lora-compiled-warm", "trl"), ("pk-lora-packed-compiled-warm", "trl"), ("pk-full", "soup"),
                       ("pk-full-compiled", "soup"), ("pk-full-compiled-warm", "soup")):
        if ours in summary and peer in summary:
            ratios[f"{ours} / {peer}"] = compare(summary[ours], summary[peer])
    payload = {"rows": args.rows, "max_length": 256, "batch_size": 4, "repeats": args.repeats, "systems": summary,
               "ratios": ratios, "command": " ".join(sys.argv)}
    args.out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(table(payload))


LORA = ("lora.r=16", "lora.alpha=32", "training.lr=1e-4")
LORA_RANDOM = (*LORA, "training.group_by_length=false")
FULL = ("model.finetune=full", "training.lr=1e-5")
GROUPED = "training.group_by_length=true"


def summarise(runs: list[dict]) -> dict:
    """One system's rounds: medians, the min-max of rows/s, and every round as measured."""
    rates = [r["rows_per_s"] for r in runs]
    return {"wall_s": statistics.median(r["wall_s"] for r in runs), "rows_per_s": statistics.median(rates),
            "rows_per_s_min": min(rates), "rows_per_s_max": max(rates),
            "peak_rss_gb": statistics.median(r["peak_rss_gb"] for r in runs),
            "sgemm_gflops": statistics.median(r["sgemm_gflops"] for r in runs), "runs": runs}


def compare(ours: dict, peer: dict) -> dict:
    """Ratio of the medians, and the range of the per-round ratios (each round's two runs ran back to back)."""
    per_round = [round(a["rows_per_s"] / b["rows_per_s"], 3) for a, b in zip(ours["runs"], peer["runs"])]
    return {"rows_per_s": round(ours["rows_per_s"] / peer["rows_per_s"], 3), "rows_per_s_per_round": per_round,
            "rows_per_s_min": min(per_round), "rows_per_s_max": max(per_round),
            "peak_rss": round(ours["peak_rss_gb"] / peer["peak_rss_gb"], 3)}


def peer_commands(args, work: Path, base: str, train_rows: Path, *, max_length: int) -> dict:
    """The command line of each system on TRAIN_ROWS, by name, given the folder it writes to."""
    return {
        "trl": lambda out: [str(args.peers_dir / "trl" / "bin" / "python"), str(args.harness / "trl_prm.py"), base,
                            str(train_rows), str(out), "lora", str(max_length)],
        "pk-lora": lambda out: prmkit_train(work, base, train_rows, out, *LORA, max_length=max_length),
        "pk-lora-random": lambda out: prmkit_train(work, base, train_rows, out, *LORA_RANDOM, max_length=max_length),
        "soup": lambda out: soup_train(args, work, base, train_rows, out, max_length=max_length),
        "pk-full": lambda out: prmkit_train(work, base, train_rows, out, *FULL, max_length=max_length),
        "pk-lora-grouped": lambda out: prmkit_train(work, base, train_rows, out, *LORA, GROUPED,
                                                    max_length=max_length),
        "pk-full-grouped": lambda out: prmkit_train(work, base, train_rows, out, *FULL, GROUPED,
                                                    max_length=max_length),
        # compiled: a fresh kernel cache per run (a user's first compiled run), or one filled by an earlier run of
        # the same settings (every later run)
        "pk-lora-compiled": lambda out: cold_cache(work / f"inductor-{out.name}", prmkit_train(
            work, base, train_rows, out, *LORA_RANDOM, "training.torch_compile=true", max_length=max_length)),
        "pk-lora-compiled-warm": lambda out: warm_cache(work, "lora", prmkit_train(
            work, base, train_rows, out, *LORA_RANDOM, "training.torch_compile=true", max_length=max_length)),
        # the same batches without padding (training.packing: the same loss and gradients), compiled, warm cache
        "pk-lora-packed-compiled-warm": lambda out: warm_cache(work, "lora-packed", prmkit_train(
            work, base, train_rows, out, *LORA_RANDOM, "training.packing=true", "training.torch_compile=true",
            max_length=max_length)),
        "pk-full-compiled": lambda out: cold_cache(work / f"inductor-{out.name}", prmkit_train(
            work, base, train_rows, out, *FULL, "training.torch_compile=true", max_length=max_length)),
        "pk-full-compiled-warm": lambda out: warm_cache(work, "full", prmkit_train(
            work, base, train_rows, out, *FULL, "training.torch_compile=true", max_length=max_length)),
    }


def with_cache(cache: Path, command: list[str]) -> list[str]:
    """`command` with torch.compile's kernel cache in `cache`."""
    return ["/usr/bin/env", f"TORCHINDUCTOR_CACHE_DIR={cache}", *command]


def cold_cache(cache: Path, command: list[str]) -> list[str]:
    """`command` with an empty kernel cache: a user's first compiled run."""
    shutil.rmtree(cache, ignore_errors=True)
    return with_cache(cache, command)


def warm_cache(work: Path, name: str, command: list[str]) -> list[str]:
    """`command` with a kernel cache filled by a short run of the same settings (once, untimed)."""
    cache = work / f"inductor-warm-{name}"
    if not cache.is_dir():
        warm_up = [arg for arg in command if not arg.startswith("run_name=") and arg != "--overwrite"] + [
            "run_name=warm-up", "training.max_steps=2", "--overwrite"]
        run(with_cache(cache, warm_up))
    return with_cache(cache, command)


def prmkit_train(work: Path, base: str, train_rows: Path, out: Path, *overrides: str,
                 max_length: int = 256) -> list[str]:
    config = work / "pk.yaml"
    config.write_text(json.dumps({"model": {"base": base}, "data": {"train": str(train_rows), "max_length": max_length,
                                                                    "separator": "\n"},
                                  "training": {"batch_size": 4, "epochs": 1, "save_steps": 100000}}))
    return [str(Path(sys.executable).parent / "prmkit"), "train", str(config), f"output_dir={out.parent}",
            f"run_name={out.name}", *overrides, "--overwrite"]


def soup_train(args, work: Path, base: str, train_rows: Path, out: Path, max_length: int = 256) -> list[str]:
    text = (args.harness / "soup_prm.yaml").read_text(encoding="utf-8")
    config = work / f"soup-{out.name}.yaml"
    config.write_text(text.replace("MODEL_DIR", base).replace("./train200.jsonl", str(train_rows))
                      .replace("./out", str(out)).replace("max_length: 256", f"max_length: {max_length}"),
                      encoding="utf-8")
    return [str(args.peers_dir / "soup" / "bin" / "soup"), "train", "-c", str(config), "-n", "run", "-y"]


def timed(command: list[str], log: Path) -> dict:
    """Wall time and peak RSS of one whole run, as /usr/bin/time measures them."""
    time_file = log.with_suffix(".time")
    with open(log.with_suffix(".log"), "w") as handle:
        done = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(time_file), *command], stdout=handle,
                              stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{command[0]} failed ({done.returncode}); see {log.with_suffix('.log')}")
    wall, rss_kb = time_file.read_text().split()[-2:]
    return {"wall_s": float(wall), "peak_rss_gb": round(int(rss_kb) / 1024 ** 2, 3)}


def evaluate(name: str, run_dir: Path, args, base: str, eval_rows: Path) -> float | None:
    """Last-step AUROC on held-out rows, each system reading chains with its own tokenization."""
    if name.startswith("pk-"):
        from prmkit import PRMScorer

        rows = [json.loads(line) for line in eval_rows.read_text().splitlines()]
        scorer = PRMScorer.from_pretrained(run_dir, max_length=256, device="cpu")
        scores, labels = [], []
        for row, steps in zip(rows, scorer.score_many([(r["prompt"], r["completions"]) for r in rows])):
            if steps and steps[-1] is not None:  # the rated last step fits in 256 tokens
                scores.append(steps[-1])
                labels.append(float(row["labels"][-1]))
        return round(auroc(scores, labels), 4)
    venv = args.peers_dir / ("trl" if name == "trl" else "soup") / "bin" / "python"
    if name == "soup":
        run_dir = next(run_dir.rglob("model.safetensors")).parent
    line = subprocess.run([str(venv), str(args.harness / "peer_eval.py"), name, str(run_dir), base, str(eval_rows),
                           "256"], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    return json.loads(line)["auroc"]


def run(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def table(payload: dict) -> str:
    lines = ["| system | rows/s, median (min-max) | peak RSS (GB) | wall (s) | sgemm GFLOP/s | held-out AUROC |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, s in payload["systems"].items():
        lines.append(f"| {name} | {s['rows_per_s']:.3f} ({s['rows_per_s_min']:.3f}-{s['rows_per_s_max']:.3f}) | "
                     f"{s['peak_rss_gb']:.2f} | {s['wall_s']:.1f} | {s['sgemm_gflops']:.0f} | "
                     f"{s.get('heldout_last_step_auroc', '-')} |")
    for pair, r in payload["ratios"].items():
        lines.append(f"\n{pair}: {r['rows_per_s']:.2f}x rows/s (rounds {r['rows_per_s_min']:.2f}-"
                     f"{r['rows_per_s_max']:.2f}x), {r['peak_rss']:.2f}x peak RSS")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
