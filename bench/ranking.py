"""The sibling-ranking comparison of bench/ranking_prereg.md: PRMs trained with `prmkit train` on the policy's own
samples, with the step loss alone and with the ranking term beside it, chosen on validation problems by
within-problem AUROC and tested once on held-out problems against the step-loss PRM.

    python bench/lifecycle/onpolicy.py --problems 400 --k 4 --work /work/ranking/train
    python bench/lifecycle/onpolicy.py --split validation --problems 64 --k 8 --work /work/ranking/val
    python bench/lifecycle/onpolicy.py --split held_out --problems 100 --k 8 --work /work/ranking/held-out
    python bench/ranking.py --work /work/ranking

Each stage is kept in WORK (trained runs, validation scores), so a stopped run goes on where it stopped. The
held-out file is opened only after the choice is written to the results file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle.policy import PolicyRecipe, build_policy  # noqa: E402
from prmkit.evaluation.evaluate import best_of_n_groups  # noqa: E402
from prmkit.evaluation.metrics import choice_accuracy, paired_bootstrap, within_problem_auroc  # noqa: E402
from prmkit.evaluation.splits import Chain, Split  # noqa: E402
from prmkit.evaluation.within_problem import within_problem_metrics  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402
from prmkit.scoring.aggregate import AGGREGATIONS  # noqa: E402

PRIMARY = "min"  # the chain score whose within-problem AUROC chooses (prmkit's default aggregation)
BEST_OF = 8
BOOTSTRAP = {"iterations": 2000, "seed": 0}
BACKBONES = {  # model and lora sections of the PRM's config
    "smollm2": ({"base": "smollm2-135m", "num_layers": 16}, {"top_layers": 8}),
    # the implicit-PRM and Snell et al. lever: a backbone that generated the samples reads them (all 30 layers)
    "policy": ({"num_layers": None}, {"top_layers": None}),
}
CONDITIONS = {  # bench/ranking_prereg.md
    "A-step-loss": {},
    "B-ranking-0.5": {"ranking_weight": 0.5, "ranking_score": "min"},
    "C-ranking-2.0": {"ranking_weight": 2.0, "ranking_score": "min"},
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="folder holding train/, val/ and held-out/ from onpolicy.py")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--backbone", choices=sorted(BACKBONES), default="smollm2",
                        help="smollm2: the preregistered recipe (16 layers, LoRA on the top 8); policy: the policy "
                        "that drew the samples, every layer kept and adapted")
    parser.add_argument("--validation-only", action="store_true",
                        help="stop after the choice: the held-out file stays unread (a lever measured on validation)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ranking.json"))
    return parser.parse_args(argv)


def runs_home(work: Path, backbone: str) -> Path:
    """Where a backbone's runs and scores live: one other than the preregistered one keeps its own, so neither
    takes the other's as done."""
    return work if backbone == "smollm2" else work / f"backbone-{backbone}"


