"""`compile` (`--compile`): whole-chain batches run through torch.compile with frozen weights. Scores equal the
eager model's to 1e-5 in fp32 on a Llama-style and a GPT-2-style PRM, batches of every size and length share the
compiled graphs, the command-line flag reaches the scorer, and what cannot compile is refused with the reason."""

from __future__ import annotations

import argparse

import pytest
import torch
import torch._inductor.config as inductor
from public_prms import build_qwen_prm
from torch._dynamo.utils import counters

from prmkit.cli.common import add_scoring_flags, scoring_options
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.scoring.scorer import PRMScorer


def chains() -> list[tuple[str, list[str]]]:
    """Chains of three to six steps, each with a prompt of its own (so every chain runs whole)."""
    return [(r["prompt"], r["completions"]) for r in generate_records(11, seed=7)]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_compiled_scores_equal_eager_for_batches_of_every_size_and_length(arch, tiny_run, tiny_gpt2_run):
    run = tiny_run if arch == "llama" else tiny_gpt2_run
    parser = argparse.ArgumentParser()
    add_scoring_flags(parser)
    options = scoring_options(parser.parse_args(["--compile", "--device", "cpu", "--batch-size", "4"]))
    compiled = PRMScorer.from_options(run, options)
    eager = PRMScorer.from_pretrained(run, device="cpu", batch_size=4)
    assert compiled.compiled and not eager.compiled
    every = chains()
    counters.clear()
    assert compiled.warm_up() > 0 and eager.warm_up() == 0
    # one graph for batches of several chains, one for batches of one (torch.compile specialises a size of 1)
    assert counters["stats"]["unique_graphs"] == 2
    # batches of 4, 4 and 3 chains of other lengths, then batches of one chain each: no new graph
    for calls in (every, *[[chain] for chain in every[:3]]):
        got, want = compiled.score_many(calls), eager.score_many(calls)
        assert sum(got, []) == pytest.approx(sum(want, []), abs=1e-5)
    assert counters["stats"]["unique_graphs"] == 2


def test_compile_is_refused_for_a_public_format(tmp_path):
    build_qwen_prm(tmp_path / "qwen")
    with pytest.raises(PRMError, match="compile applies to prmkit PRMs; this is a qwen PRM"):
        PRMScorer.from_pretrained(tmp_path / "qwen", device="cpu", compile=True)


def test_compile_without_a_compiler_is_refused_when_the_scorer_loads(tiny_run):
    with inductor.patch({"cpp.cxx": ("prmkit-test-no-such-compiler",)}), \
            pytest.raises(PRMError, match="compile on CPU needs a C\\+\\+ compiler"):
        PRMScorer.from_pretrained(tiny_run, device="cpu", compile=True)


def test_a_compile_failure_says_to_score_without_compile(tiny_run, monkeypatch):
    scorer = PRMScorer.from_pretrained(tiny_run, device="cpu", compile=True)

    def failing_backend(graph, example_inputs):
        raise AssertionError("a backend that cannot compile this graph")

    scorer._whole_forward = torch.compile(scorer.model, backend=failing_backend, dynamic=True)
    with pytest.raises(PRMError, match=r"compile: torch.compile failed on this model \(AssertionError: a backend "
                                       r"that cannot compile this graph\); score without compile \(drop --compile"):
        scorer.score_many(chains()[:2])
