"""The settings of `prmkit eval` besides scoring (those are `prmkit.scoring.options.ScoringOptions`), each default
written once; field = keyword argument = CLI flag (`report_chains` = `--report-chains`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prmkit.errors import PRMError

LABEL_SCHEMES = ("binary", "ternary", "auto")


@dataclass(frozen=True)
class EvalOptions:
    """What `prmkit eval` does besides scoring (that is `ScoringOptions`); field = keyword = CLI flag."""
    threshold: float | None = None  # a fixed step threshold; None: DEFAULT_THRESHOLD unless calibrate_on is set
    calibrate_on: str | Path | None = None  # pick the threshold maximising ProcessBench F1 on this file
    out: str | Path | None = None  # output folder; None: RUN/eval/<data stems joined by +>
    limit: int | None = None  # rows per file, evenly spaced through it
    report_chains: int = 500  # chains per split shown in report.html
    # how labels are read: None = as the run was trained (its metadata's label_scheme); binary / ternary fixes
    # it; auto detects it per file (ternary when the file has a -1)
    label_scheme: str | None = None

    def __post_init__(self):
        if self.threshold is not None and self.calibrate_on is not None:
            raise PRMError("both --threshold and --calibrate-on given; use one: a fixed threshold or one calibrated")
        if self.label_scheme not in (None, *LABEL_SCHEMES):
            raise PRMError(f"label_scheme={self.label_scheme!r}; use one of {', '.join(LABEL_SCHEMES)}, or leave it "
                           "unset to read labels as the run was trained")
        if self.limit is not None and self.limit < 1:
            raise PRMError(f"limit={self.limit}; use a positive number of rows")
