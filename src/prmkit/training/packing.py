"""Padding-free training batches, and the check that a model really reads them as separate chains."""

from __future__ import annotations

import torch

from prmkit.errors import PRMError
from prmkit.tokenize import IGNORE_INDEX, StepCollator

REAL_TOKENS = "real_tokens"  # batch key the trainer pops before the forward pass, for an honest tokens/s
HALF_PRECISION_TOLERANCE = 0.05  # of the largest head output, for the packing check under bf16/fp16 autocast


class PackedStepCollator:
    """Padding-free batches. The chains of a batch are packed, longest first, into rows no longer than the batch's
    longest chain (first fit), with position ids restarting at 0 for each chain and no attention mask.
    transformers reads restarting position ids as packed sequences and keeps attention inside each chain (a
    block-diagonal mask, or flash-attention's variable-length kernel), so every chain sees exactly what it would
    alone. Rows capped at the longest chain keep attention's cost where padded batches have it (one row of the
    whole batch would make a dense mask's cost grow with the square of the batch), while the padding left is
    only the unfilled end of some rows, which forms a segment of its own and carries no label.
    `max_row_tokens` raises the cap (e.g. one row per batch for flash-attention)."""

    def __init__(self, pad_token_id: int = 0, max_row_tokens: int | None = None):
        self.pad_token_id = pad_token_id
        self.max_row_tokens = max_row_tokens

    def __call__(self, features: list[dict]) -> dict:
        lengths = [len(f["input_ids"]) for f in features]
        capacity = max(max(lengths), self.max_row_tokens or 0)
        rows: list[list[int]] = []
        fill: list[int] = []
        for index in sorted(range(len(features)), key=lambda i: -lengths[i]):
            row = next((r for r, used in enumerate(fill) if used + lengths[index] <= capacity), None)
            if row is None:
                rows.append([])
                fill.append(0)
                row = len(rows) - 1
            rows[row].append(index)
            fill[row] += lengths[index]
        width = max(fill)
        has_labels = any("labels" in f for f in features)
        input_ids, positions, labels = [], [], []
        for row, used in zip(rows, fill):
            ids, pos, lab = [], [], []
            for index in row:
                ids += features[index]["input_ids"]
                pos += range(lengths[index])
                lab += features[index].get("labels", [IGNORE_INDEX] * lengths[index])
            # The unfilled end restarts its positions too: a segment of its own that no chain attends to.
            input_ids.append(ids + [self.pad_token_id] * (width - used))
            positions.append(pos + list(range(width - used)))
            labels.append(lab + [IGNORE_INDEX] * (width - used))
        batch = {"input_ids": torch.tensor(input_ids, dtype=torch.long),
                 "position_ids": torch.tensor(positions, dtype=torch.long),
                 REAL_TOKENS: torch.tensor(sum(lengths))}
        if has_labels:
            batch["labels"] = torch.tensor(labels, dtype=torch.float32)
        return batch


def check_packing_supported(model, chains, pad_token_id: int, tolerance: float = 1e-3) -> None:
    """Score two short chains packed into one row and padded as two rows; raise PRMError if the head outputs
    differ, which means this architecture's attention reads across the packed chains. Costs one forward pass
    over about 64 tokens, so a model that would silently train on mixed-up chains never starts. Run it under the
    run's autocast (flash-attention reads bf16/fp16 only); the tolerance then allows for half-precision rounding."""
    if len(chains) < 2 or any(p.device.type == "meta" for p in model.parameters()):
        return  # nothing to compare, or weights not materialised here (e.g. DeepSpeed ZeRO-3 init)
    features = [{"input_ids": c.input_ids[:32]} for c in chains[:2]]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = PackedStepCollator(pad_token_id, max_row_tokens=64)(features)  # both chains in one row
            packed.pop(REAL_TOKENS)
            padded = StepCollator(pad_token_id)(features)
            packed_out = model(**{k: v.to(device) for k, v in packed.items()}).logits[0, :, 0]
            padded_out = model(**{k: v.to(device) for k, v in padded.items()}).logits[..., 0]
    finally:
        model.train(was_training)
    lengths = [len(f["input_ids"]) for f in features]
    expected = torch.cat([padded_out[row, :n] for row, n in enumerate(lengths)]).float()
    if torch.is_autocast_enabled(device.type):
        # bf16/fp16 forwards round packed and padded batches differently (other kernel shapes); a chain that reads
        # its neighbour's tokens differs by far more than that
        tolerance = max(tolerance, HALF_PRECISION_TOLERANCE * expected.abs().max().item())
    difference = (packed_out.float() - expected).abs().max().item()
    if difference > tolerance:
        attention = getattr(getattr(model, "config", None), "_attn_implementation", None) or "the default"
        raise PRMError(f"training.packing: {type(model).__name__} with attention {attention} does not keep packed "
                       f"chains apart (head outputs differ from padded batches by {difference:.2g}, more than "
                       f"{tolerance:.2g}); set training.packing=false. Another model.attn_implementation may keep "
                       "them apart: this same check runs at the start of every packed run")
