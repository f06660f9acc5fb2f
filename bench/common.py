"""Shared pieces of the benchmarks: the real backbone, fixed batches, the machine's sgemm rate, peak RSS."""

from __future__ import annotations

import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from prmkit.backbones import resolve_base  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.model import load_tokenizer  # noqa: E402
from prmkit.tokenize import StepCollator, tokenize_records  # noqa: E402
from prmkit.training.packing import PackedStepCollator  # noqa: E402

BASE = "smollm2-135m"


def backbone_path() -> str:
    return resolve_base(BASE)


def untrained_scorer(batch_size: int):
    """SmolLM2-135M with an untrained one-output head as a PRMScorer (speed does not depend on the weights)."""
    import torch

    from prmkit.model import PRMMetadata, load_token_classifier, load_tokenizer
    from prmkit.scoring.scorer import PRMScorer

    path = backbone_path()
    torch.manual_seed(0)
    model = load_token_classifier(path)
    tokenizer = load_tokenizer(path)
    model.config.pad_token_id = tokenizer.pad_token_id
    metadata = PRMMetadata(base_model=BASE, base_path=path, finetune="none", loss="bce", separator="\n\n",
                           max_length=1024)
    return PRMScorer(model, tokenizer, metadata, device="cpu", batch_size=batch_size)


def fixed_batches(n_batches: int, batch_size: int, seed: int = 0, packed: bool = False) -> list[dict]:
    """The same tokenized chains in the same batches for every variant (prmkit's tokenization), padded by
    prmkit's collator or packed into one row without padding (`training.packing`)."""
    tokenizer = load_tokenizer(backbone_path())
    records = generate_records(n_batches * batch_size, seed)
    chains, _ = tokenize_records(tokenizer, records, separator="\n\n", max_length=512)
    collate = PackedStepCollator(tokenizer.pad_token_id) if packed else StepCollator(tokenizer.pad_token_id)
    rows = [{"input_ids": c.input_ids, "labels": c.labels} for c in chains]
    return [collate(rows[i:i + batch_size]) for i in range(0, len(rows), batch_size)]


def sgemm_gflops(size: int = 1024, repeats: int = 10) -> float:
    """fp32 matmul rate of this machine, measured now (the ceiling for a training FLOP utilisation figure)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / statistics.median(times) / 1e9


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
