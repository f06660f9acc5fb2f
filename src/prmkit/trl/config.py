"""`PRMConfig`: TRL 1.13's PRM training arguments (transformers' `TrainingArguments` plus the PRM fields), with TRL's
defaults, so a TRL script's `PRMConfig(...)` runs unchanged.

The config remembers which fields the user set: a field prmkit has no equivalent for is refused only when it was
set to something other than its default (see `prmkit.trl.arguments`), so untouched fields never stand in the way.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

from transformers import TrainingArguments


@dataclass
class PRMConfig(TrainingArguments):
    """TRL's `PRMConfig`: every `TrainingArguments` field, TRL's defaults where TRL changed them (learning_rate 1e-5,
    logging_steps 10, gradient_checkpointing on, bf16 unset = the best precision of the machine), and the PRM fields.
    docs/trl.md maps each field onto prmkit's config."""

    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate (TRL's default, 1e-5)."})
    logging_steps: float = field(default=10, metadata={"help": "Log every N optimizer steps."})
    gradient_checkpointing: bool = field(default=True, metadata={"help": "Recompute activations in the backward "
                                                                          "pass (TRL's default: on)."})
    # TRL reads an unset bf16 as "bf16 unless fp16"; prmkit reads it as precision=auto: bf16 autocast on a GPU that
    # has it, fp32 on a CPU, where bf16 matmuls are many times slower.
    bf16: bool | None = field(default=None, metadata={"help": "bf16 autocast; unset: prmkit's precision=auto."})
    max_length: int | None = field(default=1024, metadata={"help": "Most tokens of prompt + steps (None: the "
                                                                     "backbone's context length)."})
    max_prompt_length: int | None = field(default=None, metadata={"help": "Not a TRL 1.13 field (older TRL "
                                                                           "releases had it); only None is accepted."})
    max_completion_length: int | None = field(default=None, metadata={"help": "Most tokens of the steps together "
                                                                               "(separators included); whole steps "
                                                                               "are kept."})
    disable_dropout: bool = field(default=True, metadata={"help": "Train without dropout in the backbone."})
    step_separator: str = field(default="\n", metadata={"help": "Text after the prompt and after every step."})
    train_on_last_step_only: bool = field(default=False, metadata={"help": "Train on the last step's label only."})
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Accepted for TRL scripts; prmkit "
                                                                          "tokenizes in the training process."})

    def __post_init__(self):
        # What the user set: read before transformers normalises the values (a field it derives from another, such
        # as eval_steps from logging_steps, is not the user's), and kept only where the normalised value differs
        # from a default config's too (an argument parser passes False for 'no', "" for [], which mean the same).
        raw = {f.name for f in dataclasses.fields(self) if f.init and _differs(self, f)}
        self._prmkit_precision_auto = self.bf16 is None and not self.fp16
        if self.bf16 is None:
            self.bf16 = False  # the precision itself is chosen by prmkit at training time (precision=auto)
        if self.activation_checkpointing is None:
            # transformers renamed gradient_checkpointing; setting the new name keeps its deprecation warning away
            self.activation_checkpointing = self.gradient_checkpointing
        super().__post_init__()
        self._prmkit_snapshot = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)
                                 if f.init}
        reference = _reference(type(self))
        # A field whose default is None is filled in by transformers from the environment (disable_tqdm from the
        # logging level at that moment), so a default config is no reference for it: giving a value is setting it.
        unset_by_default = {f.name for f in dataclasses.fields(self) if f.init and _default(f) is None}
        self._prmkit_set = {name for name in raw if reference is None or name == "output_dir"
                            or name in unset_by_default or _unequal(self._prmkit_snapshot[name], reference[name])}

    def fields_set(self) -> set[str]:
        """The fields the user gave a value other than the default: at construction, or by assignment since."""
        changed = {name for name, value in self._prmkit_snapshot.items() if _unequal(getattr(self, name), value)}
        return self._prmkit_set | changed

    @property
    def precision_auto(self) -> bool:
        """Neither bf16 nor fp16 was chosen: prmkit picks the precision (bf16 autocast on a GPU, fp32 on a CPU)."""
        return self._prmkit_precision_auto and not (self.bf16 or self.fp16)


_REFERENCES: dict[type, dict | None] = {}


def _reference(cls: type) -> dict | None:
    """The normalised field values of a default config of `cls` (None while that config itself is being built)."""
    if cls not in _REFERENCES:
        _REFERENCES[cls] = None
        _REFERENCES[cls] = cls(output_dir="reference")._prmkit_snapshot
    return _REFERENCES[cls]


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _differs(config, f: dataclasses.Field) -> bool:
    default = _default(f)
    return default is not dataclasses.MISSING and _unequal(getattr(config, f.name), default)


def _unequal(a, b) -> bool:
    try:
        return bool(a != b)
    except Exception:  # values whose comparison is not a plain bool (arrays) count as changed
        return True
