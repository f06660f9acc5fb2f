"""The model a TRL user passes (an object, a local folder, an alias, a hub id) -> the folder prmkit trains from.

A prmkit run records its base model as a folder and reloads it from there (a LoRA run's scorer loads the base, then
the adapter), so a model object is written once into prmkit's cache, under a key made of its weights, config and
tokenizer: the same starting model gives the same folder (a resumed run finds the settings it started with), a
changed one a new folder. A folder that needs no change is used where it is.

TRL trains `AutoModelForTokenClassification(num_labels=2)` with cross-entropy, a step's score being P(label 1).
prmkit's PRM has one output trained with BCE, a step's score being sigmoid(logit). A two-label head becomes one
logit, the difference of its rows: sigmoid(z1 - z0) is exactly softmax(z0, z1)[1], so the starting model scores
every step as it did, and BCE on z1 - z0 is the same loss as TRL's two-class cross-entropy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

from prmkit.backbones import cache_dir, resolve_base
from prmkit.errors import PRMError
from prmkit.files import PARTIAL_PREFIX, write_json_atomic
from prmkit.model import HEAD_NAMES, refuse_pickle_weights

PREPARED_FILE = "prmkit_trl_source.json"  # what a cached folder was made from, for a person reading the cache
DROPOUT_SUFFIXES = ("dropout", "pdrop", "dropout_prob", "dropout_rate")


@dataclass
class Base:
    path: str  # what model.base is set to: a folder (or a hub id, used as it is)
    tokenizer: object  # the tokenizer prmkit will load from `path`, loaded here to count tokens
    converted: str | None = None  # how the head was changed, for the docs and the log ("two labels -> one logit")


def prepare_base(model, processing_class, *, disable_dropout: bool) -> Base:
    """The folder prmkit trains from, for `model` as a TRL user passes it."""
    if isinstance(model, (str, os.PathLike)):
        return _from_name(str(model), processing_class, disable_dropout)
    if not isinstance(model, torch.nn.Module):
        raise PRMError(f"model={type(model).__name__}: give a transformers model object, a local model folder, a "
                       "prmkit alias (e.g. 'smollm2-135m') or a hub id")
    if processing_class is None:
        source = getattr(model, "name_or_path", "")
        if not (source and Path(source, "config.json").is_file()):
            raise PRMError("processing_class=None with a model object: pass the model's tokenizer as processing_class "
                           "(AutoTokenizer.from_pretrained(...)), as TRL's PRMTrainer requires")
        processing_class = AutoTokenizer.from_pretrained(source)
    return _from_object(model, processing_class, disable_dropout)


def _from_name(name: str, processing_class, disable_dropout: bool) -> Base:
    path = resolve_base(name)
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise PRMError(f"model={name!r}: cannot read its config ({err}); give a local model folder, a prmkit alias or "
                       "a hub id") from None
    own_tokenizer = AutoTokenizer.from_pretrained(path)
    reasons = []
    if _head_labels(config) not in (None, 1):
        reasons.append("its head has two labels")
    if disable_dropout and _dropout_fields(config):
        reasons.append("its config has dropout")
    if processing_class is not None and _fingerprint(processing_class) != _fingerprint(own_tokenizer):
        reasons.append("processing_class differs from its tokenizer")
    if not reasons:
        return Base(path=path, tokenizer=own_tokenizer)
    print(f"prmkit: {name}: {', '.join(reasons)}; writing the starting model into prmkit's cache", file=sys.stderr,
          flush=True)
    refuse_pickle_weights(path)
    loaded = AutoModelForTokenClassification.from_pretrained(path, dtype=torch.float32, use_safetensors=True,
                                                             num_labels=_head_labels(config) or 1)
    return _from_object(loaded, processing_class or own_tokenizer, disable_dropout)


def _from_object(model, tokenizer, disable_dropout: bool) -> Base:
    from peft import PeftModel

    if isinstance(model, PeftModel):
        raise PRMError("model is a peft model: pass the base model and the LoRA settings as peft_config (prmkit wraps "
                       "the model itself), or merge the adapter first with model.merge_and_unload()")
    state = {name: tensor for name, tensor in model.state_dict().items()}
    config = model.config.__class__.from_dict(model.config.to_dict())
    config.architectures = [type(model).__name__]  # what save_pretrained writes (and sets on the object's config)
    converted = None
    head = next((name for name in HEAD_NAMES if isinstance(getattr(model, name, None), torch.nn.Linear)), None)
    if head is not None:
        labels = getattr(model, head).out_features
        if labels == 2:
            weight, bias = state[f"{head}.weight"], state.get(f"{head}.bias")
            state[f"{head}.weight"] = (weight[1] - weight[0]).unsqueeze(0)
            if bias is not None:
                state[f"{head}.bias"] = (bias[1] - bias[0]).unsqueeze(0)
            converted = "two-label head -> one logit (row 1 - row 0)"
        elif labels != 1:
            raise PRMError(f"model has a {labels}-label head: a PRM step is right or wrong; use num_labels=2 (as TRL) "
                           "or num_labels=1")
        config.num_labels = 1
    if disable_dropout:
        for key in _dropout_fields(config):
            setattr(config, key, 0.0)
    key = _content_key(state, config, tokenizer)
    target = cache_dir() / "trl-bases" / key
    if not (target / "config.json").is_file():
        _write_folder(model, state, config, tokenizer, target)
    write_json_atomic(target / PREPARED_FILE, {"source": str(getattr(model, "name_or_path", "") or "a model object"),
                                              "head": converted, "dropout_disabled": disable_dropout})
    return Base(path=str(target), tokenizer=AutoTokenizer.from_pretrained(str(target)), converted=converted)


def _write_folder(model, state: dict, config, tokenizer, target: Path) -> None:
    """Written whole into a staging folder, then renamed: a killed write never leaves a folder that looks ready."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f"{PARTIAL_PREFIX}{target.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, state_dict={k: v.detach().contiguous() for k, v in state.items()})
    config.save_pretrained(staging)  # the one-logit, dropout-free config replaces the object's
    tokenizer.save_pretrained(staging)
    try:
        os.replace(staging, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)  # another process wrote the same content first


def _head_labels(config) -> int | None:
    """Labels of a token-classification checkpoint's head; None for a backbone without one (a causal LM)."""
    if not any(a.endswith("ForTokenClassification") for a in (config.architectures or [])):
        return None
    return config.num_labels


def _dropout_fields(config) -> list[str]:
    return sorted(key for key, value in config.to_dict().items()
                  if key.endswith(DROPOUT_SUFFIXES) and isinstance(value, float) and value > 0)


def _fingerprint(tokenizer) -> str:
    """A tokenizer's identity: the digest of the files it saves (vocabulary, merges, special tokens, settings)."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        digest = hashlib.sha256()
        for path in sorted(Path(folder).iterdir()):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _content_key(state: dict, config, tokenizer) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps(config.to_dict(), sort_keys=True, default=str).encode())
    digest.update(_fingerprint(tokenizer).encode())
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()[:20]
