"""Which PRM recipe the lifecycle benchmark trains, chosen on validation problems (never the held-out ones).

After `python bench/loop.py --stop-after exact-labels` has sampled and labelled the policy's solutions, this trains
one PRM per recipe (label source x backbone x depth) on those labels, samples N solutions for each validation
problem once, and scores them with every PRM. Per recipe it reports what search needs from a PRM: the step AUROC
against the exact labels, the chain AUROC (the aggregate against the sample's final correctness, over the whole
validation set), the within-problem AUROC (right against wrong samples of one problem: what best-of-N needs), and
best-of-N and weighted best-of-N accuracy against majority voting at N, per aggregation. Two baselines a PRM must
beat sit on the same table: an outcome-only model (the exact-label recipe trained with its label on the last step
only, `data.train_on_last_step_only`, as TRL's option did: Lightman et al.'s ORM, here with the last step's exact
label, which is 1 when every step is right and a stated answer is the gold one), and, where the samples carry it, the
policy's own confidence (its mean log-prob per generated token, `baselines` in the results: the same columns, no
step AUROC).

    python bench/loop_recipes.py --work loop-work      # with the same bench/loop.py flags as the loop's run

Results go to bench/results/loop_recipes.json; run it again after a kill to go on (finished PRMs are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import loop  # noqa: E402
from lifecycle import analysis  # noqa: E402
from lifecycle.problems import disjoint_splits, problem_rows  # noqa: E402
from lifecycle.tables import number  # noqa: E402
from prmkit.evaluation.metrics import auroc  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402
from prmkit.scoring.aggregate import aggregate  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402


@dataclass(frozen=True)
class Recipe:
    source: str  # mc, exact (the loop's labelled chains), or injected (the synthetic generator's chains)
    base: str = "smollm2-135m"  # or 'policy': the policy folder
    layers: int = 16  # model.num_layers; 0: all
    top: int = 8  # lora.top_layers; 0: all
    chains: int = 0  # 0: the loop's labelled chains; else this many chains of the source (more data)
    steps: int = 0  # training steps; 0: the loop's
    last_step_only: bool = False  # an outcome-only model (ORM): data.train_on_last_step_only, the last step's label

    @property
    def name(self) -> str:
        backbone = "policy" if self.base == "policy" else Path(self.base).name
        more = f"-{self.chains}chains-{self.steps}steps" if self.chains else ""
        orm = "-orm" if self.last_step_only else ""
        return f"{self.source}-{backbone}-{self.layers or 'all'}layers-top{self.top or 'all'}{more}{orm}"


RECIPES = [
    Recipe("mc"), Recipe("mc", "policy"), Recipe("mc", "policy", 0),
    Recipe("exact"), Recipe("exact", last_step_only=True), Recipe("exact", "policy"),
    # is the PRM short of labelled chains? the same recipe on 4x and 8x the chains, labels that cost no rollouts
    Recipe("exact", chains=800, steps=200), Recipe("injected", chains=1600, steps=200),
]
AGGREGATES = ("last", "min", "prod", "mean")
CONFIDENCE = "policy confidence (mean log-prob)"  # the baseline row's name


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="loop-work", help="bench/loop.py's folder, labelled up to exact-labels")
    parser.add_argument("--n", type=int, default=8, help="samples per validation problem")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "loop_recipes.json"))
    args, loop_flags = parser.parse_known_args(argv)
    args.loop_flags = loop_flags  # bench/loop.py's own flags (generation backend, max new tokens, train steps)
    return args


def chain_metrics(rows: list[dict], problems: dict[str, dict], n: int) -> dict:
    """Step AUROC against exact labels, and per aggregation the chain AUROC, the within-problem AUROC and the
    choosers' accuracy at n."""
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
        out["aggregates"][how] = chooser_cell(scored, majority, n)
    return out


def chooser_cell(scored: list[dict], majority: list[int], n: int) -> dict:
    """One chooser's columns from rows whose samples carry its `score`: the chain AUROC (over every scored sample),
    the within-problem AUROC, and best-of-n and weighted best-of-n accuracy at n, each minus majority voting
    (`majority`: its outcome per problem) with a paired interval."""
    chain_scores = [s["score"] for r in scored for s in r["samples"] if s["score"] is not None]
    chain_right = [bool(s["correct"]) for r in scored for s in r["samples"] if s["score"] is not None]
    cell = {"chain_auroc": auroc(chain_scores, chain_right), "within_problem": analysis.within_problem_auroc(scored, n)}
    for method in ("best-of-n", "weighted-best-of-n"):
        picked = analysis.outcomes(scored, method, n)
        cell[method] = sum(picked) / len(picked)
        cell[f"{method} - majority"] = analysis.paired_bootstrap(picked, majority)
    return cell


def confidence_metrics(rows: list[dict], n: int) -> dict | None:
    """The policy's own confidence as a chooser among the same samples, with a recipe's columns (no step AUROC; the
    one 'aggregate' is the score, `analysis.CONFIDENCE_SCORE`); None where the samples carry no mean_logprob."""
    scored = analysis.confidence_rows(rows, n)
    if scored is None:
        return None
    majority = analysis.outcomes(rows, "majority", n)
    return {"step_auroc": None, "majority": sum(majority) / len(majority),
            "aggregates": {analysis.CONFIDENCE_SCORE: chooser_cell(scored, majority, n)}}


def recipe_result(recipe: Recipe, rows: list[dict], problems: dict, n: int) -> dict:
    return {**asdict(recipe), **chain_metrics(rows, problems, n)}


