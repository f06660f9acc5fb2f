"""Training throughput and memory on SmolLM2-135M: prmkit full fine-tune and LoRA vs the naive design.

The naive variant is what the replaced system did: a causal-LM forward with `output_hidden_states=True` (so the
full-vocabulary logits are computed and kept) and a linear head on the last hidden state. Every variant runs in its
own process (peak RSS is per process), on the same batches, in the same simple loop: forward, masked loss,
backward, AdamW step. Variants alternate across repeats so drift on a shared machine hits all of them alike.

    python bench/train_throughput.py --repeats 3 --steps 4 --batch-size 8 --out bench/results/train.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("naive_full", "prmkit_full", "prmkit_full_packed", "prmkit_lora", "prmkit_lora_top8",
            "prmkit_lora_top8_packed")


def build(variant: str):
    import torch
    from common import backbone_path
    from transformers import AutoModelForCausalLM

    from prmkit.model import apply_lora, load_token_classifier

    path = backbone_path()
    if variant == "naive_full":
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        head = torch.nn.Linear(lm.config.hidden_size, 1)

        class Naive(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lm, self.head = lm, head

            def forward(self, input_ids, attention_mask):
                out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
                return self.head(out.hidden_states[-1]).squeeze(-1)

        return Naive()
    model = load_token_classifier(path)
    if variant.startswith("prmkit_lora"):
        model = apply_lora(model, r=16, alpha=32, dropout=0.0, target_modules="all-linear", new_token_ids=[],
                           top_layers=8 if "top8" in variant else None)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, **batch):
            return self.model(**batch).logits.squeeze(-1)

    return Wrapped()


def run_variant(variant: str, steps: int, batch_size: int) -> dict:
    import torch
    from common import fixed_batches, peak_rss_mib, sgemm_gflops

    from prmkit.loss import masked_bce
    from prmkit.training.packing import REAL_TOKENS

    torch.manual_seed(0)
    batches = fixed_batches(steps + 1, batch_size, packed=variant.endswith("_packed"))
    model = build(variant).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)

    def step(batch):
        inputs = {k: v for k, v in batch.items() if k not in ("labels", REAL_TOKENS)}
        loss = masked_bce(model(**inputs), batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(batches[0])  # warm-up: allocator, optimizer state
    tokens = 0
    start = time.perf_counter()
    for batch in batches[1:]:
        step(batch)
        tokens += int(batch[REAL_TOKENS]) if REAL_TOKENS in batch else int(batch["attention_mask"].sum())
    seconds = time.perf_counter() - start
    non_embedding = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)
    return {"variant": variant, "tokens_per_s": tokens / seconds, "peak_rss_mib": peak_rss_mib(),
            "trainable_params": sum(p.numel() for p in trainable), "non_embedding_params": non_embedding,
            "sgemm_gflops": sgemm_gflops(), "seconds": seconds, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="bench/results/train.json")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_variant(args.one, args.steps, args.batch_size)))
        return
    results: dict[str, list[dict]] = {v: [] for v in args.variants}
    for repeat in range(args.repeats):
        for variant in args.variants:
            out = subprocess.run([sys.executable, __file__, "--one", variant, "--steps", str(args.steps),
                                  "--batch-size", str(args.batch_size)], capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results[variant].append(result)
            print(f"repeat {repeat + 1}: {variant:18s} {result['tokens_per_s']:8.1f} tok/s  "
                  f"peak RSS {result['peak_rss_mib']:7.0f} MiB", flush=True)
    summary = {}
    for variant, runs in results.items():
        summary[variant] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
            "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs),
            "sgemm_gflops": statistics.median(r["sgemm_gflops"] for r in runs),
            "trainable_params": runs[0]["trainable_params"],
            "non_embedding_params": runs[0]["non_embedding_params"],
        }
    for name in ("prmkit_full", "prmkit_full_packed"):
        full = summary.get(name)
        if full:
            # training FLOPs per token ~ 6 x parameters (forward 2N, backward 4N), attention's share ignored
            achieved = 6 * full["non_embedding_params"] * full["tokens_per_s"] / 1e9
            full["achieved_gflops"] = achieved
            full["flop_utilisation"] = achieved / full["sgemm_gflops"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "runs": results}, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
