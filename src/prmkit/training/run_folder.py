"""The run folder before training: refuse to clobber an earlier run, check it is writable and can hold the
checkpoints, and hold a resumed run to the settings it started with. Which checkpoint to resume from is
`prmkit.training.checkpoints`' business."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import torch.distributed as dist

from prmkit.config import Config, load_config
from prmkit.device import launch_from_env
from prmkit.errors import PRMError
from prmkit.training.checkpoints import remove_stale_staging


def is_main_process() -> bool:
    """The process that prepares and writes the run folder: `prmkit.device.Launch`'s main process (the same process
    the Trainer calls world process zero)."""
    return launch_from_env().is_main


def prepare_run_dir(config: Config, *, overwrite: bool = False) -> Path:
    """The run folder, ready for training: refused if it would clobber an earlier run, replaced under `overwrite`,
    checked to be writable, cleared of a killed run's unfinished saves.

    Under a launcher the main process does this alone while the others wait for its outcome: a rank that looked for
    itself could find the main process's write probe and refuse the folder as taken, or write into it while
    `--overwrite` deletes it. The others raise the main process's error, so every rank stops with the same message.
    The process group must be joined first (the Trainer's arguments join it when asked for their device)."""
    error = None
    if is_main_process():
        try:
            _prepare(config, overwrite)
        except Exception as err:  # any failure must reach the waiting ranks, or they would wait forever
            error = err
    problem = _from_main_process(None if error is None else str(error))
    if error is not None:
        raise error
    if problem is not None:
        raise PRMError(problem)
    return config.run_dir


def _prepare(config: Config, overwrite: bool) -> None:
    run_dir = config.run_dir
    if run_dir.exists() and not run_dir.is_dir():
        raise PRMError(f"run folder {run_dir} is a file; choose another output_dir or run_name")
    if run_dir.exists() and any(run_dir.iterdir()) and not config.training.resume:
        if not overwrite:
            raise PRMError(f"run folder {run_dir} already holds files; continue that run with training.resume=latest, "
                           "choose another run_name, or pass --overwrite to replace it")
        shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise PRMError(f"cannot write to the run folder {run_dir} ({err.strerror}); "
                       "choose another output_dir") from None
    remove_stale_staging(run_dir)


def _from_main_process(message: str | None) -> str | None:
    """The main process's `message`, on every rank; a barrier besides (the others block until it is sent)."""
    if not (dist.is_available() and dist.is_initialized()):
        assert os.environ.get("WORLD_SIZE", "1") == "1", "join the process group before preparing the run folder"
        return message
    box = [message]
    dist.broadcast_object_list(box, src=0)
    return box[0]


CONFIG_FILE = "config.yaml"
# What a resumed run may change: how long it runs, and how it is logged, saved, evaluated and fed (none of which
# changes what it learns), where its folder is and what it may load. Everything else (data, max_length,
# separator, model, LoRA, loss, optimizer, learning rate, batch size, seed, ...) would make the second half another
# run than the first, and the data position restored from the checkpoint would point into other data.
RESUMABLE_KEYS = frozenset({
    "output_dir", "run_name", "model.trust_remote_code", "model.allow_pickle",
    "training.max_steps", "training.epochs",
    "training.logging_steps", "training.report_to", "training.save_steps", "training.save_total_limit",
    "training.eval_steps", "training.eval_batch_size", "training.dataloader_num_workers",
    "training.gradient_checkpointing", "training.torch_compile",
})


def resume_changes(config: Config, checkpoint: str) -> dict[str, list]:
    """What `config` changes against the config its run started with (config.yaml in the checkpoint's run folder),
    as {key: [started with, now]}. A change outside RESUMABLE_KEYS is a PRMError naming every such key with both
    values. A checkpoint without a config.yaml beside it has nothing to be checked against (with a warning)."""
    started_file = Path(checkpoint).parent / CONFIG_FILE
    if not started_file.is_file():
        print(f"prmkit: warning: no {CONFIG_FILE} beside {checkpoint}: the resumed run's settings cannot be checked "
              "against the ones it started with", file=sys.stderr, flush=True)
        return {}
    started = _flat(load_config(started_file))
    now = _flat(config)
    changes = {key: [started.get(key), now.get(key)] for key in now.keys() | started.keys()
               if started.get(key) != now.get(key) and key != "training.resume"}
    refused = sorted(key for key in changes if key not in RESUMABLE_KEYS)
    if refused:
        listed = "; ".join(f"{key} is {changes[key][1]!r}, the run started with {changes[key][0]!r}"
                           for key in refused)
        raise PRMError(f"training.resume={config.training.resume} would change the settings of the run in "
                       f"{started_file.parent} (it started with {started_file}): {listed}. A resumed run keeps "
                       f"the settings it started with: set {', '.join(refused)} back (or resume with "
                       f"`prmkit train {started_file} training.resume={config.training.resume}`), or start a new run "
                       "under another run_name. Only the length of the run (training.max_steps, training.epochs) and "
                       "how it is logged, saved and evaluated may change on resume")
    return dict(sorted(changes.items()))


def _flat(config: Config) -> dict:
    """`section.key` -> value, as a user spells the keys (YAML and overrides)."""
    flat = {}
    for key, value in config.model_dump(mode="json").items():
        if isinstance(value, dict):  # a section
            flat.update({f"{key}.{name}": inner for name, inner in value.items()})
        else:
            flat[key] = value
    return flat


def check_free_space(run_dir: Path, *, saved_params: int, trainable_params: int, checkpoints_kept: int | None) -> None:
    """Fail before training when not even the weights of one checkpoint fit on the disk; warn when the checkpoints
    kept at once (plus the one being written and the final model) may not.

    Rough sizes, fp32: 4 bytes per saved parameter (all of them for a full fine-tune, the adapter and head for
    LoRA) and up to 8 more per trainable parameter for the optimizer state (AdamW's two moments; the other
    optimizers keep less). The error uses the weights alone, a lower bound, so it never stops a run that fits.
    """
    free = shutil.disk_usage(run_dir).free
    weights = 4 * saved_params
    checkpoint = weights + 8 * trainable_params
    if free < weights:
        raise PRMError(f"only {_size(free)} free on the disk of {run_dir}, but one checkpoint's weights alone take "
                       f"about {_size(weights)}; free some space or choose another output_dir")
    at_once = (checkpoints_kept or 1) + 1
    needed = checkpoint * at_once + weights
    if free < needed:
        kept = (f"training.save_total_limit={checkpoints_kept}" if checkpoints_kept
                else "training.save_total_limit is unset, so every checkpoint is kept")
        print(f"prmkit: warning: {_size(free)} free on the disk of {run_dir}, but {at_once} checkpoints of about "
              f"{_size(checkpoint)} ({kept}; one more while a save is written) and the final model need about "
              f"{_size(needed)}. A save that runs out of space stops the run with the earlier checkpoints intact; "
              "lower training.save_total_limit or free some space", file=sys.stderr, flush=True)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"
