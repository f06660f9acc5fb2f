"""`PRMTrainer.evaluate()`: the validation that prmkit's training runs (same tokenization, loss and metrics:
eval_loss, eval_accuracy, eval_auroc, ...), on a trained run folder or on the model training starts from."""

from __future__ import annotations

from functools import partial

from transformers import Trainer, TrainingArguments

from prmkit.config import Config
from prmkit.device import resolve_precision
from prmkit.errors import PRMError
from prmkit.model import PRMMetadata, load_prm, load_token_classifier, load_tokenizer
from prmkit.tokenize import StepCollator, tokenize_records
from prmkit.training.trainer import ChainDataset, loss_function
from prmkit.training.validation import keep_head_output, make_compute_metrics


def evaluate_rows(config: Config, rows: list[dict], *, trained: bool, metric_key_prefix: str = "eval") -> dict:
    """Metrics of the run's final model (`trained`) or of its starting model over `rows` (validated records)."""
    if trained:
        model, tokenizer, metadata = load_prm(config.run_dir)
    else:
        tokenizer = load_tokenizer(config.model.base)
        model = load_token_classifier(config.model.base)
        model.config.pad_token_id = tokenizer.pad_token_id
        metadata = PRMMetadata.from_config(config, config.model.base)
    chains, stats = tokenize_records(tokenizer, rows, separator=metadata.separator, max_length=metadata.max_length,
                                     train_on_last_step_only=metadata.train_on_last_step_only)
    if not chains:
        raise PRMError(f"no evaluation row has a labelled step within max_length={metadata.max_length} "
                       f"({stats.drop_reasons}); raise max_length or check the eval_dataset")
    precision = resolve_precision(config.precision)
    args = TrainingArguments(
        output_dir=str(config.run_dir), per_device_eval_batch_size=config.training.eval_batch_size
        or config.training.batch_size, report_to="none", bf16=precision.bf16, fp16=precision.fp16,
        use_cpu=precision.device == "cpu", label_names=["labels"], remove_unused_columns=False)
    trainer = Trainer(model=model, args=args, data_collator=StepCollator(tokenizer.pad_token_id),
                      compute_loss_func=partial(loss_function, metadata.loss),
                      compute_metrics=make_compute_metrics(metadata.loss),
                      preprocess_logits_for_metrics=keep_head_output)
    return trainer.evaluate(ChainDataset(chains), metric_key_prefix=metric_key_prefix)
