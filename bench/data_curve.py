"""What a PRM that picks costs: within-problem AUROC on validation problems against the number of training
solutions, for each label source on the same solutions, with the rollouts each source spent on its labels.

    python bench/lifecycle/onpolicy.py --problems 1000 --k 4 --work /work/ranking     # train/ (the policy's samples)
    python bench/lifecycle/onpolicy.py --split validation --problems 64 --k 8 --work /work/ranking/val
    python bench/data_curve.py --work /work/ranking --sizes 192,800 --labels exact,omega,mc

A size takes whole problems of WORK/train/prm-train.jsonl in file order until it holds that many of the policy's
sampled solutions (the siblings of a problem stay together; the smaller sizes are prefixes of the larger). Each label
source labels exactly those solutions:
- exact: the exact judge's step labels the file already carries (no rollouts);
- exact-pairs: the same, with the minimal pairs bench/lifecycle/onpolicy.py made from them (free, on-policy text);
- exact-arith: the same, with `--arithmetic-per-solution` free one-step rows from each right solution whose
  equation's numbers are drawn anew, true or a slip away (bench/lifecycle/arithmetic_steps.py): the one skill
  bench/error_kinds.py finds the PRMs lacking, in the policy's own phrasing;
- arith: those free rows alone, no solution: whether the skill can be taught at all, and what a PRM that only
  checks sums makes of the samples;
- omega, mc: `prmkit label --method omega|mc` on the solutions' own steps, rolled out by the policy that drew them.
Every PRM is bench/ranking.py's recipe (step loss, SmolLM2 with LoRA on its top layers, or with `--backbone policy`
the policy that drew the samples with LoRA on all its layers; `--finetune full` trains every weight of the backbone
instead, at `--lr`) for `--epochs` over its rows, scored on
WORK/val/prm-eval.jsonl. At each size every source after the first is paired against the first, problem by problem
(within-problem AUROC and best-of-8, with paired bootstrap intervals). Validation only: the curve chooses nothing,
so no held-out file is read. Each PRM is also scored on fresh `a op b = c` rows drawn from the validation
problems' right samples (the arithmetic probe: does it check the sums at all, whatever it does on the samples),
pooled and between rows of the same words whose numbers differ;
`--probe-checkpoints` scores the probe at each saved checkpoint too, the curve of the skill against steps.

Each stage is kept under WORK/curve (labelled files, runs, scores): run the same command again after a kill to go on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import ranking  # noqa: E402
from lifecycle.arithmetic_steps import arithmetic_rows  # noqa: E402
from lifecycle.exact import NUMBER  # noqa: E402
from prmkit.evaluation.metrics import auroc, within_problem_auroc  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402

PROBE_SEED = 1  # the training rows' draws use seed 0, so no probe row was trained on
PROBE_PER_SOLUTION = 16  # rows per distinct right sample: enough pairs of the same words to tell 0.5 from 0.6
LABELS = ("exact", "exact-pairs", "exact-arith", "arith", "omega", "mc")
EXACT_LABELS = ("exact", "exact-pairs", "exact-arith", "arith")
ARITHMETIC_LABELS = ("exact-arith", "arith")  # the sources whose rows depend on --arithmetic-per-solution
ROLLOUT_LABELS = ("omega", "mc")
BATCH = 8  # bench/ranking.py's batch size
DEFAULT_LR = {"lora": 5e-4, "full": 5e-5}  # lora: bench/ranking.py's; full: the usual range for a 135M model
CHECKPOINTS = 4  # saved per run (bench/ranking.py saves every quarter of the steps)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="folder holding train/ and val/ from onpolicy.py")
    parser.add_argument("--sizes", default="192,800", help="training solutions (the policy's samples) per PRM")
    parser.add_argument("--labels", default="exact,omega,mc", help=f"label sources among {', '.join(LABELS)}")
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over each PRM's rows")
    parser.add_argument("--min-steps", type=int, default=60, help="the fewest optimizer steps a PRM trains")
    parser.add_argument("--arithmetic-per-solution", type=int, default=4,
                        help="exact-arith and arith: auxiliary rows drawn from each right solution")
    parser.add_argument("--backbone", choices=tuple(ranking.BACKBONES), default="smollm2",
                        help="the PRM's backbone: policy reads the samples with the policy that drew them")
    parser.add_argument("--finetune", choices=tuple(DEFAULT_LR), default="lora",
                        help="lora: bench/ranking.py's adapters; full: every weight of the backbone trains")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: " + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_LR.items()) + ")")
    parser.add_argument("--head-init", choices=("probe", "random"), default="probe",
                        help="probe: bench/ranking.py's head, fitted on the frozen backbone first; random: a head "
                        "that starts near 0, for a full fine-tune whose first steps a fitted head would throw off")
    parser.add_argument("--probe-checkpoints", action="store_true",
                        help="score the arithmetic probe at every saved checkpoint as well as at the end")
    parser.add_argument("--k", type=int, default=4, help="rollouts per measured step (omega and mc)")
    parser.add_argument("--policy", default=None,
                        help="the policy the rollouts come from (default: the one that drew WORK/train's samples)")
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto",
                        help="rollouts: auto takes vLLM from .venv-vllm where it exists")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "data_curve.json"))
    args = parser.parse_args(argv)
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    args.labels = [s.strip() for s in args.labels.split(",") if s.strip()]
    args.lr = DEFAULT_LR[args.finetune] if args.lr is None else args.lr
    unknown = sorted(set(args.labels) - set(LABELS))
    if unknown:
        parser.error(f"--labels: unknown {', '.join(unknown)}; choose among {', '.join(LABELS)}")
    return args


def drawn_by_policy(row: dict) -> bool:
    """Whether a training row is one of the policy's sampled solutions (not a minimal pair or an auxiliary row)."""
    return row.get("source", "policy") == "policy"


