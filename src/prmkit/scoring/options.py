"""The settings of everything that uses a trained PRM, each default written once.

`ScoringOptions` is how a PRM is loaded and batched (PRMScorer, PRMReward, `prmkit score`, `prmkit eval`, the
server); `ScoreFileOptions` adds what `prmkit score` does with a file. A field name is also the keyword argument
and, with dashes, the command-line flag: `batch_size` = `--batch-size`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from prmkit.errors import PRMError

DTYPE_NAMES = ("auto", "fp32", "bf16", "fp16")
PRM_FORMATS = ("prmkit", "qwen", "math-shepherd", "rlhflow", "trl")  # prmkit.scoring.formats.FORMATS, without torch


@dataclass(frozen=True)
class ScoringOptions:
    device: str | None = None  # cuda, mps or cpu; None: the first available, in that order
    dtype: str = "auto"  # weights for inference: auto = bf16/fp16 on a GPU, fp32 on CPU
    batch_size: int = 16  # chains per forward pass
    max_batch_tokens: int | None = None  # padded tokens per forward pass (chains x longest chain)
    max_length: int | None = None  # tokens read per chain; None: the run's training max_length
    prm_format: str | None = None  # how to read the model folder (PRM_FORMATS); None: detected from the folder
    compile: bool = False  # torch.compile the forward pass over whole chains (prmkit PRMs)
    step_separator: str | None = None  # a trl PRM's step separator (TRL's PRMConfig.step_separator); None: its "\n"

    def __post_init__(self):
        if self.batch_size < 1:
            raise PRMError(f"batch_size={self.batch_size}; use a positive number of chains per forward pass")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise PRMError(f"max_batch_tokens={self.max_batch_tokens}; use a positive number of tokens, or leave "
                           "it unset")
        if self.dtype not in DTYPE_NAMES:
            raise PRMError(f"dtype={self.dtype!r} is not known; use one of {', '.join(DTYPE_NAMES)}")
        if self.prm_format is not None and self.prm_format not in PRM_FORMATS:
            raise PRMError(f"prm_format={self.prm_format!r} is not known; use one of {', '.join(PRM_FORMATS)}, or "
                           "leave it unset to detect it from the model folder")

    def replace(self, **changes) -> "ScoringOptions":
        return replace(self, **changes)


@dataclass(frozen=True)
class ScoreFileOptions:
    aggregate: str = "min"  # the chain score written as `score` (see prmkit.scoring.aggregate)
    split_regex: str | None = None  # cut string completions here instead of at the run's separator
    chunk_rows: int = 256  # rows read, scored and written at a time
    limit: int | None = None  # score only the first N rows

    def __post_init__(self):
        if self.chunk_rows < 1:
            raise PRMError(f"chunk_rows={self.chunk_rows}; use a positive number of rows")
        if self.limit is not None and self.limit < 0:
            raise PRMError(f"limit={self.limit}; use a number of rows >= 0")
