"""Which PRM recipe the lifecycle benchmark trains, chosen on validation problems (never the held-out ones).

After `python bench/loop.py --stop-after exact-labels` has sampled and labelled the policy's solutions, this trains
one PRM per recipe (label source x backbone x depth) on those labels, samples N solutions for each validation
problem once, and scores them with every PRM. Per recipe it reports what search needs from a PRM: the step AUROC
against the exact labels, the chain AUROC (the aggregate against the sample's final correctness, within the
validation set), and best-of-N and weighted best-of-N accuracy against majority voting at N, per aggregation.

    python bench/loop_recipes.py --work loop-work      # with the same bench/loop.py flags as the loop's run

Results go to bench/results/loop_recipes.json; run it again after a kill to go on (finished PRMs are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import loop  # noqa: E402
from lifecycle import analysis  # noqa: E402
from lifecycle.tables import number  # noqa: E402
from prmkit.evaluation.metrics import auroc  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402
from prmkit.scoring.aggregate import aggregate  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402

# (label source, backbone, num_layers, lora.top_layers); 0 layers: all of them
RECIPES = [
    ("mc", "smollm2-135m", 16, 8),
    ("mc", "policy", 16, 8),
    ("mc", "policy", 0, 8),
    ("exact", "smollm2-135m", 16, 8),
    ("exact", "policy", 16, 8),
    ("exact", "policy", 0, 8),
]
AGGREGATES = ("last", "min", "prod", "mean")


def recipe_name(source: str, base: str, layers: int, top: int) -> str:
    backbone = "policy" if base == "policy" else Path(base).name
    return f"{source}-{backbone}-{layers or 'all'}layers-top{top or 'all'}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="loop-work", help="bench/loop.py's folder, labelled up to exact-labels")
    parser.add_argument("--n", type=int, default=8, help="samples per validation problem")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "loop_recipes.json"))
    args, loop_flags = parser.parse_known_args(argv)
    args.loop_flags = loop_flags  # bench/loop.py's own flags (generation backend, max new tokens, train steps)
    return args


def chain_metrics(rows: list[dict], problems: dict[str, dict], n: int) -> dict:
    """Step AUROC against exact labels, and per aggregation the chain AUROC and the choosers' accuracy at n."""
    step_scores, step_labels = [], []
    for row in rows:
        problem = problems[row["prompt"]]
        for sample in row["samples"]:
            if sample["steps"]:
                labels = analysis.with_exact_labels({"completions": sample["steps"]}, problem)["labels"]
                kept = [(s, y) for s, y in zip(sample["step_scores"], labels) if s is not None]
                step_scores += [s for s, _ in kept]
                step_labels += [y for _, y in kept]
    majority = analysis.outcomes(rows, "majority", n)
    out = {"step_auroc": auroc(step_scores, step_labels), "majority": sum(majority) / len(majority),
           "aggregates": {}}
    for how in AGGREGATES:
        scored = [{**row, "samples": [{**s, "score": aggregate(s["step_scores"], how) if s["steps"] else None}
                                      for s in row["samples"]]} for row in rows]
        chain_scores = [s["score"] for r in scored for s in r["samples"] if s["score"] is not None]
        chain_right = [bool(s["correct"]) for r in scored for s in r["samples"] if s["score"] is not None]
        cell = {"chain_auroc": auroc(chain_scores, chain_right)}
        for method in ("best-of-n", "weighted-best-of-n"):
            picked = analysis.outcomes(scored, method, n)
            cell[method] = sum(picked) / len(picked)
            cell[f"{method} - majority"] = analysis.paired_bootstrap(picked, majority)
        out["aggregates"][how] = cell
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    state = json.loads((work / "state.json").read_text())
    assert state["stages"].get("exact-labels", {}).get("done"), \
        f"{work} has no exact labels yet: run python bench/loop.py --work {args.work} --stop-after exact-labels"
    runner = loop.Loop(loop.parse_args(["--work", str(work), *args.loop_flags]))
    runner.policy_folder = state["stages"]["policy"]["folder"]
    problems = {p["prompt"]: p for p in read_jsonl(work / "validation.jsonl")}
    results_path = work / "recipes.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    samples = work / "validation-samples.jsonl"
    for source, base, layers, top in RECIPES:
        name = recipe_name(source, base, layers, top)
        if name in results:
            continue
        config = runner.prm_config(source, f"recipe-{name}", base, layers, top)
        runner.train(source, f"recipe-{name}", config)
        run = work / "runs" / f"recipe-{name}"
        if not samples.is_file() or len(read_jsonl(samples)) < len(problems):
            # sampled once, with the first PRM; every PRM then scores the same samples
            runner.prmkit(runner.generation_python, "search", str(run), str(work / "validation.jsonl"),
                          str(samples), "--policy", runner.policy_folder, "--budgets", str(args.n),
                          "--budget-methods", "majority,best-of-n", "--problems-per-batch", "64",
                          *runner.generation_flags)
        scorer = PRMScorer.from_pretrained(str(run), device="cpu")
        rows = analysis.rescored_rows(read_jsonl(samples), scorer.score_many, lambda s: aggregate(s, "last"))
        write_jsonl(rows, work / f"validation-{name}.jsonl")
        results[name] = {"source": source, "base": base, "num_layers": layers or "all", "top_layers": top or "all",
                         **chain_metrics(rows, problems, args.n)}
        write_json_atomic(results_path, results)
        print(json.dumps({name: results[name]}, indent=1), flush=True)
    report = {"command": "python bench/loop_recipes.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "validation_problems": len(problems), "n": args.n, "recipes": results}
    write_json_atomic(args.out, report)
    print(recipe_table(report))
    return report


def recipe_table(report: dict) -> str:
    n = report["n"]
    lines = [f"| recipe | step AUROC | aggregate | chain AUROC | best-of-{n} | weighted best-of-{n} | "
             f"majority@{n} | weighted - majority [95%] |", "|---" * 8 + "|"]
    for name, r in report["recipes"].items():
        for how, cell in r["aggregates"].items():
            d = cell["weighted-best-of-n - majority"]
            lines.append(f"| {name} | {number(r['step_auroc'])} | {how} | {number(cell['chain_auroc'])} | "
                         f"{cell['best-of-n']:.3f} | {cell['weighted-best-of-n']:.3f} | {r['majority']:.3f} | "
                         f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