def prm_config(work: Path, name: str, loss: dict, steps: int, backbone: str = "smollm2",
               policy: str | None = None) -> dict:
    """bench/loop.py's exact-label PRM recipe (prm_config) on the on-policy file, with the condition's loss and the
    backbone's model and LoRA layers; the policy backbone is POLICY (default: the benchmark's policy)."""
    model, lora = BACKBONES[backbone]
    if backbone == "policy":
        model = {**model, "base": policy or str(build_policy(PolicyRecipe()))}
    return {
        "output_dir": str(runs_home(work, backbone) / "runs"), "run_name": name,
        "model": {**model, "finetune": "lora"},
        "data": {"train": str(work / "train" / "prm-train.jsonl"), "max_length": 512},
        "lora": {"r": 16, "alpha": 32, **lora},
        "loss": loss,
        "training": {"max_steps": steps, "batch_size": 8, "lr": 5e-4, "head_init": "probe", "warmup_steps": 5,
                     "logging_steps": 10, "save_steps": max(steps // 4, 1), "seed": 0},
    }


def train(work: Path, name: str, loss: dict, steps: int, backbone: str = "smollm2") -> Path:
    return train_config(runs_home(work, backbone) / "runs" / name, runs_home(work, backbone) / f"train-{name}.json",
                        prm_config(work, name, loss, steps, backbone))


def train_config(run: Path, config_file: Path, config: dict) -> Path:
    """`prmkit train` on CONFIG (written to CONFIG_FILE), whose run folder is RUN: a finished run is kept, a stopped
    one resumes from its last checkpoint."""
    if (run / "prmkit.json").is_file():
        return run
    write_json_atomic(config_file, config)
    # a run stopped before its first checkpoint has files but nothing to resume from: it starts again
    resume = ["training.resume=latest"] if any(run.glob("checkpoint-*")) else ["--overwrite"]
    subprocess.run([sys.executable, "-m", "prmkit", "train", str(config_file), *resume], check=True)
    return run


def training_log(run: Path) -> list[dict]:
    """The logged losses of a run (the step loss with the ranking term, and the ranking term alone): whether the
    PRM fits the within-problem order of its own training problems."""
    state = json.loads((run / "trainer_state.json").read_text(encoding="utf-8"))
    return [{key: entry[key] for key in ("step", "loss", "ranking_loss") if key in entry}
            for entry in state["log_history"] if "loss" in entry]


def scored(run: Path, data: Path, cache: Path) -> list[dict]:
    """Every chain of DATA with the PRM's step scores (kept in CACHE: scoring is the slow part of a rerun)."""
    if cache.is_file():
        return read_jsonl(cache)
    from prmkit import PRMScorer

    rows = read_jsonl(data)
    scorer = PRMScorer.from_pretrained(run)
    steps = scorer.score_many([(r["prompt"], r["completions"]) for r in rows])
    out = [{"prompt": r["prompt"], "correct": bool(r["correct"]), "answer": r.get("answer"), "scores": s}
           for r, s in zip(rows, steps)]
    write_jsonl(out, cache)  # atomic: a kill mid-write leaves no half file that a rerun would take as done
    return out


def groups(chains: list[dict]) -> list[dict]:
    """One problem's samples per group, in file order: prmkit eval's own grouping (`evaluate.best_of_n_groups`)."""
    split = Split("scored", Path("scored"), [Chain(c["prompt"], [], correct=c["correct"], answer=c["answer"],
                                                   group=c["prompt"], scores=c["scores"]) for c in chains])
    return best_of_n_groups(split)


def summary(metrics: dict) -> dict:
    """The figures the choice and the report read: within-problem AUROC per chain score, and the choosers at N=8
    against majority."""
    by_n = metrics["by_n"]
    n = str(BEST_OF if BEST_OF in by_n["n"] else by_n["n"][-1])
    return {"auroc": {how: metrics["auroc"][how]["auroc"] for how in metrics["auroc"]},
            "auroc_pooled": {how: metrics["auroc"][how]["auroc_pooled"] for how in metrics["auroc"]},
            "pairs": metrics["auroc"][PRIMARY]["pairs"], "problems_with_both": metrics["auroc"][PRIMARY]["problems"],
            "n": int(n), "accuracy": {m: cells[n] for m, cells in by_n["methods"].items()},
            "versus_majority": {m: cells[n] for m, cells in by_n["versus_majority"].items()}}


def evaluate(chains: list[dict]) -> tuple[dict, list[dict]]:
    problems = groups(chains)
    metrics = within_problem_metrics(problems, list(AGGREGATIONS), correct_from="the rows' correct field")
    return summary(metrics), problems


def per_problem_auroc(problems: list[dict], how: str = PRIMARY) -> dict[str, float]:
    out = {}
    for g in problems:
        value = within_problem_auroc([(g["scores"][how], g["correct"])])["auroc"]
        if value is not None:
            out[g["key"]] = value
    return out


def paired_problems(a: list[dict], b: list[dict]) -> dict:
    """Two scorers' groups of the same problems, a minus b problem by problem: within-problem AUROC (on the problems
    with both outcomes) and best-of-BEST_OF, each with its paired bootstrap interval."""
    auroc_a, auroc_b = per_problem_auroc(a), per_problem_auroc(b)
    keys = [k for k in auroc_a if k in auroc_b]
    best_a, best_b = best_of_correct(a), best_of_correct(b)
    return {"within_problem_auroc": paired_bootstrap([auroc_a[k] for k in keys], [auroc_b[k] for k in keys],
                                                     **BOOTSTRAP),
            f"best_of_{BEST_OF}": paired_bootstrap([best_a[k] for k in best_a], [best_b[k] for k in best_a],
                                                   **BOOTSTRAP)}


def best_of_correct(problems: list[dict], how: str = PRIMARY, n: int = BEST_OF) -> dict[str, float]:
    """Each problem's expected correctness of best-of-n (ties shared), as prmkit eval counts it."""
    return {g["key"]: choice_accuracy(g["scores"][how][:n], g["correct"][:n], g["truncated"][:n]) for g in problems}


def data_counts(folder: Path, file: str) -> dict:
    rows = read_jsonl(folder / file)
    return {"rows": len(rows), "problems": len({r["prompt"] for r in rows}),
            "right": sum(bool(r["correct"]) for r in rows),
            "minimal_pairs": sum(r.get("source") == "minimal-pair" for r in rows)}


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    names = args.conditions.split(",")
    work_runs = runs_home(work, args.backbone)
    result = {"command": "python bench/ranking.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs)",
              "preregistration": "bench/ranking_prereg.md", "settings": {"steps": args.steps, "primary": PRIMARY,
                                                                         "best_of": BEST_OF, **BOOTSTRAP},
              "backbone": args.backbone, "config": prm_config(work, "NAME", {}, args.steps, args.backbone),
              "data": {"train": data_counts(work / "train", "prm-train.jsonl"),
                       "validation": data_counts(work / "val", "prm-eval.jsonl")}, "validation": {}}
    runs = {name: train(work, name, CONDITIONS[name], args.steps, args.backbone) for name in names}
    result["training_log"] = {name: training_log(run) for name, run in runs.items()}
    for name, run in runs.items():
        chains = scored(run, work / "val" / "prm-eval.jsonl", work_runs / "scores" / f"val-{name}.jsonl")
        result["validation"][name], _ = evaluate(chains)
        write_json_atomic(args.out, result)
    chosen = max(names, key=lambda name: result["validation"][name]["auroc"][PRIMARY])
    result["chosen"] = chosen
    write_json_atomic(args.out, result)  # the choice is on record before the held-out file is read
    if args.validation_only:
        print(json.dumps({k: result[k] for k in ("validation", "chosen")}, indent=1))
        return result

    baseline = names[0]
    held = {name: scored(runs[name], work / "held-out" / "prm-eval.jsonl",
                         work_runs / "scores" / f"held-{name}.jsonl")
            for name in dict.fromkeys([baseline, chosen])}
    result["data"]["held_out"] = data_counts(work / "held-out", "prm-eval.jsonl")
    report, problems = {}, {}
    for name, chains in held.items():
        report[name], problems[name] = evaluate(chains)
    result["held_out"] = report
    if chosen != baseline:
        result["held_out_paired"] = paired_problems(problems[chosen], problems[baseline])
    write_json_atomic(args.out, result)
    print(json.dumps({k: result[k] for k in ("validation", "chosen", "held_out") if k in result}, indent=1))
    return result


if __name__ == "__main__":
    main()
