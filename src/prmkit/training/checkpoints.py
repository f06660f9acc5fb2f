"""Checkpoints: written whole or not at all, and found again for resume.

A checkpoint is whole or absent: everything is written into a staging folder, then renamed into place.

A process killed while saving (SIGKILL, OOM killer, pre-emption, a full disk) leaves at most a `.partial-*`
folder. Neither transformers' checkpoint rotation (it globs `checkpoint-*`) nor prmkit's resume (it matches
`^checkpoint-N$`) ever looks at such a name, and the next start of the run deletes it. prmkit.json is written into
the staging folder too, so a `checkpoint-N` folder always scores on its own. Files are fsynced before the rename,
so the rename cannot reach the disk ahead of the data it publishes (a power cut, not only a killed process).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from pathlib import Path

from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SaveStrategy, rotate_checkpoints

from prmkit.errors import PRMError
from prmkit.files import PARTIAL_PREFIX
from prmkit.model import METADATA_FILE
from prmkit.training.engine import check_weights_saved

STAGING_PREFIX = PARTIAL_PREFIX  # one prefix for folders and files, so one sweep at start removes both
REPLACED_PREFIX = STAGING_PREFIX + "replaced-"  # a published folder moved aside while its new version goes in
TRAINER_STATE = "trainer_state.json"
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
# sha256 of the source of transformers 5.24.0's Trainer._save_checkpoint, which AtomicCheckpoints mirrors step by
# step. A test fails when an installed transformers changes that method: then compare and update both.
MIRRORED_SAVE_CHECKPOINT_SHA256 = "a9111e30faa9933986e022e56b5af81fd990356db64d727b4c320c852283bf3b"


def staging_folder(final: Path) -> Path:
    return final.with_name(STAGING_PREFIX + final.name)


def remove_stale_staging(run_dir: Path) -> list[Path]:
    """Delete staging folders left by a killed run; they were never published, so nothing refers to them. A
    published folder that was moved aside by `publish_folder` goes back to its name if nothing took its place."""
    stale = [p for p in run_dir.iterdir() if p.name.startswith(STAGING_PREFIX)] if run_dir.is_dir() else []
    for path in stale:
        original = path.with_name(path.name.removeprefix(REPLACED_PREFIX))
        if path.name.startswith(REPLACED_PREFIX) and not original.exists():
            os.replace(path, original)
            print(f"prmkit: restored {original.name}, moved aside by an interrupted save", file=sys.stderr, flush=True)
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        print(f"prmkit: removed {path.name}, an unfinished save of an interrupted run", file=sys.stderr, flush=True)
    return stale


def publish_folder(staging: Path, final: Path) -> None:
    """Rename a fully written folder to its final name. An existing folder of that name (a checkpoint being
    re-saved after resuming from an earlier one) is moved aside first, since a directory rename cannot replace a
    non-empty directory; should the process die between the two renames, the next start moves it back."""
    _fsync_tree(staging)
    replaced = final.with_name(REPLACED_PREFIX + final.name)
    if final.exists():
        shutil.rmtree(replaced, ignore_errors=True)
        os.replace(final, replaced)
    os.replace(staging, final)
    _fsync(final.parent)
    shutil.rmtree(replaced, ignore_errors=True)


def publish_files(staging: Path, folder: Path, last: str) -> None:
    """Move every entry of `staging` into `folder`, `last` at the very end; each move is an atomic rename.

    `folder` also holds checkpoints and config.yaml, so it cannot be swapped as a whole. Instead the marker file
    `last` (prmkit.json: no prmkit loader reads a folder without it) is removed first and moved in last, so a run
    folder with prmkit.json always holds a whole model, never a mix of an old and a half-moved new one."""
    _fsync_tree(staging)
    (folder / last).unlink(missing_ok=True)
    entries = sorted(staging.iterdir(), key=lambda p: p.name == last)
    for entry in entries:
        target = folder / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
    _fsync(folder)
    staging.rmdir()


def save_final_model(trainer, run_dir: Path, tokenizer, metadata) -> None:
    """The finished model into the run folder: written whole into `.partial-final`, then moved in with
    prmkit.json last (see `publish_files`). Every rank calls this: FSDP and DeepSpeed gather weights collectively."""
    staging = staging_folder(run_dir / "final")
    if trainer.is_world_process_zero():
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    try:
        trainer.save_model(str(staging))
        if trainer.is_world_process_zero():
            check_weights_saved(staging)  # prmkit.json is never published beside weights that do not load
            tokenizer.save_pretrained(str(staging))
            metadata.save(staging)
            publish_files(staging, run_dir, last=METADATA_FILE)
    except OSError as err:
        raise PRMError(f"could not write the final model into {run_dir} ({err.strerror or err}); the checkpoints "
                       "are intact. Free some disk space and run again with training.resume=latest to finish "
                       "from the last checkpoint") from err
    trainer.accelerator.wait_for_everyone()


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Published checkpoints in step order. Staging folders (`.partial-*`) never match the name; trainer_state.json
    (written last) is still required, for folders written by other tools or by a transformers save that died."""
    found = []
    for child in run_dir.iterdir() if run_dir.is_dir() else []:
        match = CHECKPOINT_PATTERN.match(child.name)
        if match and (child / TRAINER_STATE).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def checkpoint_to_resume(resume: str | None, run_dir: Path) -> str | None:
    """The checkpoint folder `training.resume` names: the newest complete one for "latest", else the given path."""
    if not resume:
        return None
    if resume == "latest":
        checkpoints = complete_checkpoints(run_dir)
        if not checkpoints:
            raise PRMError(f"training.resume=latest but {run_dir} has no complete checkpoint; "
                           "start without training.resume")
        return str(checkpoints[-1])
    path = Path(resume)
    if not (path / TRAINER_STATE).is_file():
        raise PRMError(f"training.resume={resume}: not a complete checkpoint folder (no trainer_state.json)")
    return str(path)