def subset(rows: list[dict], size: int) -> list[dict]:
    """Whole problems, in file order, until `size` of the policy's solutions are in; their minimal pairs ride
    along (a label source that has no use for them drops them)."""
    per_problem: dict[str, int] = {}
    for row in rows:
        if drawn_by_policy(row):
            per_problem[row["prompt"]] = per_problem.get(row["prompt"], 0) + 1
    kept, solutions = set(), 0
    for prompt, count in per_problem.items():
        if solutions >= size:
            break
        kept.add(prompt)
        solutions += count
    return [r for r in rows if r["prompt"] in kept]


def policy_folder(args, work: Path) -> str:
    return args.policy or sampling_policy(work)


def sampling_policy(work: Path) -> str:
    """The policy that drew WORK/train's samples, as the samples' settings name it."""
    return read_jsonl(work / "train" / "samples.jsonl")[0]["settings"]["policy"]


def rollout_command(args, method: str, source: Path, out: Path, policy: str) -> list[str]:
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    use_vllm = args.backend == "vllm" or (args.backend == "auto" and vllm_python.is_file())
    python = str(vllm_python) if use_vllm else sys.executable
    flags = ["--gpu-memory-utilization", "0.2"] if use_vllm else ["--generation-batch-size", "32"]
    return [python, "-m", "prmkit", "label", str(source), str(out), "--policy", policy, "--method", method,
            "--k", str(args.k), "--problem-field", "prompt", "--gold-field", "gold_answer",
            "--backend", "vllm" if use_vllm else "transformers", "--max-new-tokens", str(args.max_new_tokens),
            *flags]


def labelled(args, work: Path, label: str, rows: list[dict], folder: Path) -> tuple[Path, dict]:
    """The PRM training file of one label source on `rows`, and what its labels cost."""
    policy_rows = [r for r in rows if drawn_by_policy(r)]
    train_file = folder / "train.jsonl"
    if label in EXACT_LABELS:
        if label in ARITHMETIC_LABELS:
            chosen = arithmetic_rows(policy_rows, args.arithmetic_per_solution, seed=0)
            chosen = policy_rows + chosen if label == "exact-arith" else chosen
        else:
            chosen = rows if label == "exact-pairs" else policy_rows
        write_jsonl(chosen, train_file)
        return train_file, {"rows": len(chosen), "rollouts": 0, "tokens": 0}
    source, out = folder / "solutions.jsonl", folder / "labelled.jsonl"
    write_jsonl([{"prompt": r["prompt"], "completions": r["completions"], "gold_answer": r["gold_answer"]}
                 for r in policy_rows], source)
    if not out.is_file() or len(read_jsonl(out)) < len(policy_rows):
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
        subprocess.run(rollout_command(args, label, source, out, policy_folder(args, work)), check=True, env=env)
    records = read_jsonl(out)
    # the ranking recipe reads `correct` and `group` (the problem): the rollouts' records keep the solution's own
    by_text = {(r["prompt"], tuple(r["completions"])): r for r in policy_rows}
    rows_out = [{**by_text[(r["prompt"], tuple(r["completions"]))], "labels": r["labels"]} for r in records]
    write_jsonl(rows_out, train_file)
    return train_file, {"rows": len(rows_out), "rollouts": sum(r["label"]["rollouts"] for r in records),
                        "tokens": sum(r["label"]["tokens"] for r in records)}


