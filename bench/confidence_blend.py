"""Does a PRM add anything to what the policy already knows? Each validation sample's PRM chain score (the min of
its step scores) blended with the policy's per-token probability as `prmkit search --confidence-weight w` blends
them (prmkit.evaluation.selection.blend_confidence):

    PRM score x exp(mean log-prob) ** w

w = 0 is the PRM alone and w = inf the policy's confidence alone (bench/confidence.py's `mean`). A PRM that knows
something the policy does not lifts the blend above the confidence at some finite w.

The weight is chosen without looking at the problems it is judged on: the validation problems are cut in two
(alternate problems), each half is scored with the weight that had the higher within-problem AUROC on the other
half, and the halves' scores are judged together (2-fold cross-validation). The in-sample AUROC of every weight is
reported beside it, marked as such. Held-out problems are never read here.

    python bench/lifecycle/onpolicy.py --split validation --problems 64 --k 8 --work WORK/val
    python bench/ranking.py --work WORK --validation-only --conditions A-step-loss    # WORK/scores/val-A-step-loss.jsonl
    python bench/confidence_blend.py --work WORK --run A-step-loss --out bench/results/confidence_blend.json

The policy's log-probs are computed once (bench/confidence.py's cache, WORK/val/confidence-scores.jsonl).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from confidence import policy_confidences  # noqa: E402
from lifecycle.policy import PolicyRecipe, build_policy  # noqa: E402
from ranking import best_of_correct, per_problem_auroc  # noqa: E402
from prmkit.evaluation.metrics import paired_bootstrap, within_problem_auroc  # noqa: E402
from prmkit.evaluation.selection import CONFIDENCE_WEIGHTS, blend_confidence  # noqa: E402
from prmkit.evaluation.within_problem import BEST, MAJORITY, WEIGHTED, within_problem_metrics  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic  # noqa: E402
from prmkit.scoring.aggregate import aggregate  # noqa: E402

WEIGHTS = CONFIDENCE_WEIGHTS  # the grid `prmkit search-tune` tries
PRM, CONFIDENCE, CROSS = "prm", "confidence", "cross-validated"
BEST_OF = 8
BOOTSTRAP = {"iterations": 2000, "seed": 0}


def name_of(weight: float) -> str:
    return PRM if weight == 0 else CONFIDENCE if math.isinf(weight) else f"w={weight:g}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="bench/ranking.py's folder (val/ and scores/ inside)")
    parser.add_argument("--run", default="A-step-loss", help="the PRM whose validation scores are blended")
    parser.add_argument("--policy", default=None, help="the policy that drew the samples (default: the cached "
                        "benchmark policy)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "confidence_blend.json"))
    return parser.parse_args(argv)


def problem_groups(samples: list[dict], eval_rows: list[dict], prm_rows: list[dict],
                   logprobs: list[list[dict]]) -> list[dict]:
    """One group per problem: the samples the PRM scored (those with steps), in drawing order, with every weight's
    blended score under `scores`."""
    if len(eval_rows) != len(prm_rows):
        raise SystemExit(f"{len(eval_rows)} evaluation rows but {len(prm_rows)} scored chains: score the PRM "
                         "again on this val/prm-eval.jsonl (delete its scores/val-RUN.jsonl)")
    prm_chain = {}
    for row, scored in zip(eval_rows, prm_rows):
        if row["prompt"] != scored["prompt"]:
            raise SystemExit("the scored chains are not in val/prm-eval.jsonl's order: score the PRM again")
        prm_chain[row["problem"], row["sample"]] = aggregate(scored["scores"], "min")
    out = []
    for problem, per_sample in zip(samples, logprobs):
        kept = [i for i in range(len(problem["samples"])) if (problem["id"], i) in prm_chain]
        if not kept:
            continue
        chosen = [problem["samples"][i] for i in kept]
        prm = [prm_chain[problem["id"], i] for i in kept]
        means = [per_sample[i]["mean"] for i in kept]
        out.append({"key": problem["id"], "correct": [bool(s["correct"]) for s in chosen],
                    "answers": [s["answer"] for s in chosen],
                    "truncated": [s["finish_reason"] == "length" for s in chosen],
                    "scores": {name_of(w): blend_confidence(prm, means, w) for w in WEIGHTS}})
    return out


def auroc(groups: list[dict], name: str) -> float | None:
    return within_problem_auroc([(g["scores"][name], g["correct"]) for g in groups])["auroc"]


def cross_validate(groups: list[dict]) -> list[dict]:
    """Each half of the problems scored with the weight the other half chose (ties: the smaller weight, the one
    closer to the PRM alone); the chosen weights go into each group as `weight`."""
    halves = [groups[0::2], groups[1::2]]
    for judged, chooser in ((halves[0], halves[1]), (halves[1], halves[0])):
        chosen = max(WEIGHTS, key=lambda w: (auroc(chooser, name_of(w)) or 0.0, -w))
        for g in judged:
            g["scores"][CROSS] = g["scores"][name_of(chosen)]
            g["weight"] = name_of(chosen)
    return groups


def paired(groups: list[dict], a: str, b: str) -> dict:
    """a minus b, paired by problem: within-problem AUROC and best-of-N."""
    auroc_a, best_a = per_problem_auroc(groups, a), best_of_correct(groups, a, BEST_OF)
    auroc_b, best_b = per_problem_auroc(groups, b), best_of_correct(groups, b, BEST_OF)
    keys = sorted(auroc_a)
    return {"auroc": paired_bootstrap([auroc_a[k] for k in keys], [auroc_b[k] for k in keys], **BOOTSTRAP),
            f"best_of_{BEST_OF}": paired_bootstrap([best_a[g["key"]] for g in groups],
                                                   [best_b[g["key"]] for g in groups], **BOOTSTRAP)}


def at_best_of(metrics: dict) -> dict:
    n = str(BEST_OF)
    by_n = metrics["by_n"]
    return {"accuracy": {m: by_n["methods"][m][n] for m in (MAJORITY, BEST, WEIGHTED)},
            "versus_majority": {m: by_n["versus_majority"][f"{m} - {MAJORITY}"][n] for m in (BEST, WEIGHTED)}}


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work).resolve()
    policy = Path(args.policy) if args.policy else build_policy(PolicyRecipe())
    samples = read_jsonl(work / "val" / "samples.jsonl")
    logprobs = policy_confidences(policy, work / "val" / "samples.jsonl", samples)
    groups = cross_validate(problem_groups(samples, read_jsonl(work / "val" / "prm-eval.jsonl"),
                                           read_jsonl(work / "scores" / f"val-{args.run}.jsonl"), logprobs))
    names = [*map(name_of, WEIGHTS), CROSS]
    metrics = {name: within_problem_metrics(groups, [name], correct_from="answer", aggregation=name, rules=(),
                                            **BOOTSTRAP)
               for name in (PRM, CONFIDENCE, CROSS)}
    result = {
        "command": "python bench/confidence_blend.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "policy": str(policy), "run": args.run,
        "settings": {"weights": [name_of(w) for w in WEIGHTS], "best_of": BEST_OF, **BOOTSTRAP,
                     "blend": "PRM min score x exp(policy mean log-prob per token) ** w"},
        "problems": len(groups), "samples": sum(len(g["correct"]) for g in groups),
        "in_sample_auroc": {name: within_problem_auroc([(g["scores"][name], g["correct"]) for g in groups])
                            for name in names},
        "cross_validation": {"weights_chosen": sorted({g["weight"] for g in groups}),
                             "weight_per_half": [groups[0]["weight"], groups[1]["weight"]] if len(groups) > 1
                             else None},
        "at_best_of": {name: at_best_of(m) for name, m in metrics.items()},
        "paired": {f"{CROSS} - {CONFIDENCE}": paired(groups, CROSS, CONFIDENCE),
                   f"{CROSS} - {PRM}": paired(groups, CROSS, PRM)},
    }
    write_json_atomic(args.out, result)
    print(json.dumps({k: result[k] for k in ("in_sample_auroc", "cross_validation", "paired")}, indent=1))
    return result


if __name__ == "__main__":
    main()
