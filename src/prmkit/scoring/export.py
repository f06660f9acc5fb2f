"""`prmkit export RUN --merge OUT`: a standard transformers folder that scores without prmkit installed."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from prmkit.errors import PRMError
from prmkit.model import PRMMetadata, load_prm, merge_adapter


def export_merged(run_folder: str | Path, out_folder: str | Path, *, overwrite: bool = False) -> Path:
    out = prepare_out_folder(out_folder, overwrite)
    model, tokenizer, metadata = load_prm(run_folder)
    model = merge_adapter(model)
    describe_scoring(model.config, metadata)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    replace(metadata, finetune="merged", base_path=str(out.resolve())).save(out)
    return out


def prepare_out_folder(out_folder: str | Path, overwrite: bool) -> Path:
    out = Path(out_folder)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise PRMError(f"{out} already holds files; choose an empty folder or pass --overwrite")
        shutil.rmtree(out)
    return out


def describe_scoring(config, metadata: PRMMetadata) -> None:
    """Plain-transformers users read these from config.json to score exactly as prmkit does."""
    config.prm_separator = metadata.separator
    config.prm_loss = metadata.loss
    config.prm_score = "sigmoid(logits)" if metadata.loss == "bce" else "logits"
    config.prm_max_length = metadata.max_length
