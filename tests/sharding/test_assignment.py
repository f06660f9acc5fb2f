"""Which shard a process is (--shard, torchrun, a SLURM array, a Kubernetes indexed job) and which problems it
takes: every problem exactly once, in whole batches, for any count of shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from prmkit.data.problems import batches
from prmkit.errors import PRMError
from prmkit.shards import Shard, parse_shard, resolve_shard


@pytest.mark.parametrize("per_batch", [1, 3, 4])
@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 30])
def test_every_problem_goes_to_exactly_one_shard_in_whole_batches(count, per_batch):
    problems = list(range(23))
    taken = {index: [p for number, batch in batches(problems, per_batch) if Shard(index, count).takes(number)
                     for p in batch] for index in range(count)}
    assert sorted(p for ps in taken.values() for p in ps) == problems  # each once, none left out
    for index, ps in taken.items():  # a shard holds whole batches of the one-process run, never a part of one
        assert all(p // per_batch % count == index for p in ps)
    if count > 1:  # round robin: no shard gets more than one batch over any other
        sizes = [len({p // per_batch for p in ps}) for ps in taken.values()]
        assert max(sizes) - min(sizes) <= 1


def test_shard_files_sit_beside_the_output_with_the_shard_in_their_name():
    shard = Shard(1, 4)
    assert shard.file("runs/x/labels.jsonl") == Path("runs/x/labels.shard-1-of-4.jsonl")
    assert shard.provenance_file("labels.jsonl") == Path("labels.shard-1-of-4.provenance.json")
    assert str(shard) == "1/4"


@pytest.mark.parametrize("environ, expected", [
    ({}, None),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, (1, 2)),
    ({"RANK": "0", "WORLD_SIZE": "1"}, None),  # a launch of one process is one process
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "0"}, (3, 8)),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4"}, (2, 4)),  # --array=1-4
    ({"JOB_COMPLETION_INDEX": "5", "PRMKIT_SHARD_COUNT": "6"}, (5, 6)),
    # the same shard named twice is no conflict; a one-process torchrun inside an array task names none
    ({"RANK": "2", "WORLD_SIZE": "4", "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, (2, 4)),
    ({"RANK": "0", "WORLD_SIZE": "1", "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, (2, 4)),
])
def test_the_launchers_variables_name_the_shard(environ, expected):
    shard = resolve_shard(None, environ)
    assert (None if shard is None else (shard.index, shard.count)) == expected


def test_an_explicit_shard_wins_over_the_launcher():
    shard = resolve_shard("0/3", {"RANK": "1", "WORLD_SIZE": "2", "JOB_COMPLETION_INDEX": "oops"})
    assert (shard.index, shard.count, shard.source) == (0, 3, "--shard")
    assert resolve_shard("0/1", {"RANK": "1", "WORLD_SIZE": "2"}) is None  # one shard: one process, writing OUT


@pytest.mark.parametrize("environ, message", [
    ({"RANK": "1", "WORLD_SIZE": "2", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4"},
     r"the launchers disagree on this process's shard \(RANK/WORLD_SIZE \(torchrun\) says 1/2; SLURM_ARRAY_TASK_ID "
     r"\(SLURM array\) says 0/4\); pass --shard I/N"),
    ({"JOB_COMPLETION_INDEX": "2"}, "JOB_COMPLETION_INDEX=2 .* without PRMKIT_SHARD_COUNT: set PRMKIT_SHARD_COUNT"),
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "8",
      "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "5"}, "not one range with step 1 .*--array=0-N"),
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "9",
      "SLURM_ARRAY_TASK_COUNT": "3"}, "not one range"),  # --array=0,7,9
    ({"SLURM_ARRAY_TASK_ID": "1"}, "without SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MAX"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a whole number"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, r"RANK/WORLD_SIZE \(torchrun\)='2/2': the index must be 0 to N-1"),
])
def test_unclear_or_conflicting_launchers_are_refused_with_the_fix(environ, message):
    with pytest.raises(PRMError, match=message):
        resolve_shard(None, environ)


@pytest.mark.parametrize("text", ["2", "1/1/2", "-1/2", "a/b", "4/4", "0/0"])
def test_a_bad_shard_flag_says_how_to_write_it(text):
    with pytest.raises(PRMError, match=rf"--shard='{text}': "):
        parse_shard(text)


def test_under_torchrun_a_transformers_process_takes_the_gpu_of_its_local_rank(monkeypatch):
    from prmkit.cli.common import launch_device

    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert launch_device(None, "transformers") == "cuda:3" and launch_device("cuda", "transformers") == "cuda:3"
    assert launch_device("cpu", "transformers") == "cpu"
    assert launch_device(None, "vllm") is None  # vLLM runs where CUDA_VISIBLE_DEVICES points it
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert launch_device("cuda", "transformers") == "cuda"
