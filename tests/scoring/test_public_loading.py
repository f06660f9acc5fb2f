"""Public PRMs loaded lean: in the dtype asked, with no fp32 copy of the weights on the way (the memory a 7B PRM in bf16
takes is its bf16 size, not 30 GB first); pickled weights fetched from the hub when allow_pickle asks for them; a
path that is no local folder said to be one before the hub is blamed."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from public_prms import build_causal_prm, build_qwen_prm
from safetensors.torch import load_file, save_file
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from prmkit.errors import PRMError
from prmkit.scoring.formats import HUB_FILES
from prmkit.scoring.scorer import PRMScorer

sys.path.insert(0, str(Path(__file__).parent))
from test_trl_format import CHAINS, build_trl_prm  # noqa: E402


class TensorMemory(TorchDispatchMode):
    """Bytes of CPU floating-point storage that torch ops make while it is active, per dtype, and the most held at
    once: a storage counts from the op that makes it until nothing but this record refers to it (a tensor, a
    Parameter or a view on it all do), checked after every op."""

    def __init__(self):
        super().__init__()
        self.held: dict[int, torch.UntypedStorage] = {}  # storage address -> the storage, kept to read its uses
        self.peak: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu" and tensor.is_floating_point():
                storage = tensor.untyped_storage()
                if storage.nbytes():
                    self.held[storage.data_ptr()] = (tensor.dtype, storage)
        self._count()
        return out

    def _count(self) -> None:
        now: Counter = Counter()
        for key, (dtype, storage) in list(self.held.items()):
            if torch._C._storage_Use_Count(storage._cdata) <= 1:  # only this record's reference is left
                del self.held[key]
            else:
                now[dtype] += storage.nbytes()
        for dtype, size in now.items():
            self.peak[dtype] = max(self.peak[dtype], size)

    def __exit__(self, *exc):
        self.held.clear()
        return super().__exit__(*exc)


def as_bf16(folder: Path) -> Path:
    """The folder's safetensors weights rewritten in bf16, as the released 7B PRMs are stored."""
    for path in folder.glob("*.safetensors"):
        save_file({k: v.to(torch.bfloat16) for k, v in load_file(str(path)).items()}, str(path),
                  metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def bf16_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bf16-prms")
    return {"qwen": as_bf16(build_qwen_prm(root / "qwen")[0]),
            "math-shepherd": as_bf16(build_causal_prm(root / "shepherd", "math-shepherd")[0]),
            "trl": as_bf16(build_trl_prm(root / "trl"))}


@pytest.mark.parametrize("prm_format", ["qwen", "math-shepherd", "trl"])
def test_a_bf16_load_never_holds_an_fp32_copy_of_the_weights(prm_format, bf16_folders, monkeypatch):
    # transformers reads checkpoint tensors in worker threads, which a dispatch mode (thread-local) does not see;
    # its own switch loads them in this thread instead, the same tensors in the same dtypes
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "1")
    folder = bf16_folders[prm_format]
    with TensorMemory() as fp32_load:
        reference = PRMScorer.from_pretrained(folder, device="cpu", dtype="fp32", prm_format=prm_format)
    whole = sum(4 * p.numel() for p in reference.model.model.parameters())  # the backbone in fp32 (not an LM head
    # the format reads two rows of)
    # the instrument sees the loader: asked in fp32, every weight is held in fp32
    assert fp32_load.peak[torch.float32] >= whole
    with TensorMemory() as bf16_load:
        scorer = PRMScorer.from_pretrained(folder, device="cpu", dtype="bf16", prm_format=prm_format)
    assert next(scorer.model.model.parameters()).dtype == torch.bfloat16
    # fp32 only for the heads (the scorer runs them in fp32) and rotary tables: a few percent of the weights here,
    # where the backbone was read in fp32 and then cast, its whole fp32 size
    assert bf16_load.peak[torch.float32] < 0.1 * whole, (prm_format, dict(bf16_load.peak), whole)
    # all told, one bf16 copy (half the fp32 size) and those few fp32 tensors: never the fp32 size
    assert sum(bf16_load.peak.values()) < 0.75 * whole, (prm_format, dict(bf16_load.peak), whole)
    assert scorer.score(*CHAINS[0]) == pytest.approx(reference.score(*CHAINS[0]), abs=3e-2)


def test_allow_pickle_fetches_a_hub_models_pickled_weights(tmp_path, monkeypatch):
    import huggingface_hub

    pickled = tmp_path / "snapshot"
    folder, model = build_causal_prm(pickled, "math-shepherd")
    (pickled / "model.safetensors").unlink()
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")  # a model published only in pickles
    asked = []

    def snapshot_download(repo_id, allow_patterns=None, **kwargs):  # the hub's client, without the network
        asked.append((repo_id, list(allow_patterns)))
        return str(pickled)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    scorer = PRMScorer.from_pretrained("acme/pickled-prm", device="cpu", allow_pickle=True)
    assert asked[-1] == ("acme/pickled-prm", HUB_FILES + ["pytorch_model*.bin"])
    local = PRMScorer.from_pretrained(pickled, device="cpu", allow_pickle=True)
    assert scorer.score(*CHAINS[1]) == local.score(*CHAINS[1])
    with pytest.raises(PRMError, match="only as pickle files"):  # not asked: no pickle is fetched, nor read
        PRMScorer.from_pretrained("acme/pickled-prm", device="cpu")
    assert asked[-1] == ("acme/pickled-prm", HUB_FILES) and not any(p.endswith(".bin") for p in HUB_FILES)


def test_a_path_that_is_no_local_folder_is_said_to_be_none_before_the_hub(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from prmkit.cli import main

    class RepositoryNotFoundError(Exception):  # what the hub answers an id it does not hold
        pass

    def snapshot_download(repo_id, **kwargs):
        raise RepositoryNotFoundError(f"404: {repo_id}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "prm-old").mkdir(parents=True)
    with pytest.raises(PRMError) as raised:
        PRMScorer.from_pretrained("runs/prm", device="cpu")
    message = str(raised.value)
    assert message.startswith(f"runs/prm: no such local folder ({tmp_path / 'runs' / 'prm'} does not exist; "
                              f"{tmp_path / 'runs'} holds prm-old)")
    assert "RepositoryNotFoundError" in message and "hf download runs/prm" in message  # the hub second
    (tmp_path / "chains.jsonl").write_text(json.dumps({"prompt": "p", "completions": ["a"]}) + "\n")
    assert main(["score", "runs/prm", "chains.jsonl", "out.jsonl", "--device", "cpu"]) == 2
    assert "runs/prm: no such local folder" in capsys.readouterr().err
