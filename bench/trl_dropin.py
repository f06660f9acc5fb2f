"""TRL's PRM example trained by TRL 1.13.0's PRMTrainer and by prmkit's drop-in (`prmkit.trl`), the same script
but for its import line (bench/trl_dropin_run.py), on the same PRM800K phase-1 rows, the same LoRA and settings,
in the same environment (.venv-trl, which holds both). Rounds interleave the two (A B, then B A, ...), each run
in a fresh process, with the machine's sgemm rate beside each round; the claim is the ratio of medians with the
per-round spread.

    bash scripts/setup_trl.sh && python bench/trl_dropin.py --rows 96 --rounds 3

Reads ../shared/data (PRM800K phase-1 stepwise-critic rows, flattened by the peers harness's prm800k_rows.py as in
bench/peers.py) and the SmolLM2-135M folder prmkit converts once.
"""

from __future__ import annotations

import argparse
import json
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

from common import backbone_path, sgemm_gflops  # noqa: E402
from prmkit.files import write_json_atomic  # noqa: E402

SHARED = ROOT.parent / "shared"
TRAIN_ROWS = SHARED / "data" / "prm800k_phase1_stepwise" / "phase1_train_plus.stepwise-critic.parquet"
VENV = ROOT / ".venv-trl" / "bin" / "python"
SYSTEMS = ("trl", "prmkit")
LAST_STEPS = 5  # the training loss where a run ends: the mean of its last five logged steps


def run(system: str, model: str, data: Path, max_length: int) -> dict:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([str(VENV), str(ROOT / "bench" / "trl_dropin_run.py"), system, model, str(data),
                               str(Path(out) / "run"), str(max_length)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{system} run failed:\n{done.stderr[-3000:]}")
    # wall: the whole script (imports, model load, tokenization, training), since the two trainers do different
    # shares of that work inside train() (prmkit's drop-in loads and tokenizes there, TRL in its constructor)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": round(time.perf_counter() - started, 2)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M as prmkit converts it)")
    parser.add_argument("--harness", type=Path, default=SHARED / "peers",
                        help="the peers harness whose prm800k_rows.py makes the rows, as bench/peers.py uses it")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "trl_dropin.json"))
    args = parser.parse_args(argv)
    if not VENV.is_file():
        raise SystemExit(f"no {VENV}: create the TRL 1.13 environment with scripts/setup_trl.sh")
    model = args.model or backbone_path()
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "rows.jsonl"
        subprocess.run([sys.executable, str(args.harness / "prm800k_rows.py"), str(TRAIN_ROWS), str(data),
                        str(args.rows), "0"], check=True, capture_output=True)
        rounds = []
        for index in range(args.rounds):
            order = SYSTEMS if index % 2 == 0 else SYSTEMS[::-1]
            entry = {"order": list(order), "sgemm_gflops": round(sgemm_gflops(), 1)}
            for system in order:
                entry[system] = run(system, model, data, args.max_length)
                print(json.dumps({"round": index, **entry[system]}), flush=True)
            rounds.append(entry)
    for entry in rounds:
        for system in SYSTEMS:
            tail = entry[system]["losses"][-LAST_STEPS:]
            entry[system]["last_steps_loss"] = round(sum(tail) / len(tail), 4)
    medians = {system: {key: statistics.median(r[system][key] for r in rounds)
                        for key in ("rows_per_s", "wall_s", "peak_rss_mb", "train_loss", "last_steps_loss")}
               for system in SYSTEMS}
    per_round = [r["prmkit"]["rows_per_s"] / r["trl"]["rows_per_s"] for r in rounds]
    result = {"command": "python bench/trl_dropin.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "settings": vars(args) | {"model": model, "harness": str(args.harness)},
              "rounds": rounds, "medians": medians,
              "ratio": {"rows_per_s": round(medians["prmkit"]["rows_per_s"] / medians["trl"]["rows_per_s"], 3),
                        "rows_per_s_per_round": [round(x, 3) for x in per_round],
                        "wall": round(medians["prmkit"]["wall_s"] / medians["trl"]["wall_s"], 3),
                        "peak_rss": round(medians["prmkit"]["peak_rss_mb"] / medians["trl"]["peak_rss_mb"], 3)}}
    write_json_atomic(args.out, result)
    print(json.dumps(result["ratio"]))
    return result


if __name__ == "__main__":
    main()
