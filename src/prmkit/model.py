"""The PRM: a transformers `*ForTokenClassification` model with one output (a scalar head on every token).

That class is the backbone without its LM head, so no full-vocabulary logits are ever computed, and a merged
export is a standard transformers folder. LoRA goes through peft, which wraps the backbone for real; the head
(and a new separator token's embedding, if one is added) is trained and saved with the adapter.
"""

from __future__ import annotations

import json
import pickle
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

from prmkit.errors import PRMError

METADATA_FILE = "prmkit.json"
HEAD_NAMES = ("score", "classifier")
# Unpickling a weight file can run any code it carries, so weights load from safetensors unless model.allow_pickle.
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
PICKLE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Pickles the Trainer writes beside the weights of a checkpoint. transformers reads them with weights_only=True on
# resume (training_args.bin is never read), and they hold no weights, so they do not make a folder pickle-based.
TRAINER_PICKLES = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
_warned_remote_code: set[str] = set()


@dataclass
class PRMMetadata:
    """Everything besides weights that scoring needs to read a checkpoint exactly as training did."""
    base_model: str
    base_path: str
    finetune: str  # lora | full | merged
    loss: str
    separator: str
    max_length: int
    label_scheme: str = "auto"
    neutral_label: str = "positive"
    train_on_last_step_only: bool = False
    added_tokens: list[str] = field(default_factory=list)
    num_layers: int | None = None  # the backbone was cut to its first N layers (model.num_layers)
    format_version: int = 1

    @classmethod
    def from_config(cls, config, base_path: str, *, finetune: str | None = None, label_scheme: str = "auto",
                    added_tokens: list[str] | tuple = ()) -> "PRMMetadata":
        """What a run of `config` (a prmkit.config.Config) writes beside its weights; `finetune` overrides the
        config's for a model that was not trained that way (the demo's untrained head)."""
        return cls(base_model=config.model.base, base_path=base_path, finetune=finetune or config.model.finetune,
                   loss=config.loss.type, separator=config.data.separator, max_length=config.data.max_length,
                   label_scheme=label_scheme, neutral_label=config.data.neutral_label,
                   train_on_last_step_only=config.data.train_on_last_step_only, added_tokens=list(added_tokens),
                   num_layers=config.model.num_layers)

    def save(self, folder: str | Path) -> None:
        Path(folder, METADATA_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> "PRMMetadata":
        path = Path(folder, METADATA_FILE)
        if not path.is_file():
            raise PRMError(f"{folder}: no {METADATA_FILE}; point to a prmkit run folder, checkpoint or export")
        data = json.loads(path.read_text(encoding="utf-8"))
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def refuse_pickle_weights(folder: str | Path, allow_pickle: bool = False) -> None:
    """Raise PRMError when a local model folder holds its weights only in pickle files (or its config.json points
    transformers at one), unless the user opted in with model.allow_pickle."""
    folder = Path(folder)
    if allow_pickle or not folder.is_dir():
        return  # a hub id: use_safetensors=True makes transformers refuse pickle weights itself
    names = {p.name for p in folder.iterdir()}
    pickles = sorted(n for n in names if n.endswith(PICKLE_WEIGHT_SUFFIXES) and n not in TRAINER_PICKLES
                     and not n.startswith("rng_state"))
    explicit = _explicit_weights_file(folder)
    if explicit and not explicit.endswith((".safetensors", ".safetensors.index.json")):
        raise PRMError(f"{folder}/config.json sets transformers_weights={explicit!r}, a pickle file; loading it "
                       "can run code hidden in the file. Convert the weights to safetensors, or set "
                       "model.allow_pickle=true if you trust where the folder came from")
    if pickles and not names & set(SAFE_WEIGHTS):
        raise PRMError(f"{folder} holds its weights only as pickle files ({', '.join(pickles)}); loading a pickle can "
                       "run code hidden in the file. Convert them to safetensors (load them once where you trust "
                       "them, then save_pretrained), or set model.allow_pickle=true if you trust where the folder "
                       "came from")


def _explicit_weights_file(folder: Path) -> str | None:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no readable config.json: transformers reports that itself
    value = config.get("transformers_weights") if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


def refused_object(err: Exception) -> str:
    """The line of torch's weights_only refusal that names the object (its first line advises weights_only=False,
    which is exactly what must not be done with an untrusted file)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    named = [line for line in lines if "Unsupported" in line or "GLOBAL" in line]
    return (named or lines or [type(err).__name__])[0][:300]


def warn_remote_code(path: str, trust_remote_code: bool) -> None:
    """Say it loudly (once per model and process) when code shipped with a model may run here."""
    if trust_remote_code and str(path) not in _warned_remote_code:
        _warned_remote_code.add(str(path))
        print(f"prmkit: warning: model.trust_remote_code is on: Python code shipped with {path} may run on this "
              "machine with your permissions. Turn it off unless you trust the model's source",
              file=sys.stderr, flush=True)


def load_tokenizer(path: str, trust_remote_code: bool = False):
    warn_remote_code(path, trust_remote_code)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise PRMError(f"cannot load a tokenizer from {path}: {err}") from None
    if tokenizer.pad_token_id is None:
        # Padding is masked out, so any existing token will do; EOS is the conventional choice.
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    return tokenizer


def load_token_classifier(path: str, *, trust_remote_code: bool = False, attn_implementation: str | None = None,
                          allow_pickle: bool = False, num_layers: int | None = None):
    """A `*ForTokenClassification` model with one label, fp32 weights (master weights stay fp32 under autocast).
    Weights come from safetensors files only, unless `allow_pickle` (see `refuse_pickle_weights`). `num_layers`
    keeps only the first N transformer layers (see `truncate_config`)."""
    refuse_pickle_weights(path, allow_pickle)
    warn_remote_code(path, trust_remote_code)
    kwargs = {"dtype": torch.float32, "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        config = AutoConfig.from_pretrained(path, num_labels=1, trust_remote_code=trust_remote_code)
        # No dropout in front of the head: the target is a regression/probability, and scores stay deterministic.
        config.classifier_dropout = 0.0
        # A PRM never generates: no KV cache to fill, and without one transformers reads restarting position ids
        # as packed chains (training.packing).
        config.use_cache = False
        if num_layers:
            truncate_config(config, num_layers, path)
        # None lets transformers fall back to a pickle file, which it reads with torch.load(weights_only=True)
        with _quiet_unused_layer_weights(bool(num_layers)):
            return AutoModelForTokenClassification.from_pretrained(
                path, config=config, use_safetensors=None if allow_pickle else True, **kwargs)
    except PRMError:
        raise
    except ValueError as err:
        if "Unrecognized configuration class" in str(err):
            raise PRMError(f"{path}: this architecture has no ForTokenClassification class in transformers; "
                           "prmkit supports Llama-, Qwen2-, Mistral-, GPT-2-style and other such models") from None
        raise PRMError(f"cannot load model {path}: {err}") from None
    except pickle.UnpicklingError as err:  # allow_pickle: transformers unpickles with weights_only=True
        raise PRMError(f"cannot load model {path}: a weight file holds more than tensors and is not unpickled "
                       f"({refused_object(err)}); get the weights as safetensors from a source you trust") from None
    except OSError as err:
        hint = ("; prmkit loads safetensors weights only: convert the weights, or set model.allow_pickle=true if you "
                "trust the source" if not allow_pickle and "safetensors" in str(err) else "")
        raise PRMError(f"cannot load model {path}: {err}{hint}") from None


# Where a config says how many positions the backbone has (GPT-2's n_positions; most others' max_position_embeddings).
CONTEXT_LENGTH_KEYS = ("max_position_embeddings", "n_positions")


def context_length(config) -> int | None:
    """The most tokens the backbone reads as one sequence, from its config; None when the config does not say.
    Past it a learned position table has no entry and rotary positions were never trained on."""
    return next((value for key in CONTEXT_LENGTH_KEYS
                 if isinstance(value := getattr(config, key, None), int) and value > 0), None)


def base_context_length(path: str, trust_remote_code: bool = False) -> int | None:
    """`context_length` of a backbone, read from its config alone, before any weights are loaded."""
    warn_remote_code(path, trust_remote_code)
    try:
        return context_length(AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code))
    except (OSError, ValueError):
        return None  # load_token_classifier reports a model it cannot read, with the fix


LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def truncate_config(config, keep: int, path: str) -> None:
    """Make `config` describe only the first `keep` transformer layers, so from_pretrained builds and fills just those
    (the final norm is kept and the head reads it). What a step's correctness needs is often clearest in a middle
    layer of a small backbone, and every layer cut is compute saved in training and scoring."""
    key = layer_count_key(config)
    if key is None:
        raise PRMError(f"{path}: cannot tell how many layers this model has; remove model.num_layers")
    total = getattr(config, key)
    if keep > total:
        raise PRMError(f"model.num_layers={keep} but {path} has {total} layers; use at most {total}")
    setattr(config, key, keep)
    # Per-layer lists (attention kinds, sliding windows) must stay as long as the layer count.
    for name in ("layer_types", "sliding_window_pattern_list"):
        value = getattr(config, name, None)
        if isinstance(value, list) and len(value) == total:
            setattr(config, name, value[:keep])


@contextmanager
def _quiet_unused_layer_weights(active: bool):
    """The cut layers' weights are left unread on purpose; transformers would report each one as unexpected."""
    if not active:
        yield
        return
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def head_name(model) -> str:
    for name in HEAD_NAMES:
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return name
    raise PRMError(f"{type(model).__name__} has no 'score' or 'classifier' head; this architecture is not supported")


def add_separator_token(model, tokenizer, separator: str) -> list[str]:
    """Make the separator one new special token. Its embedding starts at the mean of the existing embeddings, a
    neutral point the model has seen the neighbourhood of, rather than random noise."""
    if separator in tokenizer.get_vocab():
        return []
    tokenizer.add_special_tokens({"additional_special_tokens": [separator]})
    old_size = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        weights = model.get_input_embeddings().weight
        weights[old_size:] = weights[:old_size].mean(dim=0, keepdim=True)
    return [separator]


def layer_count_key(config) -> str | None:
    """The config field that holds the number of transformer layers (its name differs between architectures)."""
    return next((key for key in LAYER_COUNT_KEYS if isinstance(getattr(config, key, None), int)), None)


def num_layers(model) -> int:
    key = layer_count_key(model.config)
    if key is not None:
        return getattr(model.config, key)
    raise PRMError(f"cannot tell how many layers {type(model).__name__} has; remove lora.top_layers")


def linear_module_names(model) -> list[str]:
    """Names (last component) of the linear layers inside the transformer blocks, as peft's target_modules."""
    from transformers.pytorch_utils import Conv1D

    head = head_name(model)
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, (torch.nn.Linear, Conv1D)) and not name.startswith(head)}
    return sorted(names)


