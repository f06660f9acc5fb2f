"""Launches of several processes on CPU (gloo) under torchrun: DDP trains like one process with the same global
batch, FSDP is refused where the engine would not shard, `prmkit score` shards rows and each process picks its
own GPU."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.device import Launch, launch_from_env
from prmkit.scoring.distributed import rank_device


def write_config(tmp_path, model_dir):
    write_jsonl(generate_records(64, 5), tmp_path / "train.jsonl")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'runs'}\nmodel: {{base: {model_dir}}}\n"
                   f"data: {{train: {tmp_path / 'train.jsonl'}, max_length: 256}}\nlora: {{dropout: 0.0}}\n"
                   # random batches: the length-grouped sampler groups per process batch, so 2 x 4 and 1 x 8 would
                   # see different batches
                   "training: {max_steps: 4, save_steps: 100, logging_steps: 1, lr: 0.005, group_by_length: false}\n")
    return cfg


def losses(run_dir):
    state = json.loads((run_dir / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def test_ddp_two_processes_match_one_process_with_the_same_global_batch(tmp_path, tiny_llama):
    cfg = write_config(tmp_path, tiny_llama)
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "prmkit",
                          "train", str(cfg), "run_name=ddp", "training.batch_size=4"],
                         capture_output=True, text=True, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = subprocess.run([sys.executable, "-m", "prmkit", "train", str(cfg), "run_name=single",
                             "training.batch_size=8"], capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    # same data order and per-step normalisation over the global batch: the same losses and weights
    assert losses(tmp_path / "runs" / "ddp") == pytest.approx(losses(tmp_path / "runs" / "single"), rel=1e-4)
    a = load_file(tmp_path / "runs" / "ddp" / "adapter_model.safetensors")
    b = load_file(tmp_path / "runs" / "single" / "adapter_model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    # throughput counts both ranks' tokens, and the summary table is printed once
    ddp_summary = json.loads((tmp_path / "runs" / "ddp" / "summary.json").read_text())
    single_summary = json.loads((tmp_path / "runs" / "single" / "summary.json").read_text())
    assert ddp_summary["trained_tokens"] == single_summary["trained_tokens"]
    assert ddp.stdout.count("tokens/s (real tokens)") == 1


def test_fsdp_asked_on_cpu_processes_is_refused_before_anything_is_written(tmp_path, tiny_llama):
    """accelerate shards with FSDP only across GPUs: on CPU processes it would wrap the model in DDP and train to
    the end with training_args.bin saying fsdp. The run stops instead, before its folder exists."""
    cfg = write_config(tmp_path, tiny_llama)
    fsdp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "prmkit",
                           "train", str(cfg), "run_name=fsdp", "training.batch_size=4",
                           "distributed.fsdp=full_shard auto_wrap",
                           "distributed.fsdp_config={transformer_layer_cls_to_wrap: [LlamaDecoderLayer]}"],
                          capture_output=True, text=True, timeout=600)
    assert fsdp.returncode != 0
    assert ("distributed.fsdp='full_shard auto_wrap' asks for FSDP (weights sharded across the processes), but the "
            "engine gives this launch (MULTI_CPU) DDP") in fsdp.stderr, fsdp.stderr[-3000:]
    assert not (tmp_path / "runs" / "fsdp").exists()


def torchrun_score(*args):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "prmkit",
                           "score", *map(str, args), "--device", "cpu"], capture_output=True, text=True, timeout=600)


def chain_scores(row):
    return row["step_scores"] if "candidates" in row else [row["step_scores"]]


def test_score_under_torchrun_shards_rows_and_writes_one_ordered_file(tmp_path, tiny_run):
    from prmkit.cli import main

    run = tiny_run
    rows = generate_records(9, seed=21)
    rows.insert(4, {"prompt": "What is 3 + 3?", "candidates": [["3 + 3 = 6."], "3 + 3 = 7.\n\nSo 7."], "id": "bon"})
    rows.append({"prompt": "What is 2 + 2?", "completion": "2 + 2 = 4.\n\nThe answer is 4."})
    write_jsonl(rows, tmp_path / "in.jsonl")
    # chunks of 2 rows, 9 of the 11 rows: rank 0 gets chunks 0, 2, 4 (the last one cut to 1 row), rank 1 chunks 1, 3
    ddp = torchrun_score(run, tmp_path / "in.jsonl", tmp_path / "ddp.jsonl", "--chunk-rows", "2", "--limit", "9")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert main(["score", str(run), str(tmp_path / "in.jsonl"), str(tmp_path / "one.jsonl"), "--device", "cpu",
                 "--limit", "9"]) == 0
    sharded = [json.loads(line) for line in (tmp_path / "ddp.jsonl").read_text().splitlines()]
    single = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in sharded] == [r["prompt"] for r in rows[:9]]
    assert sharded[4]["id"] == "bon" and sharded[4]["best"] == single[4]["best"]
    for a, b in zip(sharded, single):
        assert a.keys() == b.keys()
        for x, y in zip(chain_scores(a), chain_scores(b), strict=True):
            assert x == pytest.approx(y, abs=1e-5)
    assert ddp.stdout.count("9 rows") == 1 and "by 2 processes" in ddp.stdout  # global counts, printed once
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_bad_row_on_one_rank_stops_every_rank_and_writes_nothing(tmp_path, tiny_run):
    run = tiny_run
    rows = generate_records(6, seed=2)
    rows[3] = {"question": "no prompt here"}  # row 4, in chunk 1: rank 1's
    write_jsonl(rows, tmp_path / "in.jsonl")
    ddp = torchrun_score(run, tmp_path / "in.jsonl", tmp_path / "out.jsonl", "--chunk-rows", "2")
    assert ddp.returncode != 0
    assert "in.jsonl: row 4: no 'prompt'" in ddp.stderr and "rank(s) 1 stopped" in ddp.stderr
    assert not (tmp_path / "out.jsonl").exists() and not list(tmp_path.glob(".*.tmp"))


def test_each_scoring_process_takes_the_gpu_of_its_local_rank(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")  # second machine, second process
    launch = launch_from_env()
    assert rank_device("cuda", launch, cuda_available=True) == "cuda:1"  # not the current GPU, 0 in every process
    assert rank_device(None, launch, cuda_available=True) == "cuda:1"
    assert rank_device(None, launch, cuda_available=False) is None
    assert rank_device("cpu", launch, cuda_available=True) == "cpu"
    with pytest.raises(PRMError, match="'cuda:0' puts all 4 processes of this launch on one GPU; give --device cuda"):
        rank_device("cuda:0", launch, cuda_available=True)
    # one process keeps what was asked
    assert rank_device("cuda:0", Launch(), cuda_available=True) == "cuda:0"
    assert rank_device("cuda", Launch(), cuda_available=True) == "cuda"
