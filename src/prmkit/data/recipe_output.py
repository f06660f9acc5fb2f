"""`prmkit data recipe`: build one of TRL's stepwise datasets (`prmkit.data.recipes`) into a folder laid out as a
dataset repository, ready for `hf upload OWNER/NAME FOLDER --repo-type dataset`:

    README.md             dataset card; its `configs` name the files, so `load_dataset` reads the folder as the hub
    data/SPLIT.parquet    TRL's layout (prompt, completions, labels as bools): the default config
    prmkit/SPLIT.parquet  prmkit's records (labels 1.0/0.0, rows without a step left out): the `prmkit` config

Both are Parquet: `datasets` picks one reader for every config of a repository, so a JSONL config beside a Parquet
one would be read as Parquet and fail.

Splits as TRL made them: Math-Shepherd's one file split 95/5 by `datasets`' train_test_split with seed 42, PRM800K's
phase-1 files kept as the train and test splits.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from prmkit.data.formats_base import ConversionReport
from prmkit.data.recipe_card import dataset_card
from prmkit.data.recipes import RECIPES, build
from prmkit.data.records import validate_records
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError
from prmkit.files import write_text_atomic

LAYOUTS = ("trl", "prmkit")
SOURCES = {  # where TRL's scripts read the raw data
    "math-shepherd": "peiyi9979/Math-Shepherd",
    "prm800k": "https://github.com/openai/prm800k (prm800k/data/phase1_train.jsonl and phase1_test.jsonl, Git LFS)",
}
DEFAULT_INPUT = {"math-shepherd": "peiyi9979/Math-Shepherd"}  # PRM800K's raw files are not on the hub
TRL_SPLIT = {"math-shepherd": (0.05, 42)}  # test_size and seed of TRL's train_test_split


@dataclass
class RecipeResult:
    recipe: str
    out_dir: Path
    splits: dict[str, list[dict]]  # split -> TRL's rows
    reports: dict[str, ConversionReport]  # split (or "all" before a split) -> what was read and skipped
    files: list[str] = field(default_factory=list)
    prmkit_dropped: dict[str, int] = field(default_factory=dict)  # split -> rows with no step (not in prmkit/)

    def summary(self) -> str:
        lines = [report.summary() for report in self.reports.values()]
        lines += [f"{split}: {len(rows)} rows" + (f" ({self.prmkit_dropped[split]} without a step, left out of "
                                                   "prmkit/)" if self.prmkit_dropped.get(split) else "")
                  for split, rows in self.splits.items()]
        lines += [f"wrote {self.out_dir / name}" for name in self.files]
        lines.append(f"push with: hf upload OWNER/NAME {self.out_dir} --repo-type dataset")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"recipe": self.recipe, "out_dir": str(self.out_dir), "files": self.files,
                "rows": {split: len(rows) for split, rows in self.splits.items()},
                "prmkit_dropped": self.prmkit_dropped,
                "reports": {name: report.to_dict() for name, report in self.reports.items()}}


def parse_inputs(recipe: str, inputs: Sequence[str]) -> dict[str | None, str]:
    """`[SPLIT=]PATH` items -> {split or None: path}; the recipe's default source when none is given."""
    if recipe not in RECIPES:
        raise PRMError(f"unknown recipe '{recipe}'; use one of {', '.join(RECIPES)}")
    if not inputs:
        if recipe not in DEFAULT_INPUT:
            raise PRMError(f"the {recipe} recipe needs its raw files: download them from {SOURCES[recipe]} and "
                           "pass --input train=phase1_train.jsonl --input test=phase1_test.jsonl")
        return {None: DEFAULT_INPUT[recipe]}
    parsed: dict[str | None, str] = {}
    for item in inputs:
        split, sep, path = item.partition("=")
        if not sep or Path(item).exists():  # a path that holds '=' is still a path
            split, path = None, item
        if split in parsed:
            raise PRMError(f"--input {item}: split '{split or '(unnamed)'}' given twice; give each split once")
        parsed[split] = path
    if None in parsed and len(parsed) > 1:
        raise PRMError(f"--input: name every split (train=FILE test=FILE) when giving more than one; got {inputs}")
    return parsed


