"""Quality of prmkit beside the systems it replaces, on a training budget that means something.

    python bench/peer_quality.py --peers-dir PEERS --rows 2000 --eval-rows 400 --processbench-rows 150 \\
        --work /tmp/prmkit-quality [--systems trl,pk-lora,pk-recipe,soup,pk-full]

Every system trains on the same PRM800K phase-1 rows (the harness's prm800k_rows.py, seed 0), max_length 512,
batch 4, one epoch, each in its own environment with its own code (bench/peers.py says how each is run):

    trl        TRL 1.13.0 PRMTrainer, LoRA r16 all-linear, lr 1e-4
    pk-lora    prmkit at the same settings (LoRA r16 all-linear, lr 1e-4, separator "\\n")
    soup       soup-cli 0.75.2, full fine-tune, lr 1e-5
    pk-full    prmkit full fine-tune, lr 1e-5
    pk-recipe  prmkit's recipe: the head reads layer 16 of 30 (model.num_layers=16), LoRA on the top 8 of those,
               the head fitted as a linear probe before training (training.head_init=probe), lr 5e-4

Then every trained PRM scores the same chains, each read with its own system's tokenization (TRL and soup-cli
through bench/peer_step_scores.py in their environments, prmkit through PRMScorer), and one piece of metric code
measures them all: the AUROC of the rated last step on held-out phase-1 test rows (seed 1; rows whose rated step
does not fit are left out and counted), and ProcessBench F1 on gsm8k and math, the threshold calibrated on gsm8k
and applied unchanged to math (prmkit.evaluation.processbench).

A run takes about an hour per system on 2 cores. It resumes: a system whose model or scores are already in WORK is
not trained or scored again, so it can be stopped and run again, and results are written after every system to
bench/results/peer_quality.json. Training times are recorded but are not a speed comparison (bench/peers.py is).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import DATA, ROOT, peer_commands, prmkit_train, run, timed  # noqa: E402

from prmkit.backbones import resolve_base  # noqa: E402
from prmkit.evaluation.evaluate import evenly_spaced  # noqa: E402
from prmkit.evaluation.metrics import auroc  # noqa: E402
from prmkit.evaluation.processbench import calibrate_threshold, evaluate_threshold  # noqa: E402

PROCESSBENCH = ROOT.parent / "shared" / "data" / "processbench"
MAX_LENGTH = 512
RECIPE = ("model.num_layers=16", "lora.top_layers=8", "training.head_init=probe", "training.head_init_rows=800",
          "training.lr=5e-4", "training.warmup_steps=5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers-dir", required=True, type=Path)
    parser.add_argument("--harness", type=Path, default=ROOT.parent / "shared" / "peers")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--eval-rows", type=int, default=400)
    parser.add_argument("--processbench-rows", type=int, default=150, help="chains from each of gsm8k and math")
    parser.add_argument("--systems", default="trl,pk-lora,pk-recipe,soup,pk-full")
    parser.add_argument("--work", type=Path, default=Path("/tmp/prmkit-quality"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peer_quality.json")
    args = parser.parse_args()

    base = resolve_base("smollm2-135m")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    splits = prepare_rows(args, work)
    gold = {name: [json.loads(line)["first_error"] for line in open(path, encoding="utf-8")]
            for name, path in splits.items() if name != "heldout"}
    heldout_labels = [bool(json.loads(line)["labels"][-1]) for line in open(splits["heldout"], encoding="utf-8")]

    train_rows = work / "train.jsonl"
    commands = peer_commands(args, work, base, train_rows, max_length=MAX_LENGTH)
    commands["pk-recipe"] = lambda out: prmkit_train(work, base, train_rows, out, *RECIPE, max_length=MAX_LENGTH)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results.setdefault("systems", {})
    for name in args.systems.split(","):
        out = work / name
        done = work / f"{name}.trained.json"
        if not done.exists():
            print(f"training {name} ...", flush=True)
            done.write_text(json.dumps(timed(commands[name](out), out)))
        scores = {}
        for split in ("heldout", "gsm8k", "math"):
            path = work / f"{name}.{split}.scores.json"
            if not path.exists():
                print(f"scoring {split} with {name} ...", flush=True)
                path.write_text(json.dumps(step_scores(name, out, args, base, splits[split])))
            scores[split] = json.loads(path.read_text())
        results["systems"][name] = {"training": json.loads(done.read_text()),
                                    **metrics(scores, heldout_labels, gold)}
        results.update(rows=args.rows, eval_rows=args.eval_rows, processbench_rows=args.processbench_rows,
                       max_length=MAX_LENGTH, batch_size=4, recipe=list(RECIPE), command=" ".join(sys.argv))
        common_rows(results, work, heldout_labels)
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(table(results), flush=True)


def prepare_rows(args, work: Path) -> dict[str, Path]:
    """The training rows, the held-out rows and the ProcessBench chains, in the {prompt, completions} form every
    system reads; made once, so a resumed run scores exactly the same chains."""
    if not (work / "train.jsonl").exists():
        run([sys.executable, str(args.harness / "prm800k_rows.py"),
             str(DATA / "phase1_train_plus.stepwise-critic.parquet"), str(work / "train.jsonl"), str(args.rows), "0"])
    if not (work / "heldout.jsonl").exists():
        run([sys.executable, str(args.harness / "prm800k_rows.py"), str(DATA / "phase1_test.stepwise-critic.parquet"),
             str(work / "heldout.jsonl"), str(args.eval_rows), "1"])
    paths = {"heldout": work / "heldout.jsonl"}
    for name in ("gsm8k", "math"):
        path = paths[name] = work / f"processbench-{name}.jsonl"
        if not path.exists():
            chains = evenly_spaced(json.loads((PROCESSBENCH / f"{name}.json").read_text()), args.processbench_rows)
            path.write_text("".join(json.dumps({"prompt": c["problem"], "completions": c["steps"],
                                                "first_error": c["label"]}) + "\n" for c in chains))
    return paths


def step_scores(name: str, run_dir: Path, args, base: str, rows: Path) -> list[list[float | None]]:
    if name.startswith("pk-"):
        from prmkit import PRMScorer

        chains = [json.loads(line) for line in open(rows, encoding="utf-8")]
        scorer = PRMScorer.from_pretrained(run_dir, max_length=MAX_LENGTH, device="cpu")
        return scorer.score_many([(c["prompt"], c["completions"]) for c in chains])
    if name == "soup":
        run_dir = next(run_dir.rglob("model.safetensors")).parent
    out = args.work / f"{name}.{rows.stem}.tmp.json"
    subprocess.run([str(args.peers_dir / name / "bin" / "python"), str(Path(__file__).parent / "peer_step_scores.py"),
                    name, str(run_dir), base, str(rows), str(MAX_LENGTH), str(out)], check=True)
    return json.loads(out.read_text())


def metrics(scores: dict, labels: list[bool], gold: dict[str, list[int]]) -> dict:
    pairs = [(s[-1], label) for s, label in zip(scores["heldout"], labels) if s and s[-1] is not None]
    calibrated = calibrate_threshold(scores["gsm8k"], gold["gsm8k"])
    threshold = calibrated["threshold"]
    processbench = {split: evaluate_threshold(scores[split], gold[split], threshold) for split in ("gsm8k", "math")}
    return {"heldout_last_step_auroc": round(auroc([p[0] for p in pairs], [p[1] for p in pairs]), 4),
            "heldout_rows_scored": len(pairs), "heldout_rows": len(labels),
            "processbench_threshold": threshold,
            "processbench": {split: {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
                             for split, r in processbench.items()}}


def common_rows(results: dict, work: Path, labels: list[bool]) -> None:
    """The held-out AUROC again on the rows whose rated step every system scored: systems truncate differently
    (TRL and soup-cli cut from the right, prmkit drops whole steps), so each one's own subset differs a little."""
    last = {name: [s[-1] if s else None for s in json.loads((work / f"{name}.heldout.scores.json").read_text())]
            for name in results["systems"]}
    common = [i for i in range(len(labels)) if all(scores[i] is not None for scores in last.values())]
    gold = np.array([labels[i] for i in common])
    scored = {name: np.array([scores[i] for i in common]) for name, scores in last.items()}
    reference = scored.get("trl")
    for name, scores in scored.items():
        summary = {"rows": len(common), "auroc": round(auroc(scores, gold), 4),
                   "auroc_95": bootstrap_interval(gold, scores)}
        if reference is not None and name != "trl":
            summary["minus_trl_95"] = bootstrap_interval(gold, scores, reference)
        results["systems"][name]["heldout_common"] = summary


