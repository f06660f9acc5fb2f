"""A language model taught the sums the policy gets wrong, read as a step score (bench/lm_step_features.py).

bench/lm_step_features.py found the policy's own readings of its steps capped at its confidence: a third of its
wrong samples go wrong first at a sum that is its own greedy answer, which no reading of its distribution can see.
This trains a second reader that does know those sums: the policy, fine-tuned on the true rows of
bench/lifecycle/arithmetic_steps.py (a step of a right training solution with its equation's numbers drawn anew,
in the policy's words) with the next-token loss on the stated result's tokens only, so it learns to compute, not to
phrase. The rows are the very draws bench/data_curve.py's `arith` PRM was trained on (its false rows left out, a
language model learns nothing from them), so the two ways of teaching the same sums compare.

    python bench/calculator.py --work /work/curve-room --out bench/results/calculator_room.json
    python bench/lm_step_features.py --work /work/curve-room --models policy,/work/curve-room/calculator ...
    python bench/arithmetic_knowledge.py --work /work/curve-room --models /work/curve-room/calculator ...

Writes the model to WORK/calculator (a transformers folder) and its training record to --out. Settings are fixed
here before any reading (nothing is chosen on the validation samples it is then read on).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from data_curve import drawn_by_policy, sampling_policy, subset  # noqa: E402
from lifecycle.arithmetic_steps import arithmetic_rows  # noqa: E402
from lifecycle.exact import equations  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic  # noqa: E402

IGNORE = -100


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="bench/data_curve.py's work folder")
    parser.add_argument("--size", type=int, default=192, help="training solutions the rows are drawn from")
    parser.add_argument("--per-solution", type=int, default=64,
                        help="rows drawn from each right solution (data_curve's --arithmetic-per-solution)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--train-layers", type=int, default=10,
                        help="the top layers trained (with the final norm); the rest and the tied embeddings stay "
                        "frozen, which makes a step about half as costly on a CPU as training every weight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "calculator.json"))
    return parser.parse_args(argv)


def true_rows(records: list[dict], per_solution: int) -> list[dict]:
    """data_curve's arithmetic rows of these records (seed 0, the same draws), the true ones only."""
    return [r for r in arithmetic_rows(records, per_solution, seed=0) if r["labels"][0] == 1]


def result_example(tokenizer, prompt_ids: list[int], step: str) -> tuple[list[int], list[int]]:
    """(input ids, labels) for one row: the prompt and the step, with only the tokens of the step's last stated
    result labelled (IGNORE elsewhere)."""
    last = equations(step)[-1]
    encoded = tokenizer(step, add_special_tokens=False, return_offsets_mapping=True)
    labels = [token if begin < last.result_end and last.result_start < end else IGNORE
              for token, (begin, end) in zip(encoded["input_ids"], encoded["offset_mapping"])]
    return list(prompt_ids) + encoded["input_ids"], [IGNORE] * len(prompt_ids) + labels


def batches(examples: list[tuple[list[int], list[int]]], batch_size: int, steps: int, seed: int):
    """`steps` batches of `batch_size`, passes over the examples in a fresh order each, right-padded."""
    import torch

    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(steps):
        while len(order) < batch_size:
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order += fresh
        chosen, order = order[:batch_size], order[batch_size:]
        width = max(len(examples[i][0]) for i in chosen)
        ids = torch.zeros((len(chosen), width), dtype=torch.long)
        labels = torch.full((len(chosen), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(chosen), width), dtype=torch.long)
        for row, i in enumerate(chosen):
            tokens, targets = examples[i]
            ids[row, :len(tokens)] = torch.tensor(tokens)
            labels[row, :len(targets)] = torch.tensor(targets)
            mask[row, :len(tokens)] = 1
        yield ids, labels, mask


def freeze_below(model, train_layers: int) -> tuple[int, int]:
    """Train only the top `train_layers` decoder layers and the final norm; (trainable, total) parameters."""
    layers = model.model.layers
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for module in (*layers[len(layers) - train_layers:], model.model.norm):
        for parameter in module.parameters():
            parameter.requires_grad_(True)
    return (sum(p.numel() for p in model.parameters() if p.requires_grad),
            sum(p.numel() for p in model.parameters()))


def train(model, examples, *, batch_size: int, steps: int, lr: float, seed: int, log_every: int = 10) -> list[dict]:
    """Next-token loss on the labelled tokens, AdamW, linear decay; the logged losses."""
    import torch

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / max(steps, 1))
    model.train()
    log, window = [], []
    for step, (ids, labels, mask) in enumerate(batches(examples, batch_size, steps, seed), start=1):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        window.append(float(loss.detach()))
        if step % log_every == 0 or step == steps:
            log.append({"step": step, "loss": round(sum(window) / len(window), 4)})
            print(f"step {step}/{steps} loss {log[-1]['loss']:.4f}", flush=True)
            window = []
    model.eval()
    return log


def main(argv=None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.generation.base import chat_prompt
    from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT

    args = parse_args(argv)
    started = time.perf_counter()
    work = Path(args.work).resolve()
    policy = sampling_policy(work)
    records = [r for r in subset(read_jsonl(work / "train" / "prm-train.jsonl"), args.size) if drawn_by_policy(r)]
    rows = true_rows(records, args.per_solution)
    if not rows:
        raise SystemExit(f"no right solution with an `a op b = c` step among the first {args.size} of "
                         f"{work / 'train' / 'prm-train.jsonl'}")
    tokenizer = AutoTokenizer.from_pretrained(policy)
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    prompts = {}
    examples = []
    for row in rows:
        if row["prompt"] not in prompts:
            prompts[row["prompt"]] = tokenizer(chat_prompt(tokenizer, row["prompt"], "", DEFAULT_SYSTEM_PROMPT),
                                               add_special_tokens=False)["input_ids"]
        examples.append(result_example(tokenizer, prompts[row["prompt"]], row["completions"][0]))
    trainable, total = freeze_below(model, args.train_layers)
    steps = max(1, round(args.epochs * len(examples) / args.batch_size))
    log = train(model, examples, batch_size=args.batch_size, steps=steps, lr=args.lr, seed=args.seed)
    folder = work / "calculator"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for split in ("train", "val"):  # bench/lm_step_features.py's readings of an earlier model in this folder
        (work / split / f"lm-token-values-{folder.name}.jsonl").unlink(missing_ok=True)
    result = {"command": "python bench/calculator.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "policy": policy, "model": str(folder),
              "solutions": len(records), "rows": len(rows), "steps": steps, "batch_size": args.batch_size,
              "lr": args.lr, "epochs": args.epochs,
              "train_layers": args.train_layers, "trainable_parameters": trainable, "parameters": total,
              "loss": log, "seconds": round(time.perf_counter() - started, 1)}
    write_json_atomic(Path(args.out), result)
    return result


if __name__ == "__main__":
    main()
