"""The run folder: refuse to clobber an earlier run, and find the checkpoint to resume from."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from prmkit.config import Config
from prmkit.errors import PRMError

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")


def is_main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def prepare_run_dir(config: Config, *, overwrite: bool = False) -> Path:
    run_dir = config.run_dir
    if run_dir.exists() and any(run_dir.iterdir()) and not config.training.resume:
        if not overwrite:
            raise PRMError(f"run folder {run_dir} already holds files; continue that run with training.resume=latest, "
                           "choose another run_name, or pass --overwrite to replace it")
        if is_main_process():
            shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise PRMError(f"cannot write to the run folder {run_dir} ({err.strerror}); choose another output_dir") from None
    return run_dir


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints in step order; only those whose trainer_state.json exists (written last, so complete)."""
    found = []
    for child in run_dir.iterdir() if run_dir.is_dir() else []:
        match = CHECKPOINT_PATTERN.match(child.name)
        if match and (child / "trainer_state.json").is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def checkpoint_to_resume(config: Config, run_dir: Path) -> str | None:
    resume = config.training.resume
    if not resume:
        return None
    if resume == "latest":
        checkpoints = complete_checkpoints(run_dir)
        if not checkpoints:
            raise PRMError(f"training.resume=latest but {run_dir} has no complete checkpoint; "
                           "start without training.resume")
        return str(checkpoints[-1])
    path = Path(resume)
    if not (path / "trainer_state.json").is_file():
        raise PRMError(f"training.resume={resume}: not a complete checkpoint folder (no trainer_state.json)")
    return str(path)
