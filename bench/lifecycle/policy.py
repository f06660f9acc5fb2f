"""The lifecycle benchmark's policy: SmolLM2-135M-Instruct fine-tuned (all weights, transformers' Trainer) on the
gold chains of small-number synthetic problems, in the exact prompt prmkit's generation backends send (chat
template, prmkit's default system prompt) and the layout that label and search cut (steps at a blank line, the
last closing with "The answer is \\boxed{N}.").

    python bench/lifecycle/policy.py            # builds once into the cache, then prints where it is

The folder is keyed on every setting, so a changed recipe builds a new one; it is an ordinary transformers model
folder that both generation backends load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lifecycle.problems import disjoint_splits, solution_text  # noqa: E402
from prmkit.backbones import cache_dir, resolve_base  # noqa: E402
from prmkit.generation.base import chat_prompt  # noqa: E402
from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT  # noqa: E402


@dataclass(frozen=True)
class PolicyRecipe:
    base: str = "smollm2-135m"
    chains: int = 1000
    epochs: float = 1.0
    lr: float = 2e-4
    batch_size: int = 16
    warmup_ratio: float = 0.05
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def policy_folder(recipe: PolicyRecipe) -> Path:
    return cache_dir() / "bench" / f"lifecycle-policy-{recipe.key()}"


def sft_examples(tokenizer, records: list[dict]) -> list[dict]:
    """input_ids and labels per chain; the prompt's tokens are masked so only the solution is learned."""
    examples = []
    end = tokenizer.eos_token  # SmolLM2's chat turn ends with <|im_end|>, its eos
    for record in records:
        prompt = chat_prompt(tokenizer, record["prompt"], "", DEFAULT_SYSTEM_PROMPT)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        target_ids = tokenizer(solution_text(record["completions"], record["gold_answer"]) + end,
                               add_special_tokens=False)["input_ids"]
        examples.append({"input_ids": prompt_ids + target_ids, "labels": [-100] * len(prompt_ids) + target_ids})
    return examples


def build_policy(recipe: PolicyRecipe, *, log=print) -> Path:
    """The policy folder, trained now if the cache lacks it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    folder = policy_folder(recipe)
    if (folder / "recipe.json").is_file():
        return folder
    base = resolve_base(recipe.base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    records = disjoint_splits({"sft": recipe.chains})["sft"]
    examples = sft_examples(tokenizer, records)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def collate(rows: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), pad)
        labels = torch.full((len(rows), width), -100)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n], labels[i, :n], mask[i, :n] = torch.tensor(r["input_ids"]), torch.tensor(r["labels"]), 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    scratch = folder.with_name(folder.name + ".partial")
    args = TrainingArguments(
        output_dir=str(scratch), per_device_train_batch_size=recipe.batch_size, num_train_epochs=recipe.epochs,
        learning_rate=recipe.lr, warmup_steps=recipe.warmup_ratio, lr_scheduler_type="cosine", weight_decay=0.0,
        logging_steps=10, save_strategy="steps", save_steps=50, save_total_limit=1, report_to=[],
        seed=recipe.seed, use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0,
        remove_unused_columns=False, disable_tqdm=not sys.stderr.isatty())
    trainer = Trainer(model=model, args=args, train_dataset=examples, data_collator=collate)
    resume = any(scratch.glob("checkpoint-*"))
    started = time.perf_counter()
    log(f"policy: fine-tuning {recipe.base} on {len(examples)} chains ({recipe}){' (resumed)' if resume else ''}")
    trainer.train(resume_from_checkpoint=resume or None)
    seconds = time.perf_counter() - started
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    (folder / "recipe.json").write_text(json.dumps(
        {**asdict(recipe), "train_seconds": round(seconds, 1), "first_loss": losses[:1], "last_loss": losses[-1:],
         "tokens": sum(len(e["input_ids"]) for e in examples)}, indent=1))
    log(f"policy: {seconds:.0f} s, loss {losses[:1]} -> {losses[-1:]}, saved to {folder}")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = PolicyRecipe()
    for field, value in asdict(defaults).items():
        parser.add_argument("--" + field.replace("_", "-"), type=type(value), default=value)
    args = parser.parse_args()
    recipe = PolicyRecipe(**{field: getattr(args, field) for field in asdict(defaults)})
    print(build_policy(recipe))


if __name__ == "__main__":
    main()
