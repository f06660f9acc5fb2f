"""The checkpoint folder rules, as unit tests: which folder resume picks, and that a crash between renames never
leaves a folder that loads as a mix of old and new files. Killing real training runs: tests/e2e/test_reliability.py."""

from __future__ import annotations

import errno
import hashlib
import inspect
import os

import pytest
from transformers import Trainer

from prmkit.config import load_config
from prmkit.errors import PRMError
from prmkit.files import atomic_write, write_text_atomic
from prmkit.model import METADATA_FILE, PRMMetadata
from prmkit.training.checkpoints import (
    MIRRORED_SAVE_CHECKPOINT_SHA256,
    STAGING_PREFIX,
    checkpoint_to_resume,
    complete_checkpoints,
    publish_files,
    publish_folder,
    remove_stale_staging,
)
from prmkit.training.run_folder import prepare_run_dir


def test_resume_never_picks_an_incomplete_or_staging_folder(tmp_path):
    config = load_config(None, [f"output_dir={tmp_path}", "run_name=run", "training.resume=latest"])
    run = tmp_path / "run"
    for name, complete in [("checkpoint-2", True), ("checkpoint-3", True), ("checkpoint-5", False),
                           (f"{STAGING_PREFIX}checkpoint-7", True), ("checkpoint-x", True)]:
        (run / name).mkdir(parents=True)
        if complete:
            (run / name / "trainer_state.json").write_text("{}")
    (run / "checkpoint-9").write_text("a file, not a folder")
    assert complete_checkpoints(run) == [run / "checkpoint-2", run / "checkpoint-3"]
    prepare_run_dir(config)
    assert not (run / f"{STAGING_PREFIX}checkpoint-7").exists()  # stale staging removed at start
    assert checkpoint_to_resume(config.training.resume, run) == str(run / "checkpoint-3")


def test_final_model_is_whole_or_not_a_model(tmp_path, monkeypatch):
    """The final save moves files in one by one: until prmkit.json (moved last) is back, no loader accepts the
    folder, so a crash in between never yields a mix of old and new files that loads."""
    run, staging = tmp_path / "run", tmp_path / "run" / f"{STAGING_PREFIX}final"
    staging.mkdir(parents=True)
    for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json", METADATA_FILE):
        (staging / name).write_text(f"new {name}")
        (run / name).write_text(f"old {name}")
    real_replace = os.replace
    moved = []

    def crash_on_second_move(src, dst):
        if len(moved) == 1:
            raise OSError(errno.EIO, "simulated crash")
        moved.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_second_move)
    with pytest.raises(OSError):
        publish_files(staging, run, last=METADATA_FILE)
    with pytest.raises(PRMError, match="no prmkit.json"):
        PRMMetadata.load(run)
    monkeypatch.setattr(os, "replace", real_replace)
    publish_files(staging, run, last=METADATA_FILE)
    assert not staging.exists()
    assert {p.name: p.read_text() for p in run.iterdir()} == {
        name: f"new {name}" for name in ("adapter_model.safetensors", "adapter_config.json", "tokenizer.json",
                                         METADATA_FILE)}


def test_republishing_a_checkpoint_survives_a_crash_between_the_renames(tmp_path, monkeypatch):
    """Re-saving checkpoint-4 (after resuming from an earlier one) moves the old folder aside, then renames the
    new one in. Killed in between, the next start puts the old folder back instead of losing both."""
    final, staging = tmp_path / "checkpoint-4", tmp_path / f"{STAGING_PREFIX}checkpoint-4"
    for folder, text in ((final, "old"), (staging, "new")):
        folder.mkdir()
        (folder / "trainer_state.json").write_text(text)
    real_replace = os.replace
    calls = []

    def crash_on_second_rename(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EIO, "simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_second_rename)
    with pytest.raises(OSError):
        publish_folder(staging, final)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not final.exists()
    remove_stale_staging(tmp_path)
    assert (final / "trainer_state.json").read_text() == "old" and list(tmp_path.iterdir()) == [final]

    staging.mkdir()
    (staging / "trainer_state.json").write_text("new")
    publish_folder(staging, final)
    assert (final / "trainer_state.json").read_text() == "new" and list(tmp_path.iterdir()) == [final]


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_partial(tmp_path):
    target = tmp_path / "summary.json"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as handle:
            handle.write("half of the new")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and list(tmp_path.iterdir()) == [target]


def test_a_partial_file_of_a_killed_write_is_removed_at_the_next_start(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / f"{STAGING_PREFIX}config.yaml.abc.tmp").write_text("half")
    prepare_run_dir(load_config(None, [f"output_dir={tmp_path}", "run_name=run", "training.resume=latest"]))
    assert list(run.iterdir()) == []


def test_the_mirrored_trainer_save_checkpoint_is_the_one_we_read():
    """AtomicCheckpoints._save_checkpoint repeats the steps of transformers' Trainer._save_checkpoint with another
    folder. When transformers changes that method, this fails: compare the new steps with ours, then update the
    hash in prmkit.training.checkpoints."""
    source = inspect.getsource(Trainer._save_checkpoint)
    assert hashlib.sha256(source.encode()).hexdigest() == MIRRORED_SAVE_CHECKPOINT_SHA256
