"""What a LoRA training step keeps for its backward pass: the tensors autograd saves in one forward of SmolLM2-135M
with prmkit's all-linear r16 adapters, grouped by the operation that made them and their last dimension.

    python bench/experiments/saved_activations.py --batch 4 --length 512 --out bench/results/saved_activations.json

Counts each storage once (a tensor several operations save, such as a layer's input read by the frozen weight
and by its adapter, is one storage) and leaves the model's own parameters out. This is the memory the peak of a
training step is made of, besides weights, gradients and optimizer state.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import backbone_path  # noqa: E402

from prmkit.model import apply_lora, load_token_classifier  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "saved_activations.json")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = apply_lora(load_token_classifier(backbone_path()), r=16, alpha=32, dropout=0.0,
                       target_modules="all-linear", new_token_ids=[])
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    by_kind: collections.Counter = collections.Counter()

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            made_by = tensor.grad_fn.name() if tensor.grad_fn is not None else "input"
            by_kind[f"{made_by} [..., {tensor.shape[-1] if tensor.dim() else 1}]"] += storage.nbytes()
        return tensor

    ids = torch.randint(100, 1000, (args.batch, args.length))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids)
    total = sum(by_kind.values())
    rows = [{"kind": kind, "mib": round(size / 2 ** 20, 1), "share": round(size / total, 3)}
            for kind, size in by_kind.most_common()]
    args.out.write_text(json.dumps({"batch": args.batch, "length": args.length, "attention":
                                    model.config._attn_implementation, "total_mib": round(total / 2 ** 20, 1),
                                    "by_kind": rows}, indent=2) + "\n")
    print(f"saved for backward: {total / 2 ** 20:.0f} MiB ({args.batch} x {args.length} tokens)")
    for row in rows:
        print(f"  {row['kind']:<55} {row['mib']:>8} MiB  {row['share']:.1%}")


if __name__ == "__main__":
    main()
