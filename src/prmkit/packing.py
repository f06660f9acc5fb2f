"""Padding-free training batches, and the check that a model really reads them as separate chains."""

from __future__ import annotations

import torch

from prmkit.errors import PRMError
from prmkit.tokenize import IGNORE_INDEX, StepCollator


class PackedStepCollator:
    """Padding-free batches: the chains of a batch are concatenated into one row of shape (1, total tokens), with
    position ids restarting at 0 for each chain and no attention mask. transformers reads restarting position ids
    as packed sequences and keeps attention inside each chain (a block-diagonal mask, or flash-attention's
    variable-length kernel), so no compute is spent on padding and every chain sees exactly what it would alone."""

    def __call__(self, features: list[dict]) -> dict:
        import torch

        input_ids = [token for f in features for token in f["input_ids"]]
        positions = [i for f in features for i in range(len(f["input_ids"]))]
        batch = {"input_ids": torch.tensor([input_ids], dtype=torch.long),
                 "position_ids": torch.tensor([positions], dtype=torch.long)}
        if any("labels" in f for f in features):
            labels = [x for f in features for x in f.get("labels", [IGNORE_INDEX] * len(f["input_ids"]))]
            batch["labels"] = torch.tensor([labels], dtype=torch.float32)
        return batch


def check_packing_supported(model, chains, pad_token_id: int, tolerance: float = 1e-3) -> None:
    """Score two short chains packed into one row and padded as two rows; raise PRMError if the head outputs
    differ, which means this architecture's attention reads across the packed chains. Costs one forward pass
    over about 64 tokens, so a model that would silently train on mixed-up chains never starts."""
    if len(chains) < 2 or any(p.device.type == "meta" for p in model.parameters()):
        return  # nothing to compare, or weights not materialised here (e.g. DeepSpeed ZeRO-3 init)
    features = [{"input_ids": c.input_ids[:32]} for c in chains[:2]]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            packed = PackedStepCollator()(features)
            padded = StepCollator(pad_token_id)(features)
            packed_out = model(**{k: v.to(device) for k, v in packed.items()}).logits[0, :, 0]
            padded_out = model(**{k: v.to(device) for k, v in padded.items()}).logits[..., 0]
    finally:
        model.train(was_training)
    lengths = [len(f["input_ids"]) for f in features]
    expected = torch.cat([padded_out[row, :n] for row, n in enumerate(lengths)])
    difference = (packed_out.float() - expected.float()).abs().max().item()
    if difference > tolerance:
        raise PRMError(f"training.packing: {type(model).__name__} does not keep packed chains apart (head outputs "
                       f"differ from padded batches by {difference:.2g}); set training.packing=false, or try "
                       "model.attn_implementation=flash_attention_2 on a GPU")
