"""Masked step losses. Pure functions: per-token predictions and labels in, one scalar out.

Positions whose label is IGNORE_INDEX carry no step label and contribute nothing. The loss is a sum over labelled
steps divided by `num_items`: the number of labelled steps in the whole accumulated batch when the trainer knows it,
else in this batch. That makes gradient accumulation equal to one big batch instead of a mean of means.

The ranking term (`loss.ranking_weight`) compares chains, not steps: one score per chain (`chain_scores`), and a
Bradley-Terry loss over the (right, wrong) pairs of samples of one prompt, normalised the same way by `num_pairs`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from prmkit.tokenize import IGNORE_INDEX

LOSS_TYPES = ("mse", "bce")


def step_mask(labels: torch.Tensor) -> torch.Tensor:
    return labels != IGNORE_INDEX


def masked_mse(predictions: torch.Tensor, labels: torch.Tensor, num_items: int | torch.Tensor | None = None):
    """Mean squared error over labelled steps; the prediction is the raw head output."""
    mask = step_mask(labels)
    errors = (predictions.float() - labels.float()).pow(2) * mask
    return errors.sum() / _denominator(mask, num_items)


def masked_bce(logits: torch.Tensor, labels: torch.Tensor, num_items: int | torch.Tensor | None = None):
    """Binary cross-entropy on logits over labelled steps; soft labels in [0, 1] are valid targets."""
    mask = step_mask(labels)
    targets = torch.where(mask, labels.float(), torch.zeros_like(labels, dtype=torch.float32))
    losses = F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="none") * mask
    return losses.sum() / _denominator(mask, num_items)


def step_loss(loss_type: str, head_output: torch.Tensor, labels: torch.Tensor, num_items=None) -> torch.Tensor:
    if loss_type == "mse":
        return masked_mse(head_output, labels, num_items)
    if loss_type == "bce":
        return masked_bce(head_output, labels, num_items)
    raise ValueError(f"unknown loss {loss_type!r}; use one of {LOSS_TYPES}")


def scores_from_head(loss_type: str, head_output: torch.Tensor) -> torch.Tensor:
    """Step scores as DESIGN contract 4 defines them: a probability for bce, the raw output for mse."""
    return torch.sigmoid(head_output.float()) if loss_type == "bce" else head_output.float()


RANKING_SCORES = ("min", "last")


def chain_scores(head_output: torch.Tensor, labels: torch.Tensor,
                 how: str = "min") -> tuple[torch.Tensor, torch.Tensor]:
    """One score per row (a chain) from the head output at its labelled steps, and whether the row has one.

    min is prmkit's default aggregation (best-of-N ranks chains by their weakest step); sigmoid is monotone, so the
    min over logits ranks chains exactly as the min over step probabilities does. last reads the final labelled
    step. A row with no labelled step scores 0 and is marked False: it must take part in no pair."""
    mask = step_mask(labels)
    head = head_output.float()
    if how == "min":
        scores = torch.where(mask, head, torch.full_like(head, float("inf"))).amin(dim=-1)
    elif how == "last":
        positions = torch.arange(mask.shape[-1], device=mask.device)
        last = (mask * positions).argmax(dim=-1, keepdim=True)
        scores = head.gather(-1, last).squeeze(-1)
    else:
        raise ValueError(f"unknown chain score {how!r}; use one of {RANKING_SCORES}")
    has_step = mask.any(dim=-1)
    # zeros, not inf, where there is no step: an inf - inf in the pair matrix would put NaN into the backward pass
    return torch.where(has_step, scores, torch.zeros_like(scores)), has_step


def ranking_pairs(groups: torch.Tensor, correct: torch.Tensor, usable: torch.Tensor | None = None) -> torch.Tensor:
    """pairs[i, j]: row i is a right and row j a wrong sample of the same prompt. Rows of group -1 pair with none."""
    usable = torch.ones_like(correct, dtype=torch.bool) if usable is None else usable
    right = correct.bool() & usable & (groups >= 0)
    wrong = ~correct.bool() & usable & (groups >= 0)
    return (groups[:, None] == groups[None, :]) & right[:, None] & wrong[None, :]


def ranking_loss(chain_score: torch.Tensor, groups: torch.Tensor, correct: torch.Tensor,
                 usable: torch.Tensor | None = None, num_pairs: int | torch.Tensor | None = None) -> torch.Tensor:
    """Bradley-Terry loss between right and wrong samples of one prompt: -log sigmoid(s_right - s_wrong), summed
    over the pairs of this batch and divided by `num_pairs` (the pairs of the whole accumulated batch, as
    `num_items` is for the step loss), else by this batch's pairs. No pair gives 0, not NaN."""
    pairs = ranking_pairs(groups, correct, usable)
    margins = chain_score[:, None] - chain_score[None, :]
    losses = torch.where(pairs, F.softplus(-margins), torch.zeros_like(margins))
    return losses.sum() / _denominator(pairs, num_pairs)


def _denominator(mask: torch.Tensor, num_items) -> torch.Tensor | int:
    if num_items is None:
        # A batch with no labelled step gives a zero loss (and zero gradient), not a NaN.
        return mask.sum().clamp(min=1)
    if torch.is_tensor(num_items):
        return num_items.to(mask.device).clamp(min=1)
    return max(int(num_items), 1)
