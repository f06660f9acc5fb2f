"""Masked step losses. Pure functions: per-token predictions and labels in, one scalar out.

Positions whose label is IGNORE_INDEX carry no step label and contribute nothing. The loss is a sum over labelled
steps divided by `num_items`: the number of labelled steps in the whole accumulated batch when the trainer knows it,
else in this batch. That makes gradient accumulation equal to one big batch instead of a mean of means.
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


def _denominator(mask: torch.Tensor, num_items) -> torch.Tensor | int:
    if num_items is None:
        # A batch with no labelled step gives a zero loss (and zero gradient), not a NaN.
        return mask.sum().clamp(min=1)
    if torch.is_tensor(num_items):
        return num_items.to(mask.device).clamp(min=1)
    return max(int(num_items), 1)
