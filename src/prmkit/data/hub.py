"""Datasets by name: `owner/name`, `owner/name#split` and `owner/name:config#split` are read with
`datasets.load_dataset`, through its cache, wherever a data file is accepted (the row reader calls here, so
training, eval, score, label and search all take them).

The same call reads a local folder laid out as a dataset repository (data files under it, optionally a README.md
whose `configs` name them), such as the copy `hf download owner/name --repo-type dataset --local-dir DIR` makes:
a local path that exists always wins over an id, and a copy on disk behaves as the dataset on the hub does.

Columns pass through as they are: TRL's stepwise datasets (trl-lib/prm800k, trl-lib/math_shepherd) already hold
`prompt`, `completions` and `labels`, and problem datasets (openai/gsm8k's `question` and `answer`) are read by
`prmkit label` and `prmkit search` through their problem and gold fields. Rows are numbered 1, 2, ... within the
split, as in a `datasets` folder.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prmkit.errors import PRMError

# The hub's repository names: letters, digits, '-', '_' and '.'; one owner, one name.
DATASET_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?::(?P<config>[\w.-]+))?"
                        r"(?:#(?P<split>[\w.-]+))?")
# A missing "data/train.jsonl" is a typo in a path, not a dataset to look for on the hub.
FILE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet", ".csv", ".tsv", ".txt", ".arrow", ".gz")
SYNTAX = "owner/name, owner/name#split or owner/name:config#split"


@dataclass(frozen=True)
class DatasetId:
    repo: str  # owner/name
    config: str | None = None
    split: str | None = None

    def __str__(self) -> str:
        return self.repo + (f":{self.config}" if self.config else "") + (f"#{self.split}" if self.split else "")


def parse_dataset_id(text: str) -> DatasetId | None:
    """The id in `text`, or None when it cannot be one (then it is a path that does not exist)."""
    match = DATASET_ID.fullmatch(text)
    if match is None or Path(match["repo"]).suffix.lower() in FILE_SUFFIXES:
        return None
    return DatasetId(match["repo"], match["config"], match["split"])


def is_saved_dataset(folder: Path) -> bool:
    """A folder written by `save_to_disk` (read with `load_from_disk`), as opposed to a repository of data files."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def read_hub_dataset(dataset: DatasetId, *, root: str | Path | None = None) -> list:
    """The rows of one split of a dataset on the hub, as plain Python values. `root` is a folder holding dataset
    repositories as `owner/name` folders (a mirror); None reads the hub, through datasets' cache."""
    if root is not None:  # a local mirror: read as the folder it is
        return read_repository_folder(Path(root) / dataset.repo, dataset.config, dataset.split, shown=str(dataset))
    try:
        loaded = _load(dataset.repo, dataset.config, str(dataset))
    except PRMError:
        raise
    except Exception as err:  # connection, offline mode, not found, gated: datasets raises many unrelated types
        raise PRMError(unreachable_message(dataset, err)) from None
    return pick_split(loaded, dataset.split, str(dataset))


def read_repository_folder(folder: Path, config: str | None, split: str | None, *, shown: str | None = None) -> list:
    """The rows of one split of a local folder laid out as a dataset repository (`shown`: how errors name it)."""
    shown = shown or f"{folder}" + (f":{config}" if config else "")
    # datasets keys its cache of a local folder by the folder's name, not its files: a folder rebuilt in place, or
    # another folder of the same name, would be answered with the rows cached before. A cache of this read alone
    # reads the files as they are now.
    with tempfile.TemporaryDirectory(prefix="prmkit-dataset-") as cache:
        try:
            loaded = _load(str(folder), config, shown, cache_dir=cache)
        except PRMError:
            raise
        except Exception as err:  # no data files, unreadable files: report what datasets says
            raise PRMError(f"{folder}: a folder, but neither one written by datasets' save_to_disk nor a dataset "
                           f"repository with data files ({_first_line(err)}); point to a .jsonl/.json/.parquet "
                           "file or such a folder") from None
        return pick_split(loaded, split, shown)


def pick_split(loaded, split: str | None, shown: str) -> list:
    """One split's rows: the one named, else 'train' (never another split unasked: a 'test' split read as
    training data by default would be a silent leak)."""
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        if split is None:
            if "train" not in loaded:
                raise PRMError(f"{shown}: holds splits {list(loaded)}; pick one with '{shown}#SPLIT'")
            split = "train"
        if split not in loaded:
            raise PRMError(f"{shown}: no split '{split}'; it has {list(loaded)}")
        loaded = loaded[split]
    elif split is not None and split != "train":
        raise PRMError(f"{shown}: holds one dataset without splits; drop '#{split}'")
    # to_list goes through Arrow's Python conversion: values come back as stored, not cast by a Features schema.
    return [plain(row) for row in loaded.to_list()]


def unreachable_message(dataset: DatasetId, err: Exception) -> str:
    import datasets

    if datasets.config.HF_HUB_OFFLINE:
        why = ("Offline mode is on (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set) and datasets' cache does not "
               "hold it.")
    elif isinstance(err, FileNotFoundError):
        why = "Check the id (it is case-sensitive); a gated or private dataset needs `hf auth login` first."
    else:
        why = "The hub could not be reached."
    config = f", '{dataset.config}'" if dataset.config else ""
    return (f"{dataset}: not a local file or folder, so it was read as a dataset id on the Hugging Face hub, and "
            f"that failed ({_first_line(err)}). {why} To work without network, make a local copy where there is "
            f"network and pass its path instead: a folder from `datasets.load_dataset('{dataset.repo}'{config})"
            f".save_to_disk(DIR)`, the repository from `hf download {dataset.repo} --repo-type dataset "
            f"--local-dir DIR`, or a .jsonl/.parquet file; or run this command once online to fill datasets' "
            "cache, which is then read offline too.")


def plain(value: Any) -> Any:
    """Arrow can hand back numpy scalars or arrays; make them Python values so validation sees what a user wrote."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    return value


def _load(source: str, config: str | None, shown: str, cache_dir: str | None = None):
    """`datasets.load_dataset` for a hub id or a local repository folder: one code path for both."""
    import datasets

    try:
        return datasets.load_dataset(source, name=config, cache_dir=cache_dir)
    except ValueError as err:  # a config missing or unknown: datasets lists the ones there are
        text = str(err)
        if "Config name is missing" not in text and "BuilderConfig" not in text:
            raise PRMError(f"{shown}: cannot be loaded ({_first_line(err)})") from None
        found = re.search(r"\[[^\]]*\]", text)
        repo = shown.split(":", 1)[0].split("#", 1)[0]
        configs = f"it has configs {found.group(0)}" if found else _first_line(err)
        wrong = f"no config '{config}'" if config else "a config must be named"
        raise PRMError(f"{shown}: {wrong}; {configs}; name one as '{repo}:CONFIG' or '{repo}:CONFIG#SPLIT'") \
            from None


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__
