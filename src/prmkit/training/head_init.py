"""Start the head from a linear probe of the backbone instead of random weights (`training.head_init: probe`).

A randomly initialised head spends many optimizer steps finding which directions of the hidden state tell a right
step from a wrong one, and while it searches, the gradients it sends into the adapters are mostly noise. Fitting
the head first, in closed form, on the frozen backbone's hidden states at the labelled step positions, and then
fine-tuning everything, is the linear-probe-then-fine-tune recipe (LP-FT, Kumar et al., ICLR 2022): training
starts where a probe ends. The fit costs one forward pass, without gradients, over `rows` training chains.
"""

from __future__ import annotations

import torch

from prmkit.model import head_name
from prmkit.tokenize import IGNORE_INDEX, StepCollator


@torch.no_grad()
def step_features(model, chains, pad_token_id: int, batch_size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's input at every labelled step position, and the labels, over `chains` (fp32, on CPU)."""
    head = getattr(model, head_name(model))
    captured: list[torch.Tensor] = []
    hook = head.register_forward_hook(lambda module, args, output: captured.append(args[0]))
    collate = StepCollator(pad_token_id)
    device = next(model.parameters()).device
    features, labels = [], []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(chains), batch_size):
            batch = collate([{"input_ids": c.input_ids, "labels": c.labels} for c in chains[start:start + batch_size]])
            captured.clear()
            model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
            mask = batch["labels"] != IGNORE_INDEX
            features.append(captured[0].float().cpu()[mask])
            labels.append(batch["labels"][mask])
    finally:
        hook.remove()
        model.train(was_training)
    return torch.cat(features), torch.cat(labels)


def fit_linear_head(features: torch.Tensor, labels: torch.Tensor, loss_type: str,
                    l2: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of a linear head fitted to the labels: L2-regularised logistic regression for bce (soft
    labels allowed), ridge regression for mse. Features are standardised for the fit (hidden states have a few
    dimensions far larger than the rest) and the scaling is folded back into the weights."""
    mean = features.mean(dim=0)
    std = features.std(dim=0).clamp(min=1e-6)
    x = (features - mean) / std
    n, dim = x.shape
    if loss_type == "mse":
        design = torch.cat([x, torch.ones(n, 1)], dim=1).double()
        penalty = l2 * n * torch.eye(dim + 1, dtype=torch.float64)
        penalty[-1, -1] = 0.0  # the bias is not shrunk
        solution = torch.linalg.solve(design.T @ design + penalty, design.T @ labels.double().unsqueeze(1))
        w, b = solution[:-1, 0].float(), solution[-1, 0].float()
    else:
        w = torch.zeros(dim, requires_grad=True)
        b = torch.zeros((), requires_grad=True)
        optimizer = torch.optim.LBFGS([w, b], lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

        def objective():
            optimizer.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, labels.float())
            loss = loss + 0.5 * l2 * w.pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(objective)
        w, b = w.detach(), b.detach()
    weight = w / std
    bias = b - (weight * mean).sum()
    return weight, bias


def init_head_from_probe(model, chains, pad_token_id: int, loss_type: str, rows: int) -> dict:
    """Fit the head on up to `rows` chains and write it into the model; returns what the fit saw and the head
    (`weight`, `bias`), which `set_head` can put into another copy of the same backbone."""
    features, labels = step_features(model, chains[:rows], pad_token_id)
    weight, bias = fit_linear_head(features, labels, loss_type)
    set_head(model, weight, bias)
    return {"chains": min(rows, len(chains)), "steps": int(labels.numel()), "weight": weight, "bias": bias}


def set_head(model, weight: torch.Tensor, bias: torch.Tensor) -> None:
    head = getattr(model, head_name(model))
    with torch.no_grad():
        head.weight.copy_(weight.to(head.weight.dtype).view_as(head.weight))
        if head.bias is not None:
            head.bias.copy_(bias.to(head.bias.dtype).view_as(head.bias))