class AtomicCheckpoints:
    """Trainer mixin: `_save_checkpoint` writes into `.partial-checkpoint-N` and renames it to `checkpoint-N`.

    The steps are those of `transformers.Trainer._save_checkpoint` as of transformers 5.24.0 (see
    MIRRORED_SAVE_CHECKPOINT_SHA256), in the same order and with the same Trainer
    methods; only the folder differs. Under DDP/FSDP every rank writes its share (rng states, optimizer shards)
    into the staging folder, whose name depends only on the step, so all ranks agree on it; a barrier waits for
    all of them before the saving process (`args.should_save`) renames. `write_extras(folder)` adds prmkit's
    own files (prmkit.json) to the same atomic write.
    """

    def write_extras(self, folder: Path) -> None:
        """Hook for files that must be part of every checkpoint."""

    def _save_checkpoint(self, model, trial):
        if trial is not None or self.hp_search_backend is not None:
            return super()._save_checkpoint(model, trial)  # hyperparameter search keeps transformers' own layout
        args, state = self.args, self.state
        run_dir = Path(args.output_dir)
        final = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        staging = staging_folder(final)
        self.store_flos()
        try:
            if args.should_save and staging.exists():
                shutil.rmtree(staging)
            self.accelerator.wait_for_everyone()
            self.save_model(str(staging), _internal_call=True)
            self._record_best_checkpoint(run_dir)
            if not args.save_only_model:
                self._save_optimizer_and_scheduler(str(staging))
                self._save_scaler(str(staging))
                self._save_rng_state(str(staging))
            if args.should_save:
                self._export_callback_states()
                self.write_extras(staging)
                state.save_to_json(str(staging / TRAINER_STATE))  # written last, as transformers does
            self.accelerator.wait_for_everyone()
            if args.should_save:
                publish_folder(staging, final)
        except OSError as err:
            if args.should_save:
                shutil.rmtree(staging, ignore_errors=True)
            raise PRMError(f"could not write checkpoint {final} ({err.strerror or err}); earlier checkpoints are "
                           "intact. Free some disk space (or fix the folder) and continue with "
                           "training.resume=latest") from err
        if args.should_save:
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=args.save_total_limit,
                               best_model_checkpoint=state.best_model_checkpoint, use_mtime=True)
        self.accelerator.wait_for_everyone()

    def _record_best_checkpoint(self, run_dir: Path) -> None:
        """trainer_state.json names the best checkpoint by its final path, never the staging one."""
        args, state = self.args, self.state
        if args.save_strategy not in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST) \
                or not state.best_global_step:
            return
        self.accelerator.wait_for_everyone()
        best = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.best_global_step}")
        if state.best_global_step == state.global_step or os.path.exists(best):
            state.best_model_checkpoint = best

    def _export_callback_states(self) -> None:
        """Stateful callbacks (early stopping, ...) and TrainerControl go into trainer_state.json for resume."""
        for callback in [*self.callback_handler.callbacks, self.control]:
            if not isinstance(callback, ExportableState):
                continue
            name = callback.__class__.__name__
            if isinstance(self.state.stateful_callbacks[name], list):
                self.state.stateful_callbacks[name].append(callback.state())
            else:
                self.state.stateful_callbacks[name] = callback.state()


def _fsync_tree(folder: Path) -> None:
    for root, _, files in os.walk(folder):
        for name in files:
            _fsync(os.path.join(root, name))
        _fsync(root)


def _fsync(path: str | Path) -> None:
    """Flush one file or directory to disk. A platform or filesystem that cannot (Windows directories, some
    network mounts) only loses durability across a power cut; the renames stay atomic. A real I/O error raises."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF, errno.EACCES, errno.EPERM, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
