"""What training's validation reports: step metrics over the labelled steps, and where the validation data has
prompts with right and wrong samples, the within-problem AUROC, the comparison best-of-N makes (a step AUROC pooled
over problems also rewards knowing which problems are hard).

The chain score is prmkit's default aggregation, the min over the chain's step scores (scoring.aggregate), taken
over its labelled steps; a chain that max_length cut is left out of every pair, as in training's ranking term.
"""

from __future__ import annotations

import torch

from prmkit.errors import PRMError
from prmkit.evaluation.metrics import step_metrics, within_problem_auroc
from prmkit.loss import chain_scores, scores_from_head
from prmkit.tokenize import IGNORE_INDEX
from prmkit.training.siblings import Siblings

WITHIN_PROBLEM_METRICS = ("within_problem_auroc", "within_problem_auroc_pooled")


def make_compute_metrics(loss_type: str, val_siblings: Siblings | None = None):
    """The Trainer's compute_metrics. Its predictions come in the order of the validation chains (the evaluation
    sampler is sequential; across processes the engine gathers them back in order), which `val_siblings` follows."""
    ranked = val_siblings is not None and val_siblings.ranked_prompts > 0

    def compute_metrics(eval_prediction) -> dict:
        head = torch.as_tensor(eval_prediction.predictions)
        labels = torch.as_tensor(eval_prediction.label_ids)
        mask = labels != IGNORE_INDEX
        scores = scores_from_head(loss_type, head[mask]).numpy()
        metrics = step_metrics(scores, labels[mask].numpy())
        metrics = {k: v for k, v in metrics.items() if v is not None and k != "positive_rate"}
        if ranked:
            metrics.update(within_problem_metrics(loss_type, head, labels, val_siblings))
        return metrics
    return compute_metrics


def within_problem_metrics(loss_type: str, head: torch.Tensor, labels: torch.Tensor, siblings: Siblings) -> dict:
    """within_problem_auroc (each prompt with a pair weighs the same), its pooled form (each pair the same) and
    the number of prompts with a pair, for chains in rows of `head`/`labels`."""
    logits, has_step = chain_scores(head, labels, "min")
    scores = scores_from_head(loss_type, logits).tolist()
    groups = [([scores[i] if has_step[i] else None for i in rows], [siblings.correct[i] for i in rows])
              for rows in siblings.problem_groups()]
    result = within_problem_auroc(groups)
    if result["auroc"] is None:
        return {}
    return {"within_problem_auroc": result["auroc"], "within_problem_auroc_pooled": result["auroc_pooled"],
            "within_problem_problems": result["problems"]}


def check_best_metric(best_metric: str | None, val_siblings: Siblings | None, source: str) -> None:
    """training.best_metric needs validation rows (data.val_fraction can leave none), and a within-problem metric
    needs validation prompts with a right and a wrong sample: without one the metric is never computed and the
    engine would stop at the first evaluation."""
    if best_metric is None:
        return
    if val_siblings is None or not val_siblings.groups:
        raise PRMError(f"training.best_metric={best_metric}, but there are no validation rows ({source}); give a "
                       "validation file (data.val), a larger data.val_fraction, or remove training.best_metric")
    if best_metric in WITHIN_PROBLEM_METRICS and not val_siblings.ranked_prompts:
        raise PRMError(f"training.best_metric={best_metric}, but no prompt of the validation data ({source}) has "
                       "both a right and a wrong sample that fits data.max_length, so the metric cannot be computed; "
                       "give validation data with several samples per prompt, or use training.best_metric=loss or "
                       "auroc")


def keep_head_output(logits, labels):
    """Evaluation keeps one float per token instead of the (batch, tokens, 1) tensor."""
    return logits.squeeze(-1)