def probe_rows(work: Path) -> Path:
    """The arithmetic probe's rows, drawn once for every PRM: fresh one-step `a op b = c` rows (true or a slip away,
    even odds) from the validation problems' right samples, with a seed no training row used. Each distinct right
    sample draws once: a policy repeats its right samples word for word, and every copy would draw the same rows."""
    probe_file = work / "val" / "arithmetic-probe.jsonl"
    right = list({(r["prompt"], tuple(r["completions"])): r for r in read_jsonl(work / "val" / "prm-eval.jsonl")
                  if r.get("correct")}.values())
    drawn = arithmetic_rows(right, PROBE_PER_SOLUTION, seed=PROBE_SEED)
    rows = list({(r["prompt"], r["completions"][0]): r for r in drawn}.values())
    write_jsonl(rows, probe_file)
    return probe_file


def phrasing(row: dict) -> tuple[str, str]:
    """A probe row's prompt and words with every number masked: rows that differ only in their numbers."""
    return row["prompt"], NUMBER.sub("#", row["completions"][0])


def arithmetic_probe(run: Path, probe_file: Path, cache_folder: Path, cache_name: str = "probe-scores") -> dict:
    """Whether a PRM checks `a op b = c` on its own: its scores on the probe's rows (probe_rows). A PRM that
    scores these well but ranks the samples at chance has the skill and does not use it there; one that scores
    these at chance never learned it. `step_auroc` pools every row; `within_phrasing` compares only a true and a
    false row of the same words (numbers aside), so a PRM that scores some phrasings higher than others, which
    says nothing of the sums, is not counted for or against. The scores are kept per probe (its rows' digest):
    another probe is scored anew."""
    digest = hashlib.sha256(probe_file.read_bytes()).hexdigest()[:12]
    chains = ranking.scored(run, probe_file, cache_folder / f"{cache_name}-{digest}.jsonl")
    rows = read_jsonl(probe_file)
    return probe_figures(rows, [c["scores"][0] for c in chains], [bool(c["correct"]) for c in chains])


def probe_figures(rows: list[dict], scores: list[float], truth: list[bool]) -> dict:
    """The probe's AUROCs for one score per row: pooled, and between rows of the same words (`phrasing`)."""
    by_phrasing: dict[tuple[str, str], tuple[list, list]] = {}
    for row, score, right in zip(rows, scores, truth):
        group = by_phrasing.setdefault(phrasing(row), ([], []))
        group[0].append(score)
        group[1].append(right)
    within = within_problem_auroc(list(by_phrasing.values()))
    return {"rows": len(truth), "true": sum(truth), "step_auroc": auroc(scores, truth),
            "within_phrasing": {"auroc": within["auroc"], "auroc_pooled": within["auroc_pooled"],
                                "phrasings": within["problems"], "pairs": within["pairs"]}}


def probe_by_step(run: Path, probe_file: Path, kept: Path) -> list[dict]:
    """The arithmetic probe at each checkpoint the run kept: whether, and when, the skill is being learned."""
    found = sorted(run.glob("checkpoint-*"), key=lambda c: int(c.name.rsplit("-", 1)[1]))
    return [{"step": int(c.name.rsplit("-", 1)[1]),
             **arithmetic_probe(c, probe_file, kept, f"probe-scores-{c.name}")} for c in found]


def run_name(name: str, steps: int, args) -> str:
    """A run's name: its rows (NAME), its steps, and every setting that changes its training."""
    recipe = "" if args.backbone == "smollm2" else f"-{args.backbone}"
    if args.finetune != "lora" or args.lr != DEFAULT_LR["lora"]:
        recipe += f"-{args.finetune}-lr{args.lr:g}"
    if args.head_init != "probe":
        recipe += f"-head-{args.head_init}"
    return f"{name}-{steps}-steps{recipe}"


