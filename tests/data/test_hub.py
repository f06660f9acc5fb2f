"""Datasets by name (`owner/name[:config][#split]`), read with `datasets.load_dataset` from folders laid out as hub
repositories under tmp_path: the code path a hub id takes, with no network (conftest sets HF_HUB_OFFLINE)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prmkit.data.hub import DatasetId, parse_dataset_id, read_hub_dataset
from prmkit.data.io import load_records
from prmkit.data.rows import RowReader
from prmkit.errors import PRMError

STEPWISE = [
    {"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 5.", "The answer is 5."], "labels": [True, True]},
    {"prompt": "What is 4 * 2?", "completions": ["4 * 2 = 6.", "The answer is 6."], "labels": [False, False]},
    {"prompt": "What is 9 - 1?", "completions": ["9 - 1 = 8."], "labels": [True]},
]
GSM8K = [{"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = <<3+2=5>>5\n#### 5"},
         {"question": "Ann has 10 pens and loses 4. How many?", "answer": "10 - 4 = 6\n#### 6"}]
GSM8K_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
  - split: test
    path: socratic/test-*
---
# a problem dataset with two configs and no default, as openai/gsm8k is laid out
"""


def hub_repo(root, repo: str, splits: dict[str, list[dict]], *, folder: str = "data") -> None:
    """A dataset repository as the hub stores one: data/<split>-00000-of-00001.parquet."""
    for split, rows in splits.items():
        path = root / repo / folder / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """load_dataset writes an Arrow cache of what it reads; keep it in tmp_path, not the user's ~/.cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")


@pytest.fixture
def hub_root(tmp_path):
    hub_repo(tmp_path, "trl-lib/math_shepherd", {"train": STEPWISE, "test": STEPWISE[:1]})
    for config in ("main", "socratic"):
        hub_repo(tmp_path, "openai/gsm8k", {"train": GSM8K, "test": GSM8K[1:]}, folder=config)
    (tmp_path / "openai/gsm8k/README.md").write_text(GSM8K_README)
    return tmp_path


def test_dataset_ids_parse_and_paths_to_data_files_are_never_ids():
    assert parse_dataset_id("trl-lib/prm800k") == DatasetId("trl-lib/prm800k")
    assert parse_dataset_id("openai/gsm8k:main#test") == DatasetId("openai/gsm8k", "main", "test")
    assert parse_dataset_id("Qwen/ProcessBench#gsm8k") == DatasetId("Qwen/ProcessBench", None, "gsm8k")
    assert str(DatasetId("openai/gsm8k", "main", "test")) == "openai/gsm8k:main#test"
    for path in ["data/train.jsonl", "runs/x.parquet", "/abs/owner/name", "name", "a/b/c", "owner/name#"]:
        assert parse_dataset_id(path) is None, path


def test_a_trl_stepwise_dataset_is_read_as_records_with_its_labels(hub_root):
    rows = read_hub_dataset(DatasetId("trl-lib/math_shepherd"), root=hub_root)  # no split: train
    assert rows == STEPWISE
    assert read_hub_dataset(DatasetId("trl-lib/math_shepherd", split="test"), root=hub_root) == STEPWISE[:1]
    with pytest.raises(PRMError, match=r"trl-lib/math_shepherd#dev: no split 'dev'; it has \['train', 'test'\]"):
        read_hub_dataset(DatasetId("trl-lib/math_shepherd", split="dev"), root=hub_root)


def test_an_id_resolves_to_a_local_folder_laid_out_as_a_repository(hub_root, monkeypatch):
    """Every command reads data through RowReader: an id names the folder `owner/name` when it exists."""
    monkeypatch.chdir(hub_root)
    records, report = load_records("trl-lib/math_shepherd")
    assert [r["labels"] for r in records] == [[1.0, 1.0], [0.0, 0.0], [1.0]]
    assert report.source == "trl-lib/math_shepherd" and report.rows_read == 3
    records, _ = load_records("trl-lib/math_shepherd#test")
    assert [r["prompt"] for r in records] == [STEPWISE[0]["prompt"]]


def test_soft_and_missing_labels_keep_their_values_through_load_dataset(tmp_path, monkeypatch):
    rows = [{"prompt": "p", "completions": ["a", "b", "c"], "labels": [0.25, None, 1.0]},
            {"prompt": "q", "completions": ["a", "b"], "labels": [1.0, 0.0]}]
    hub_repo(tmp_path, "someone/soft", {"train": rows})
    monkeypatch.chdir(tmp_path)
    records, _ = load_records("someone/soft")
    assert [r["labels"] for r in records] == [[0.25, None, 1.0], [1.0, 0.0]]
    assert all(isinstance(x, float) for x in records[1]["labels"])


def test_a_bad_row_is_named_by_the_id_and_its_place_in_the_split(tmp_path, monkeypatch):
    bad = [*STEPWISE, {"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2.", "So 2."], "labels": [True]}]
    hub_repo(tmp_path, "someone/bad", {"train": STEPWISE, "test": bad})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PRMError, match=r"someone/bad#test: row 4, field 'labels': has 1 labels for 2 steps"):
        load_records("someone/bad#test")


def test_a_config_is_named_after_a_colon_and_a_missing_one_is_explained(hub_root, monkeypatch):
    assert read_hub_dataset(DatasetId("openai/gsm8k", "main", "test"), root=hub_root) == GSM8K[1:]
    with pytest.raises(PRMError, match=r"openai/gsm8k: a config must be named; it has configs \['main', 'socratic'\]; "
                                       r"name one as 'openai/gsm8k:CONFIG'"):
        read_hub_dataset(DatasetId("openai/gsm8k"), root=hub_root)
    with pytest.raises(PRMError, match=r"openai/gsm8k:nope#test: no config 'nope'; it has configs"):
        read_hub_dataset(DatasetId("openai/gsm8k", "nope", "test"), root=hub_root)
    monkeypatch.chdir(hub_root)
    assert [row.value for row in RowReader("openai/gsm8k:socratic#test")] == GSM8K[1:]


def test_label_and_search_read_a_problem_dataset_by_id(hub_root, monkeypatch):
    from prmkit.labeling.options import LabelOptions
    from prmkit.labeling.problems import read_problems as label_problems
    from prmkit.search.options import SearchOptions
    from prmkit.search.problems import read_problems as search_problems

    monkeypatch.chdir(hub_root)
    searched = search_problems("openai/gsm8k:main", SearchOptions())
    assert [(p.row, p.text, p.gold) for p in searched] == [(1, GSM8K[0]["question"], "5"), (2, GSM8K[1]["question"],
                                                                                             "6")]
    labelled = label_problems("openai/gsm8k:main#test", LabelOptions(solutions=2))
    assert [(p.row, p.gold) for p in labelled] == [(1, "6")]
    # the problem field option reaches hub rows as it reaches a file's, and a bad row is named by its place
    with pytest.raises(PRMError, match=r"openai/gsm8k:main#train: 2 of 2 rows cannot be searched:\n.*row 1, "
                                       r"field 'title': missing"):
        search_problems("openai/gsm8k:main#train", SearchOptions(problem_field="title"))


def test_a_local_path_wins_over_an_id(tmp_path, monkeypatch):
    """A save_to_disk folder at `owner/name` is read as that folder; a missing data file is a missing file."""
    import datasets

    datasets.Dataset.from_list(STEPWISE[2:]).save_to_disk(str(tmp_path / "trl-lib" / "prm800k"))
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "rows.jsonl").write_text(json.dumps(STEPWISE[0]) + "\n")
    monkeypatch.chdir(tmp_path)
    assert [row.value for row in RowReader("trl-lib/prm800k")] == STEPWISE[2:]
    assert RowReader("trl-lib/prm800k").kind == "datasets"
    assert [row.value["prompt"] for row in RowReader("owner/rows.jsonl")] == [STEPWISE[0]["prompt"]]
    with pytest.raises(PRMError, match=r"owner/typo.jsonl: no such file or folder; check the path"):
        RowReader("owner/typo.jsonl")


def test_offline_and_not_cached_says_how_to_make_a_local_copy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder of that name here
    with pytest.raises(PRMError) as caught:
        load_records("nobody-here/no-such-dataset:main#test")
    message = str(caught.value)
    assert message.startswith("nobody-here/no-such-dataset:main#test: not a local file or folder")
    assert "Offline mode is on" in message
    assert "datasets.load_dataset('nobody-here/no-such-dataset', 'main').save_to_disk(DIR)" in message
    assert "hf download nobody-here/no-such-dataset --repo-type dataset" in message
    assert "run this command once online" in message


def test_a_folder_with_no_data_files_is_neither_kind_of_dataset(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PRMError, match=r"empty: a folder, but neither one written by datasets' save_to_disk nor a "
                                       r"dataset repository with data files"):
        load_records(tmp_path / "empty")


def test_training_reads_data_train_and_data_val_by_id(tiny_llama, tmp_path, monkeypatch):
    from prmkit.config import load_config
    from prmkit.data.synthetic import generate_records
    from prmkit.training.trainer import train

    hub_repo(tmp_path, "someone/chains", {"train": generate_records(12, seed=5), "test": generate_records(4, seed=6)})
    monkeypatch.chdir(tmp_path)
    summary = train(load_config(None, [
        f"model.base={tiny_llama}", "data.train=someone/chains", "data.val=someone/chains#test",
        "data.max_length=160", f"output_dir={tmp_path / 'runs'}", "run_name=run", "training.max_steps=2",
        "training.batch_size=4", "training.logging_steps=1", "lora.r=4", "lora.dropout=0.0"]))
    assert summary.optimizer_steps == 2 and summary.train_rows == 12
    assert summary.eval_metrics["n_steps"] > 0  # the test split was read as validation data
    assert (tmp_path / "runs" / "run" / "prmkit.json").is_file()


def test_score_and_eval_read_a_dataset_by_id(tiny_run, tmp_path, monkeypatch, capsys):
    from prmkit.cli import main
    from prmkit.data.synthetic import generate_records

    chains = generate_records(3, seed=9)
    hub_repo(tmp_path, "someone/chains", {"train": generate_records(2, seed=1), "test": chains})
    monkeypatch.chdir(tmp_path)
    assert main(["score", str(tiny_run), "someone/chains#test", "scored.jsonl", "--device", "cpu"]) == 0
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert [row["prompt"] for row in scored] == [chain["prompt"] for chain in chains]
    assert all(len(row["step_scores"]) == len(row["completions"]) for row in scored)
    assert main(["eval", str(tiny_run), "someone/chains#test", "--out", "eval", "--device", "cpu"]) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert [split["rows"] for split in metrics["splits"].values()] == [3]


def test_data_convert_reads_a_raw_format_by_id(tmp_path, monkeypatch, capsys):
    """Math-Shepherd as published (`input` with step tags, `label` with +/-) converts straight from its id."""
    from prmkit.cli import main

    raw = [{"input": "What is 2 + 3? Step 1: 2 + 3 = 5. ки\nStep 2: The answer is 5. ки",
            "label": "What is 2 + 3? Step 1: 2 + 3 = 5. +\nStep 2: The answer is 5. +", "task": "GSM8K"},
           {"input": "What is 4 * 2? Step 1: 4 * 2 = 6. ки", "label": "What is 4 * 2? Step 1: 4 * 2 = 6. -",
            "task": "GSM8K"}]
    hub_repo(tmp_path, "peiyi9979/Math-Shepherd", {"train": raw})
    monkeypatch.chdir(tmp_path)
    assert main(["data", "convert", "--from", "math-shepherd", "peiyi9979/Math-Shepherd", "ms.jsonl"]) == 0
    records = [json.loads(line) for line in (tmp_path / "ms.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["completions"], r["labels"]) for r in records] == [
        ("What is 2 + 3?", ["Step 1: 2 + 3 = 5.", "Step 2: The answer is 5."], [1.0, 1.0]),
        ("What is 4 * 2?", ["Step 1: 4 * 2 = 6."], [0.0])]


def test_a_repository_folder_is_read_as_its_files_are_now(tmp_path, monkeypatch):
    """datasets caches a local folder by its name: a folder rebuilt in place, or another folder of the same name,
    must still give its own rows."""
    # rows of the same shape and size, as a rebuilt dataset often has
    flipped = [{**row, "labels": [not label for label in row["labels"]]} for row in STEPWISE]
    for folder, rows in (("first", STEPWISE), ("second", flipped)):
        hub_repo(tmp_path / folder, "ds", {"train": rows})
        (tmp_path / folder / "ds" / "README.md").write_text(
            "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n---\n")
    assert [r.value for r in RowReader(str(tmp_path / "first" / "ds"))] == STEPWISE
    assert [r.value for r in RowReader(str(tmp_path / "second" / "ds"))] == flipped
    hub_repo(tmp_path / "first", "ds", {"train": flipped})  # rebuilt in place
    assert [r.value for r in RowReader(str(tmp_path / "first" / "ds"))] == flipped
