"""Which mistakes a scorer misses: each wrong sample's first wrong step sorted by kind with the exact judge, and each
scorer's within-problem AUROC on the pairs of a right sample and a wrong sample of one kind.

    python bench/error_kinds.py --work /work/ranking-1k/val --prm-scores /work/ranking-1k/scores/val-A-step-loss.jsonl

Kinds of a first wrong step (bench/lifecycle/exact.py's rule, read at the step where a solution first goes wrong):
- slip: an equation it writes is false arithmetic ("54 / 3 = 15");
- plan: its arithmetic is true but it computes a value the solution does not need, or from a number it does not
  have (a wrong operation, a wrong operand);
- stated: no equation is at fault, but it states a number or an answer that is wrong (a value copied wrongly);
- none: every step is right by the judge and the answer is still wrong (a chain cut off before its answer).
A scorer that ranks slips well and plans at chance checks arithmetic and not the plan, and the reverse; the policy's
own confidence (bench/confidence.py) is read on the same pairs where WORK holds confidence-scores.jsonl.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle.exact import equations, known_numbers, step_is_right  # noqa: E402
from lifecycle.problems import gold_values  # noqa: E402
from prmkit.evaluation.metrics import within_problem_auroc  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic  # noqa: E402

KINDS = ("slip", "plan", "stated", "none")
CONFIDENCE = "mean"  # bench/confidence.py's chain confidence that ranks best on validation (confidence.json)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True,
                        help="an onpolicy.py evaluation folder: prm-eval.jsonl and problems.jsonl, and "
                             "confidence-scores.jsonl where bench/confidence.py has run")
    parser.add_argument("--prm-scores", action="append", default=[], metavar="[NAME=]FILE",
                        help="a PRM's step scores of prm-eval.jsonl, in its order (bench/ranking.py's scores/ "
                             "files); its chain score is the min; repeat for several PRMs")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "error_kinds.json"))
    return parser.parse_args(argv)


def first_error_kind(prompt: str, steps: list[str], gold: list, gold_answer: str) -> tuple[str, int]:
    """The kind of a solution's first wrong step, and its index (-1 for none)."""
    known, values = known_numbers(prompt), {Fraction(v) for v in gold}
    for index, step in enumerate(steps):
        right, reached = step_is_right(step, known, values, gold_answer)
        if right:
            known |= reached
            continue
        found = equations(step)
        if any(not equation.true for equation in found):
            return "slip", index
        step_known = set(known)
        for equation in found:
            operands_known = all(o in step_known or -o in step_known for o in equation.operands)
            if equation.result not in values or not operands_known:
                return "plan", index
            step_known.add(equation.result)
        return "stated", index
    return "none", -1


def scorers(args, work: Path, rows: list[dict]) -> dict[str, list[float]]:
    """Each scorer's chain score per row of prm-eval.jsonl, higher meaning more likely right."""
    out = {}
    for spec in args.prm_scores:
        name, _, path = spec.rpartition("=")
        scored = read_jsonl(path)
        if [s["prompt"] for s in scored] != [r["prompt"] for r in rows]:
            raise SystemExit(f"{path}: its rows are not those of {work / 'prm-eval.jsonl'} in order; score that file")
        out[name or Path(path).stem] = [min(s["scores"]) for s in scored]
    confidence = work / "confidence-scores.jsonl"
    if confidence.is_file():
        per_problem = sorted(read_jsonl(confidence), key=lambda r: r["id"])
        values = [c[CONFIDENCE] for problem in per_problem for c in problem["confidences"]]
        if len(values) != len(rows):
            raise SystemExit(f"{confidence}: {len(values)} confidences for {len(rows)} samples")
        out[f"policy confidence ({CONFIDENCE} log-prob)"] = values
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work)
    rows = read_jsonl(work / "prm-eval.jsonl")
    problems = {p["prompt"]: p for p in read_jsonl(work / "problems.jsonl")}
    kinds = []
    for row in rows:
        if row["correct"]:
            kinds.append("right")
            continue
        problem = problems[row["prompt"]]
        kinds.append(first_error_kind(row["prompt"], row["completions"], gold_values(problem["gold_steps"]),
                                      problem["gold_answer"])[0])
    wrong = [k for k in kinds if k != "right"]
    result = {"command": "python bench/error_kinds.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "samples": len(rows),
              "wrong": len(wrong), "kinds": {k: {"wrong_samples": wrong.count(k),
                                                  "share": wrong.count(k) / len(wrong) if wrong else None}
                                             for k in KINDS},
              "within_problem_auroc": {}}
    prompts = list(dict.fromkeys(r["prompt"] for r in rows))
    for name, scores in scorers(args, work, rows).items():
        by_kind = {}
        for kind in ("all", *KINDS):
            groups = []
            for prompt in prompts:
                members = [i for i, r in enumerate(rows) if r["prompt"] == prompt
                           and (kinds[i] == "right" or kind in ("all", kinds[i]))]
                groups.append(([scores[i] for i in members], [kinds[i] == "right" for i in members]))
            by_kind[kind] = within_problem_auroc(groups)
        result["within_problem_auroc"][name] = by_kind
    write_json_atomic(Path(args.out), result)
    print("first wrong step: " + ", ".join(f"{k} {v['wrong_samples']}" for k, v in result["kinds"].items()))
    for name, by_kind in result["within_problem_auroc"].items():
        cells = ", ".join(f"{kind} {v['auroc']:.3f} ({v['pairs']:.0f} pairs)" for kind, v in by_kind.items()
                          if v["auroc"] is not None)
        print(f"{name}: {cells}")
    return result


if __name__ == "__main__":
    main()
