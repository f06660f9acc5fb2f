"""One training run of TRL's PRM example, as TRL 1.13 documents it, with the trainer from TRL or from prmkit's
drop-in: the script is the same but for the import line. Run by bench/trl_dropin.py inside .venv-trl (TRL 1.13.0
and prmkit side by side, scripts/setup_trl.sh); prints one JSON line.

    python bench/trl_dropin_run.py trl|prmkit MODEL_DIR ROWS.jsonl OUT_DIR [MAX_LENGTH]
"""

import json
import resource
import sys
import time

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForTokenClassification, AutoTokenizer

trainer_from, model_dir, data, out = sys.argv[1:5]
max_length = int(sys.argv[5]) if len(sys.argv) > 5 else 256
if trainer_from == "trl":
    from trl.experimental.prm import PRMConfig, PRMTrainer
else:
    from prmkit.trl import PRMConfig, PRMTrainer

torch.set_num_threads(2)
rows = [json.loads(line) for line in open(data, encoding="utf-8")]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token
torch.manual_seed(0)  # the new two-label head starts the same in both runs: the loss curves compare training alone
model = AutoModelForTokenClassification.from_pretrained(model_dir, num_labels=2)
model.config.pad_token_id = tokenizer.pad_token_id
peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="TOKEN_CLS",
                         modules_to_save=["score"])
args = PRMConfig(output_dir=out, per_device_train_batch_size=4, num_train_epochs=1, learning_rate=1e-4,
                 logging_steps=1, save_strategy="no", max_length=max_length, report_to="none",
                 gradient_checkpointing=False, bf16=False, use_cpu=True, seed=0)
trainer = PRMTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=Dataset.from_list(rows),
                     peft_config=peft_config)
started = time.perf_counter()
result = trainer.train()
seconds = time.perf_counter() - started
print(json.dumps({"trainer": trainer_from, "rows": len(rows), "train_s": round(seconds, 2),
                  "rows_per_s": round(len(rows) / seconds, 3), "train_loss": result.training_loss,
                  "losses": [round(e["loss"], 4) for e in trainer.state.log_history if "loss" in e],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