def recipe_config(runner: loop.Loop, recipe: Recipe, source: str) -> dict:
    """The `prmkit train` config of a recipe's PRM on labels-<source>.jsonl."""
    config = runner.prm_config(source, f"recipe-{recipe.name}", recipe.base, recipe.layers, recipe.top)
    if recipe.steps:
        config["training"].update(max_steps=recipe.steps, save_steps=max(recipe.steps // 4, 1))
    if recipe.last_step_only:
        config["data"]["train_on_last_step_only"] = True
    return config


def sample(runner: loop.Loop, prm: Path, problems: Path, out: Path, n: int) -> None:
    """n policy solutions per problem (prmkit search's budget rows; the PRM's scores are not used here)."""
    runner.prmkit(runner.generation_python, "search", str(prm), str(problems), str(out), "--policy",
                  runner.policy_folder, "--budgets", str(n), "--budget-methods", "majority,best-of-n",
                  "--problems-per-batch", "64", *runner.generation_flags)


def more_chains(runner: loop.Loop, recipe: Recipe) -> str:
    """Write labels-<source>-<chains>.jsonl and return its source name: the policy's solutions of problems no
    other split holds with their exact labels, or the synthetic generator's chains."""
    work, source = runner.work, f"{recipe.source}-{recipe.chains}"
    path = work / f"labels-{source}.jsonl"
    if path.is_file():
        return source
    if recipe.source == "injected":
        write_jsonl(loop.injected_chains(recipe.chains), path)
        return source
    assert recipe.source == "exact", f"more chains of {recipe.source} labels cost rollouts; not built here"
    per_problem = 4
    splits = disjoint_splits({**runner.split_sizes(), "scale": recipe.chains // per_problem})
    write_jsonl(problem_rows(splits["scale"]), work / "scale.jsonl")
    rows_path = work / "scale-samples.jsonl"
    # prmkit search scores what it samples, so it needs some PRM: any trained one (its scores are not used)
    prm = next((run for run in sorted((work / "runs").glob("*")) if (run / "prmkit.json").is_file()), None)
    assert prm, "no trained PRM yet to sample with: list a recipe on the loop's own labels first"
    sample(runner, prm, work / "scale.jsonl", rows_path, per_problem)
    problems = {p["prompt"]: p for p in read_jsonl(work / "scale.jsonl")}
    write_jsonl(analysis.held_out_chains(read_jsonl(rows_path), problems, per_problem), path)
    return source


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    runner = loop.Loop(loop.parse_args(["--work", str(work), *args.loop_flags]))
    stages = runner.state["stages"]
    assert stages.get("exact-labels", {}).get("done"), \
        f"{work} has no exact labels yet: run python bench/loop.py --work {args.work} --stop-after exact-labels"
    runner.policy_folder = stages["policy"]["folder"]
    problems = {p["prompt"]: p for p in read_jsonl(work / "validation.jsonl")}
    samples = work / "validation-samples.jsonl"
    results, scored_rows = {}, None
    for recipe in RECIPES:
        name = recipe.name
        scored = work / f"validation-{name}.jsonl"  # a PRM's scores of the samples: the metrics are made anew
        if scored.is_file():
            rows = read_jsonl(scored)
            scored_rows = scored_rows or rows
            results[name] = recipe_result(recipe, rows, problems, args.n)
            continue
        source = more_chains(runner, recipe) if recipe.chains else recipe.source
        runner.train(source, f"recipe-{name}", recipe_config(runner, recipe, source))
        run = work / "runs" / f"recipe-{name}"
        if not samples.is_file() or len(read_jsonl(samples)) < len(problems):
            # sampled once, with the first PRM; every PRM then scores the same samples
            sample(runner, run, work / "validation.jsonl", samples, args.n)
        scorer = PRMScorer.from_pretrained(str(run), device="cpu")
        rows = analysis.rescored_rows(read_jsonl(samples), scorer.score_many, lambda s: aggregate(s, "last"))
        write_jsonl(rows, scored)
        scored_rows = scored_rows or rows
        results[name] = recipe_result(recipe, rows, problems, args.n)
        print(json.dumps({name: results[name]}, indent=1), flush=True)
    report = {"command": "python bench/loop_recipes.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "validation_problems": len(problems), "n": args.n, "recipes": results}
    # the policy's confidence on the samples the first PRM scored (every PRM scored the same ones, kept with them)
    confidence = confidence_metrics(scored_rows, args.n) if scored_rows else None
    if confidence is not None:
        report["baselines"] = {CONFIDENCE: confidence}
    write_json_atomic(args.out, report)
    print(recipe_table(report))
    return report


def recipe_table(report: dict) -> str:
    n = report["n"]
    lines = [f"| recipe | step AUROC | aggregate | chain AUROC | within-problem AUROC | best-of-{n} | "
             f"weighted best-of-{n} | majority@{n} | weighted - majority [95%] |", "|---" * 9 + "|"]
    for name, r in {**report["recipes"], **report.get("baselines", {})}.items():
        for how, cell in r["aggregates"].items():
            d = cell["weighted-best-of-n - majority"]
            lines.append(f"| {name} | {number(r['step_auroc'])} | {how} | {number(cell['chain_auroc'])} | "
                         f"{number(cell['within_problem']['auroc'])} | "
                         f"{cell['best-of-n']:.3f} | {cell['weighted-best-of-n']:.3f} | {r['majority']:.3f} | "
                         f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
