"""Records in and out: read a data file into validated records (rows come from `prmkit.data.rows`, the one row
reader)."""

from __future__ import annotations

from pathlib import Path

from prmkit.data.records import LabelScheme, NeutralPolicy, ValidationReport, validate_records
from prmkit.data.rows import RowReader


def load_records(path: str | Path, *, scheme: LabelScheme = "auto", neutral: NeutralPolicy = "positive",
                 skip_invalid: bool = False) -> tuple[list[dict], ValidationReport]:
    """Read and validate: the records in contract form, and what was read, kept and skipped. Problems name the
    row numbers of the file (see `prmkit.data.rows`)."""
    rows = list(RowReader(path))
    return validate_records([row.value for row in rows], str(path), scheme=scheme, neutral=neutral,
                            skip_invalid=skip_invalid, row_numbers=[row.number for row in rows])
