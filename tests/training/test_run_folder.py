"""The run folder before training: an unwritable folder, a file in its place, a full disk and too little room for
the checkpoints are each a clear error (or warning) before any training starts."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from prmkit.config import load_config
from prmkit.errors import PRMError
from prmkit.training.run_folder import check_free_space, prepare_run_dir

Usage = namedtuple("Usage", "total used free")


@pytest.mark.parametrize("output_dir", ["file", "proc"])
def test_unwritable_output_dir_is_a_prmerror_before_training(output_dir, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    base = blocker if output_dir == "file" else Path("/proc/prmkit-test")
    config = load_config(None, [f"output_dir={base}", "run_name=run"])
    with pytest.raises(PRMError, match="cannot write to the run folder"):
        prepare_run_dir(config)


def test_run_folder_that_is_a_file_is_a_prmerror(tmp_path):
    (tmp_path / "run").write_text("x")
    with pytest.raises(PRMError, match="is a file"):
        prepare_run_dir(load_config(None, [f"output_dir={tmp_path}", "run_name=run"]))


def test_disk_full_at_the_write_probe_is_a_prmerror(tmp_path, monkeypatch):
    write_text = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.startswith(".write-test"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(PRMError, match="No space left on device"):
        prepare_run_dir(load_config(None, [f"output_dir={tmp_path}", "run_name=run"]))


def test_tight_free_space_warns(tmp_path, monkeypatch, capsys):
    weights, checkpoint = 4 * 1000, 12 * 1000
    monkeypatch.setattr("prmkit.training.run_folder.shutil.disk_usage", lambda path: Usage(0, 0, weights + 1))
    check_free_space(tmp_path, saved_params=1000, trainable_params=1000, checkpoints_kept=3)
    warning = capsys.readouterr().err
    assert "warning" in warning and "training.save_total_limit=3" in warning
    monkeypatch.setattr("prmkit.training.run_folder.shutil.disk_usage",
                        lambda path: Usage(0, 0, 4 * checkpoint + weights))
    check_free_space(tmp_path, saved_params=1000, trainable_params=1000, checkpoints_kept=3)
    assert capsys.readouterr().err == ""


def test_too_little_free_space_for_one_checkpoint_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr("prmkit.training.run_folder.shutil.disk_usage", lambda path: Usage(10 ** 12, 10 ** 12, 1000))
    with pytest.raises(PRMError, match=r"only 1000 B free .* one checkpoint's weights alone take about 4 KB"):
        check_free_space(tmp_path, saved_params=1000, trainable_params=1000, checkpoints_kept=None)


RANK_SCRIPT = """
import sys, time
from pathlib import Path
import torch.distributed as dist
from prmkit.config import load_config
from prmkit.errors import PRMError
from prmkit.training.run_folder import prepare_run_dir

config = load_config(None, [f"output_dir={sys.argv[1]}", "run_name=run"])
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    unlink = Path.unlink

    def slow_probe_unlink(self, *args, **kwargs):  # the main process lingers with its write probe in the folder
        if self.name.startswith(".write-test"):
            time.sleep(3)
        unlink(self, *args, **kwargs)

    Path.unlink = slow_probe_unlink
else:
    time.sleep(1)  # the other rank arrives while the probe is there
try:
    print("prepared", prepare_run_dir(config, overwrite=sys.argv[2] == "overwrite"))
except PRMError as err:
    print("refused:", err)
dist.destroy_process_group()
"""


def run_two_ranks(tmp_path, mode: str) -> list[str]:
    """Two processes in a gloo group, as torchrun starts them, each preparing the same run folder."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ranks = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(tmp_path), mode], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                   "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank)})
             for rank in range(2)]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), [err[-2000:] for _, err in outputs]
    return [out.strip() for out, _ in outputs]


def test_only_the_main_process_prepares_the_run_folder_while_the_others_wait(tmp_path):
    """A rank that checked the folder itself would find rank 0's write probe there and refuse it as taken."""
    assert run_two_ranks(tmp_path, "fresh") == [f"prepared {tmp_path / 'run'}"] * 2
    assert list((tmp_path / "run").iterdir()) == []


def test_the_main_process_refusal_stops_every_rank_with_its_message(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.safetensors").write_text("an earlier run")
    outputs = run_two_ranks(tmp_path, "keep")
    assert outputs[0] == outputs[1] and outputs[0].startswith(f"refused: run folder {tmp_path / 'run'} already holds")
