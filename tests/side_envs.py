"""Running a test script inside one of prmkit's side environments (.venv-vllm, .venv-verl, .venv-trl: each holds a
system the default environment cannot), with a JSON payload on stdin and a JSON answer on stdout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_side_script(python: Path, script: Path, payload, timeout: float) -> dict:
    """SCRIPT run by the side environment's PYTHON with `payload` as JSON on stdin; returns the JSON object it
    prints last (the systems log to stderr). A failed run is an AssertionError with the end of its stderr."""
    done = subprocess.run([str(python), str(script)], input=json.dumps(payload), text=True, capture_output=True,
                          timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-40:])
        raise AssertionError(f"{script.name} failed in {python.parents[1].name} (exit {done.returncode}):\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])
