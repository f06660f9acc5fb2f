"""Does `training.group_by_length` cost quality? The demo's recipe trained twice per seed, once with length-grouped
batches and once with fully random ones, everything else equal, and scored on the same held-out chains.

    python bench/grouping_quality.py --seeds 1,2,3 --out bench/results/grouping_quality.json

Each seed draws its own synthetic training and held-out chains (`prmkit data synth --seed`) and its own batch
order (`training.seed`); the recipe is the demo's (`prmkit.demo.demo_config`: layer 16 of SmolLM2-135M, LoRA on
the top 8, the head fitted as a probe on 800 chains, lr 5e-4, 200 steps of 8 chains). Per run: held-out step
AUROC, step accuracy at 0.5 and first-error accuracy (the demo's metrics), the padding share and the wall time.
Wall times are comparable only when nothing else used the machine. Resumable: a finished run is not trained again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from prmkit.config import build_config  # noqa: E402
from prmkit.data.synthetic import generate_splits  # noqa: E402
from prmkit.demo import DemoOptions, demo_config, evaluate_held_out  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402


def train_once(work: Path, seed: int, grouped: bool) -> dict:
    from prmkit.scoring.scorer import PRMScorer
    from prmkit.training.trainer import train

    out = work / f"seed{seed}-{'grouped' if grouped else 'random'}"
    result_file = out / "result.json"
    if result_file.exists():
        return json.loads(result_file.read_text())
    options = DemoOptions(out=out, seed=seed)
    train_rows, held_out = generate_splits(options.rows, options.val_rows, seed, after_error=options.after_error)
    write_jsonl(train_rows, out / "data" / "train.jsonl")
    config = demo_config(options).model_dump(mode="json")
    config["training"]["group_by_length"] = grouped
    start = time.perf_counter()
    summary = train(build_config(config))
    seconds = time.perf_counter() - start
    metrics, _ = evaluate_held_out(PRMScorer.from_pretrained(out / "prm", device="cpu"), held_out)
    result = {"seed": seed, "group_by_length": grouped, "seconds": round(seconds, 1),
              "padding_share": summary.padding_share,
              **{key: metrics[key] for key in ("auroc", "accuracy", "first_error_accuracy")}}
    result_file.write_text(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prmkit-grouping"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/grouping_quality.json"))
    args = parser.parse_args()
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for grouped in (True, False):
            runs.append(train_once(args.work, seed, grouped))
            print(json.dumps(runs[-1]), flush=True)
    paired = {}
    for key in ("auroc", "accuracy", "first_error_accuracy"):
        differences = [g[key] - r[key] for g, r in zip(runs[0::2], runs[1::2])]
        paired[key] = {"grouped_minus_random": [round(d, 4) for d in differences],
                       "mean": round(statistics.mean(differences), 4)}
    result = {"command": "python " + " ".join(sys.argv), "runs": runs, "paired": paired}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(paired, indent=2))


if __name__ == "__main__":
    main()