def run_recipe(recipe: str, inputs: Sequence[str], out_dir: str | os.PathLike, *,
               layouts: Sequence[str] = LAYOUTS, test_size: float | None = None,
               seed: int | None = None) -> RecipeResult:
    """Read the raw rows, apply TRL's recipe, split as TRL did (or by the named inputs) and write the folder."""
    unknown = [layout for layout in layouts if layout not in LAYOUTS]
    if unknown or not layouts:
        raise PRMError(f"layout {unknown or '(none)'}: use trl, prmkit or both")
    sources = parse_inputs(recipe, inputs)
    if (test_size is not None or seed is not None) and (recipe not in TRL_SPLIT or None not in sources):
        raise PRMError(f"--test-size and --seed split one unnamed input; the {recipe} recipe here takes its splits "
                       f"from the named inputs ({', '.join(str(s) for s in sources)}); drop them")
    result = RecipeResult(recipe, Path(out_dir), {}, {})
    for split, path in sources.items():
        rows, report = build(recipe, read_rows(path), path)
        result.reports[split or "all"] = report
        if split is None and recipe in TRL_SPLIT:
            default_size, default_seed = TRL_SPLIT[recipe]
            result.splits.update(trl_train_test_split(rows, default_size if test_size is None else test_size,
                                                      default_seed if seed is None else seed))
        else:
            result.splits[split or "train"] = rows
    write_folder(result, layouts)
    return result


def trl_train_test_split(rows: list[dict], test_size: float, seed: int) -> dict[str, list[dict]]:
    """`datasets.Dataset.train_test_split(test_size, seed)`, TRL's split, on row indices (the same permutation
    whatever the columns hold, and no Arrow cast of the labels on the way)."""
    from datasets import Dataset

    if not 0 < test_size < 1:
        raise PRMError(f"test_size={test_size}; use a share between 0 and 1 (TRL's Math-Shepherd split is 0.05)")
    if len(rows) < 2 or math.ceil(test_size * len(rows)) >= len(rows):
        raise PRMError(f"{len(rows)} rows cannot be split with test_size={test_size}; give more rows or a smaller "
                       "test_size")
    halves = Dataset.from_dict({"index": list(range(len(rows)))}).train_test_split(test_size=test_size, seed=seed)
    return {split: [rows[i] for i in halves[split]["index"]] for split in ("train", "test")}


def write_folder(result: RecipeResult, layouts: Sequence[str]) -> None:
    out = result.out_dir
    configs = []
    if "trl" in layouts:
        for split, rows in result.splits.items():
            _write_parquet(rows, out / "data" / f"{split}.parquet", label_type="bool")
            result.files.append(f"data/{split}.parquet")
        configs.append(("default", {split: f"data/{split}.parquet" for split in result.splits}))
    if "prmkit" in layouts:
        for split, rows in result.splits.items():
            records = prmkit_records(rows, f"{result.recipe} {split}")
            result.prmkit_dropped[split] = len(rows) - len(records)
            _write_parquet(records, out / "prmkit" / f"{split}.parquet", label_type="float64")
            result.files.append(f"prmkit/{split}.parquet")
        configs.append(("prmkit" if configs else "default", {split: f"prmkit/{split}.parquet"
                                                              for split in result.splits}))
    write_text_atomic(out / "README.md", dataset_card(result.recipe, result.splits, result.reports, configs))
    result.files.append("README.md")


def prmkit_records(rows: list[dict], source: str) -> list[dict]:
    """TRL's rows as prmkit records: labels 1.0/0.0, and rows with no step (TRL's PRM800K writes some) left out,
    since a record without a step has nothing to train or score."""
    kept = [{"prompt": r["prompt"], "completions": list(r["completions"]),
             "labels": [1.0 if label else 0.0 for label in r["labels"]]} for r in rows if r["completions"]]
    records, _ = validate_records(kept, source, scheme="binary")
    return records


def _write_parquet(rows: list[dict], path: Path, *, label_type: str) -> None:
    """Parquet with the column types spelled out (labels bools for TRL, floats for prmkit), so no reader guesses
    a label's type from the values (1.0 read back as an int, or a bool as a number)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("prompt", pa.string()), ("completions", pa.list_(pa.string())),
                        ("labels", pa.list_(pa.bool_() if label_type == "bool" else pa.float64()))])
    table = pa.Table.from_pylist([{k: row[k] for k in ("prompt", "completions", "labels")} for row in rows],
                                 schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{path.name}")
    pq.write_table(table, partial)
    os.replace(partial, path)

