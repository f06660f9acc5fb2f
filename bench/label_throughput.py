"""`prmkit label` on SmolLM2-135M-Instruct: what labelling costs (rollouts/s, generated tokens/s, rollouts, tokens
and seconds per labelled step) with mc and omega, and how well the labels agree with the exact labels of
synthetic chains (whose first wrong step is known). The machine's load average is recorded beside the timings.

    python bench/label_throughput.py --problems 6 --k 4 --max-new-tokens 96 --out bench/results/label.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.generation import GenerationOptions, load_generator  # noqa: E402
from prmkit.labeling import LabelOptions, label_file  # noqa: E402


def first_zero(labels: list) -> int:
    return next((i for i, v in enumerate(labels) if v == 0), -1)


def agreement(out: list[dict], truth: list[dict]) -> dict:
    """Hard labels against the exact ones (steps after the first error count as wrong), first-error matches, and
    mean MC value on truly right and truly wrong measured steps."""
    same = total = first = 0
    right_values, wrong_values = [], []
    for record, exact in zip(out, truth):
        e = exact["first_error"]
        gold = [1 if e == -1 or i < e else 0 for i in range(len(exact["completions"]))]
        for mine, real in zip(record["hard"], gold):
            total += 1
            same += (0 if mine is None else mine) == real
        first += first_zero(record["hard"]) == e
        for value, real in zip(record["values"][:-1], gold):
            if value is not None:
                (right_values if real else wrong_values).append(value)
    mean = lambda values: round(sum(values) / len(values), 3) if values else None  # noqa: E731
    return {"step_agreement": round(same / total, 3), "first_error_match": round(first / len(out), 3),
            "mean_value_right_steps": mean(right_values), "mean_value_wrong_steps": mean(wrong_values),
            "measured_right_steps": len(right_values), "measured_wrong_steps": len(wrong_values)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=6)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--problems-per-batch", type=int, default=6)
    parser.add_argument("--methods", default="omega,mc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/label.json")
    args = parser.parse_args()

    truth = generate_records(args.problems, seed=21, correct_fraction=0.3)
    options = GenerationOptions(max_new_tokens=args.max_new_tokens, temperature=0.8, seed=args.seed)
    generator = load_generator("smollm2-135m", options)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "problems.jsonl"
        write_jsonl(truth, data)
        for method in args.methods.split(","):
            load_before = os.getloadavg()[0]
            out = Path(folder) / f"{method}.jsonl"
            result = label_file(generator, data, out, LabelOptions(method=method, k=args.k,
                                                                   problems_per_batch=args.problems_per_batch))
            records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
            seconds = result.seconds
            results[method] = {
                "solutions": result.solutions, "steps": result.steps, "rollouts": result.rollouts,
                "tokens": result.tokens, "seconds": seconds,
                "rollouts_per_s": round(result.rollouts / seconds, 3),
                "tokens_per_s": round(result.tokens / seconds, 2),
                "rollouts_per_step": round(result.rollouts / result.steps, 3),
                "tokens_per_step": round(result.tokens / result.steps, 1),
                "seconds_per_step": round(seconds / result.steps, 2),
                "rollouts_reaching_gold": sum(round(v * args.k) for r in records for v in r["values"][:-1]
                                              if v is not None),
                "agreement": agreement(records, truth),
                "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "example": {key: records[-1][key] for key in ("completions", "labels", "values", "first_error")
                            if key in records[-1]},
            }
            print(method, json.dumps({k: v for k, v in results[method].items() if k != "example"}), flush=True)
    generator.close()
    payload = {"args": vars(args), "model": "smollm2-135m (SmolLM2-135M-Instruct)", "cpu_cores": os.cpu_count(),
               "truth": {"steps": sum(len(r["completions"]) for r in truth),
                         "correct_solutions": sum(r["first_error"] == -1 for r in truth)},
               "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(payload["truth"]))


if __name__ == "__main__":
    main()
