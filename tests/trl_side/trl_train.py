"""Run inside .venv-trl (scripts/setup_trl.sh): train a tiny PRM for a few steps with TRL 1.13's real PRMTrainer
and save it as TRL saves one, then compute the reference scores with transformers alone: the saved folder loaded by
AutoModelForTokenClassification, each chain tokenized by TRL's tokenize_row (untruncated), read one chain per
forward pass, softmax over the two labels, P(label 1) at every position TRL put a step label on.

stdin: {"tokenizer": folder, "out": folder to save the PRM in, "train": rows, "score": rows, "seed": int,
"max_steps": int}. Prints one JSON object: the training losses, TRL's label positions and the reference scores."""

from __future__ import annotations

import json
import os
import sys
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForTokenClassification, AutoTokenizer, LlamaConfig, TrainerCallback  # noqa: E402
from trl.experimental.prm import PRMConfig, PRMTrainer  # noqa: E402


class Losses(TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def tiny_token_classifier(tokenizer, seed: int):
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, vocab_size=len(tokenizer),
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, num_labels=2)
    torch.manual_seed(seed)
    return AutoModelForTokenClassification.from_config(config)


def main() -> None:
    payload = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(payload["tokenizer"])
    model = tiny_token_classifier(tokenizer, payload["seed"])
    # bf16 (PRMConfig's default) is ~50x slower than fp32 on this CPU, and gradient checkpointing (its other
    # default) only saves memory a tiny model does not need; neither changes what is tokenized or saved.
    args = PRMConfig(output_dir=payload["out"] + "-trainer", max_steps=payload["max_steps"],
                     per_device_train_batch_size=4, learning_rate=5e-3, logging_steps=1, bf16=False,
                     gradient_checkpointing=False, use_cpu=True, report_to="none", save_strategy="no",
                     seed=payload["seed"], max_length=256)
    losses = Losses()
    trainer = PRMTrainer(model=model, args=args, train_dataset=Dataset.from_list(payload["train"]),
                         processing_class=tokenizer, callbacks=[losses])
    trainer.train()
    trainer.save_model(payload["out"])

    reference = AutoModelForTokenClassification.from_pretrained(payload["out"], dtype=torch.float32).eval()
    saved_tokenizer = AutoTokenizer.from_pretrained(payload["out"])
    positions, scores = [], []
    for row in payload["score"]:
        out = PRMTrainer.tokenize_row(row, saved_tokenizer, args.step_separator, None, None, False, True)
        where = [i for i, label in enumerate(out["labels"]) if label != -100]
        with torch.no_grad():
            logits = reference(input_ids=torch.tensor([out["input_ids"]])).logits[0].float()
        probabilities = torch.softmax(logits, dim=-1)[:, 1]
        positions.append(where)
        scores.append([probabilities[i].item() for i in where])
    print(json.dumps({"losses": losses.losses, "step_separator": args.step_separator, "positions": positions,
                      "scores": scores, "saved": sorted(os.listdir(payload["out"]))}))


if __name__ == "__main__":
    main()