def bootstrap_interval(gold: np.ndarray, scores: np.ndarray, minus: np.ndarray | None = None,
                       resamples: int = 1000) -> list[float]:
    """95% interval of the AUROC (or of its difference from the AUROC of `minus` on the same rows), from resampling
    the rows with replacement: with a few hundred rated steps, differences of a few hundredths are noise, and this
    says how many."""
    rng = np.random.default_rng(0)
    values = []
    for _ in range(resamples):
        rows = rng.integers(0, len(gold), len(gold))
        if gold[rows].all() or not gold[rows].any():
            continue
        value = auroc(scores[rows], gold[rows])
        values.append(value - auroc(minus[rows], gold[rows]) if minus is not None else value)
    return [round(float(v), 4) for v in np.percentile(values, [2.5, 97.5])]


def table(results: dict) -> str:
    lines = ["| system | held-out last-step AUROC (rows scored) | the same on the rows every system scored [95%] | "
             "minus TRL's [95%] | ProcessBench gsm8k F1 (calibration) | ProcessBench math F1 | training wall (s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in results["systems"].items():
        f1 = {split: s["processbench"][split]["f1"] for split in ("gsm8k", "math")}
        common = s["heldout_common"]
        versus_trl = common.get("minus_trl_95", "-")  # TRL itself, or a run without TRL
        lines.append(f"| {name} | {s['heldout_last_step_auroc']} ({s['heldout_rows_scored']}/{s['heldout_rows']}) | "
                     f"{common['auroc']} ({common['rows']}) {common['auroc_95']} | {versus_trl} | "
                     f"{f1['gsm8k']} | {f1['math']} | {s['training']['wall_s']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