def apply_lora(model, *, r: int, alpha: float, dropout: float, target_modules, new_token_ids: list[int],
               top_layers: int | None = None):
    from peft import LoraConfig, TaskType, get_peft_model

    layers = None
    if top_layers:
        total = num_layers(model)
        if top_layers > total:
            raise PRMError(f"lora.top_layers={top_layers} but the model has {total} layers; use at most {total}")
        layers = list(range(total - top_layers, total))
        if target_modules == "all-linear":  # peft needs explicit names when layers are restricted
            target_modules = linear_module_names(model)
    lora_config = LoraConfig(
        task_type=TaskType.TOKEN_CLS, r=r, lora_alpha=alpha, lora_dropout=dropout,
        target_modules=target_modules, modules_to_save=[head_name(model)],
        trainable_token_indices=new_token_ids or None, layers_to_transform=layers,
    )
    try:
        return get_peft_model(model, lora_config)
    except ValueError as err:
        raise PRMError(f"lora.target_modules={target_modules!r} does not fit this model: {err}") from None


def merge_adapter(model):
    """The model with a LoRA adapter folded into its base weights (same scores, no adapter cost per layer); a model
    without an adapter is returned as it is."""
    from peft import PeftModel

    return model.merge_and_unload() if isinstance(model, PeftModel) else model


def parameter_counts(model) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total


def load_prm(folder: str | Path, *, trust_remote_code: bool = False, allow_pickle: bool = False):
    """(model, tokenizer, metadata) from a run folder, checkpoint or merged export; eval mode, fp32."""
    folder = Path(folder)
    metadata = PRMMetadata.load(folder)
    tokenizer = load_tokenizer(str(folder), trust_remote_code)
    if (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        # peft reads adapter_model.safetensors when present, else falls back to a pickled adapter_model.bin
        refuse_pickle_weights(folder, allow_pickle)
        base = load_token_classifier(metadata.base_path, trust_remote_code=trust_remote_code,
                                     allow_pickle=allow_pickle, num_layers=metadata.num_layers)
        if base.get_input_embeddings().weight.shape[0] != len(tokenizer):
            base.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        model = PeftModel.from_pretrained(base, str(folder))
    else:
        model = load_token_classifier(str(folder), trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer, metadata