def run_config(work: Path, curve: Path, name: str, steps: int, train_file: Path, args) -> dict:
    """bench/ranking.py's recipe on TRAIN_FILE with the fine-tune and learning rate asked for."""
    policy = policy_folder(args, work) if args.backbone == "policy" else None
    config = ranking.prm_config(work, name, {}, steps, args.backbone, policy)
    config["output_dir"], config["data"]["train"] = str(curve / "runs"), str(train_file)
    config["training"].update(lr=args.lr, head_init=args.head_init)
    if args.finetune == "full":
        config["model"]["finetune"] = "full"
        del config["lora"]
    if args.probe_checkpoints:
        # one checkpoint a quarter, all kept: the probe reads each
        config["training"].update(save_steps=max(steps // CHECKPOINTS, 1), save_total_limit=None)
    return config


def loss_ends(log: list[dict], window: int = 3) -> dict:
    """The mean logged training loss over the first and the last WINDOW logs: whether the PRM fit its own rows at
    all (a step loss near log 2 = 0.693 on balanced labels is a head that learned nothing)."""
    losses = [entry["loss"] for entry in log]
    if not losses:
        return {"first": None, "last": None}
    return {"first": round(sum(losses[:window]) / len(losses[:window]), 4),
            "last": round(sum(losses[-window:]) / len(losses[-window:]), 4)}


def steps_for(rows: int, epochs: float, min_steps: int) -> int:
    return max(min_steps, math.ceil(epochs * rows / BATCH))


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    rows = read_jsonl(work / "train" / "prm-train.jsonl")
    available = sum(1 for r in rows if drawn_by_policy(r))
    if args.sizes[-1] > available:
        raise SystemExit(f"{work / 'train' / 'prm-train.jsonl'} holds {available} of the policy's solutions; "
                         f"--sizes asks for {args.sizes[-1]}: sample more problems with bench/lifecycle/onpolicy.py")
    curve = work / "curve"
    probe_file = probe_rows(work)
    result = {"command": "python bench/data_curve.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "settings": {"backbone": args.backbone, "finetune": args.finetune, "lr": args.lr,
                           "head_init": args.head_init,
                           "epochs": args.epochs, "min_steps": args.min_steps, "k": args.k,
                           "arithmetic_per_solution": args.arithmetic_per_solution, "primary": ranking.PRIMARY,
                           "batch_size": BATCH},
              "validation": ranking.data_counts(work / "val", "prm-eval.jsonl"), "points": []}
    for size in args.sizes:
        rows_here = subset(rows, size)
        solutions = sum(1 for r in rows_here if drawn_by_policy(r))
        reference = None  # the first label source at this size: each later one is paired against it
        for label in args.labels:
            # a setting that changes a source's rows is in its folder's name and one that changes its training in
            # the run's, so a run of other rows or other steps is never taken as done
            name = f"{label}-{args.arithmetic_per_solution}-{size}" if label in ARITHMETIC_LABELS else f"{label}-{size}"
            folder = curve / name
            folder.mkdir(parents=True, exist_ok=True)
            train_file, cost = labelled(args, work, label, rows_here, folder)
            steps = steps_for(cost["rows"], args.epochs, args.min_steps)
            name_of_run = run_name(name, steps, args)
            kept = folder / name_of_run  # the run's config and scores
            kept.mkdir(exist_ok=True)
            config = run_config(work, curve, name_of_run, steps, train_file, args)
            run = ranking.train_config(curve / "runs" / name_of_run, kept / "config.json", config)
            chains = ranking.scored(run, work / "val" / "prm-eval.jsonl", kept / "val-scores.jsonl")
            summary, problems = ranking.evaluate(chains)
            point = {"label": label, "solutions": solutions, "problems": len({r["prompt"] for r in rows_here}),
                     "steps": steps, **cost, "auroc": summary["auroc"], "auroc_pooled": summary["auroc_pooled"],
                     "versus_majority": summary["versus_majority"],
                     "arithmetic_probe": arithmetic_probe(run, probe_file, kept)}
            point["training_loss"] = loss_ends(ranking.training_log(run))
            if args.probe_checkpoints:
                point["arithmetic_probe"]["by_step"] = probe_by_step(run, probe_file, kept)
            if reference is None:
                reference = (label, problems)
            else:
                point["against"] = {"label": reference[0], **ranking.paired_problems(problems, reference[1])}
            result["points"].append(point)
            write_json_atomic(Path(args.out), result)
            print(f"{name_of_run}: {cost['rows']} rows, {steps} steps, {cost['rollouts']} rollouts, "
                  f"within-problem AUROC "
                  f"({ranking.PRIMARY}) {summary['auroc'][ranking.PRIMARY]:.3f}", flush=True)
    return result


if __name__ == "__main__":
    main()
