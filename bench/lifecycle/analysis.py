"""What the lifecycle benchmark computes from the files prmkit's commands wrote: exact labels for the policy's own
chains, how far mc and omega labels agree with them, held-out chains for `prmkit eval`, the sampling choosers
again under another PRM's scores, and paired bootstrap intervals between two choosers."""

from __future__ import annotations

import random
from typing import Callable, Iterable

from lifecycle.exact import exact_labels
from lifecycle.problems import gold_values
from prmkit.search.report import choose_entry


def with_exact_labels(record: dict, problem: dict) -> dict:
    """A copy of a labelled record (or a sampled solution) whose labels are the exact ones."""
    labels = exact_labels(problem["prompt"], record["completions"], gold_values(problem["gold_steps"]),
                          problem["gold_answer"])
    return {"prompt": problem["prompt"], "completions": record["completions"], "labels": labels,
            "gold_answer": problem["gold_answer"], "answer": record.get("answer"),
            "correct": record.get("correct"), "group": problem["prompt"]}


def first_zero(labels: list) -> int:
    return next((i for i, v in enumerate(labels) if v is not None and v < 0.5), -1)


def agreement(labelled: list[dict], exact: list[dict]) -> dict:
    """Per-step agreement of a method's hard labels with the exact ones, first-error agreement per chain, and the
    rollouts and tokens the method spent. A step the method left unlabelled (None) is not counted."""
    steps = agree = chains = same_first = 0
    positives_missed = negatives_missed = exact_pos = exact_neg = 0
    for record, reference in zip(labelled, exact, strict=True):
        hard = record.get("hard") or record["labels"]
        for mine, truth in zip(hard, reference["labels"], strict=True):
            if mine is None:
                continue
            steps += 1
            agree += int(mine >= 0.5) == truth
            exact_pos, exact_neg = exact_pos + truth, exact_neg + (1 - truth)
            positives_missed += truth == 1 and mine < 0.5
            negatives_missed += truth == 0 and mine >= 0.5
        chains += 1
        same_first += first_zero(hard) == first_zero(reference["labels"])
    rollouts = sum(r["label"]["rollouts"] for r in labelled)
    return {"chains": chains, "steps": steps, "step_agreement": agree / steps if steps else None,
            "first_error_agreement": same_first / chains if chains else None,
            "exact_right_steps_called_wrong": positives_missed / exact_pos if exact_pos else None,
            "exact_wrong_steps_called_right": negatives_missed / exact_neg if exact_neg else None,
            "rollouts": rollouts, "tokens": sum(r["label"]["tokens"] for r in labelled),
            "rollouts_per_chain": rollouts / chains if chains else None}


def held_out_chains(rows: list[dict], problems: dict[str, dict], per_problem: int) -> list[dict]:
    """The first `per_problem` samples of every searched problem as records with exact labels (prmkit eval's
    input: best-of-N groups by prompt, first error from the labels)."""
    out = []
    for row in rows:
        problem = problems[row["prompt"]]
        for sample in row["samples"][:per_problem]:
            if sample["steps"]:
                out.append(with_exact_labels({"completions": sample["steps"], "answer": sample["answer"],
                                              "correct": sample["correct"]}, problem))
    return out


def rescored_rows(rows: list[dict], score_many: Callable, aggregate: Callable) -> list[dict]:
    """The search rows with every sample's step scores and aggregate replaced by another PRM's."""
    flat = [(row["prompt"], s["steps"]) for row in rows for s in row["samples"]]
    scores = iter(score_many(flat))
    out = []
    for row in rows:
        samples = []
        for sample in row["samples"]:
            step_scores = next(scores)
            samples.append({**sample, "step_scores": step_scores, "score": aggregate(step_scores)})
        out.append({**row, "samples": samples})
    return out


def outcomes(rows: list[dict], method: str, n: int) -> list[int]:
    """Per problem, 1 if `method` choosing among the first n samples is right."""
    if method == "greedy":
        return [int(bool(r["greedy"]["correct"])) for r in rows]
    if method in ("beam", "dvts"):
        return [int(bool(r[method][str(n)]["correct"])) for r in rows]
    return [int(bool(choose_entry(method, r["samples"][:n])["correct"])) for r in rows]


def within_problem_auroc(rows: list[dict], n: int | None = None) -> dict:
    """How often the PRM's aggregate puts a right sample above a wrong one of the same problem (ties half), over
    every such pair among the first n samples: what best-of-N needs from a PRM, free of how hard each problem is
    (a chain AUROC over all problems also rewards knowing which problems are hard). Also the share of distinct
    texts among right and among wrong samples: right samples tend to be copies of one chain, wrong ones differ."""
    pairs = wins = 0.0
    distinct = {"right": [], "wrong": []}
    for row in rows:
        samples = row["samples"][:n]
        right = [s for s in samples if s["correct"]]
        wrong = [s for s in samples if not s["correct"]]
        for name, group in (("right", right), ("wrong", wrong)):
            if group:
                distinct[name].append(len({s["solution"] for s in group}) / len(group))
        for a in right:
            for b in wrong:
                if a["score"] is None or b["score"] is None:
                    continue
                pairs += 1
                wins += 1.0 if a["score"] > b["score"] else 0.5 if a["score"] == b["score"] else 0.0
    return {"auroc": wins / pairs if pairs else None, "pairs": int(pairs),
            **{f"distinct_{k}": sum(v) / len(v) if v else None for k, v in distinct.items()}}


def paired_bootstrap(a: Iterable[int], b: Iterable[int], *, iterations: int = 10_000, seed: int = 0) -> dict:
    """Mean of a - b over problems with a 95% percentile interval, resampling problems (the pairs) together."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(iterations))
    return {"difference": sum(diffs) / n, "low": means[int(0.025 * iterations)],
            "high": means[int(0.975 * iterations) - 1], "problems": n}


def bootstrap_accuracy(a: Iterable[int], *, iterations: int = 10_000, seed: int = 0) -> dict:
    values = list(a)
    zeros = [0] * len(values)
    result = paired_bootstrap(values, zeros, iterations=iterations, seed=seed)
    return {"accuracy": result["difference"], "low": result["low"], "high": result["high"]}
