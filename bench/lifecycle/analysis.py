"""What the lifecycle benchmark computes from the files prmkit's commands wrote: exact labels for the policy's own
chains, how far mc and omega labels agree with them, held-out chains for `prmkit eval`, the sampling choosers
again under another PRM's scores or under the policy's own confidence, and paired bootstrap intervals between two
choosers."""

from __future__ import annotations

import math
from typing import Callable, Iterable

from lifecycle.exact import exact_labels
from lifecycle.problems import gold_values
from prmkit.evaluation import metrics
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


CONFIDENCE_SCORE = "exp(mean_logprob)"  # what the policy-confidence chooser scores a sample by


def confidence_score(logprob: float | None) -> float | None:
    """A log-prob as the probability it is (None stays None): in (0, 1] like a bce PRM's score, so weighted best-of-N
    sums it per answer as it sums a PRM's."""
    return None if logprob is None else math.exp(logprob)


def confidence_rows(rows: list[dict], n: int | None = None) -> list[dict] | None:
    """The search rows with every sample's score replaced by the policy's own confidence, the baseline a PRM must
    beat: exp(mean_logprob), the geometric-mean probability per generated token, in (0, 1] like a bce PRM's score,
    so best-of-N picks the highest mean log-prob (ties: the first sample) and weighted best-of-N sums it per answer
    as it sums a PRM's probabilities. A sample whose mean_logprob is None (no token generated) is unscored. Step
    scores are emptied: the policy read every sample whole, so the PRM's max_length cuts do not demote any.
    None unless every sample among the first n of every row carries mean_logprob (`prmkit search` writes it; an
    older search's rows lack it)."""
    heads = [s for row in rows for s in row["samples"][:n]]
    if not heads or not all("mean_logprob" in s for s in heads):
        return None
    return [{**row, "samples": [{**s, "step_scores": [], "score": confidence_score(s.get("mean_logprob"))}
                                for s in row["samples"]]}
            for row in rows]


def outcomes(rows: list[dict], method: str, n: int) -> list[int]:
    """Per problem, 1 if `method` choosing among the first n samples is right."""
    if method == "greedy":
        return [int(bool(r["greedy"]["correct"])) for r in rows]
    if method in ("beam", "dvts"):
        return [int(bool(r[method][str(n)]["correct"])) for r in rows]
    return [int(bool(choose_entry(method, r["samples"][:n])["correct"])) for r in rows]


def within_problem_auroc(rows: list[dict], n: int | None = None) -> dict:
    """prmkit eval's within-problem AUROC (`prmkit.evaluation.metrics.within_problem_auroc`: how often the PRM's
    aggregate puts a right sample above a wrong one of the same problem, ties half; `auroc` the mean over problems,
    `auroc_pooled` over pairs) of the first n samples of each row. Also the share of distinct texts among right
    and among wrong samples: right samples tend to be copies of one chain, wrong ones differ."""
    groups = [([s["score"] for s in row["samples"][:n]], [bool(s["correct"]) for s in row["samples"][:n]])
              for row in rows]
    distinct = {"right": [], "wrong": []}
    for row in rows:
        for name, wanted in (("right", True), ("wrong", False)):
            texts = [s["solution"] for s in row["samples"][:n] if bool(s["correct"]) == wanted]
            if texts:
                distinct[name].append(len(set(texts)) / len(texts))
    return {**metrics.within_problem_auroc(groups),
            **{f"distinct_{k}": sum(v) / len(v) if v else None for k, v in distinct.items()}}


def paired_bootstrap(a: Iterable[float], b: Iterable[float], *, iterations: int = 10_000, seed: int = 0) -> dict:
    """prmkit eval's paired bootstrap over problems (`prmkit.evaluation.metrics.paired_bootstrap`)."""
    return metrics.paired_bootstrap(list(a), list(b), iterations=iterations, seed=seed)


def bootstrap_accuracy(a: Iterable[float], *, iterations: int = 10_000, seed: int = 0) -> dict:
    """prmkit eval's accuracy with a bootstrap interval over problems (`prmkit.evaluation.metrics.bootstrap_mean`)."""
    return metrics.bootstrap_mean(list(a), iterations=iterations, seed=seed)
