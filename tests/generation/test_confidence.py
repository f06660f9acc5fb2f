"""completion_logprobs against a naive per-token computation (each pair alone, full logits, log_softmax, gather) on
the tiny models: batches of different lengths, left and right padding, chunked heads, empty completions."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from prmkit.errors import PRMError
from prmkit.generation.confidence import CompletionLogprob, completion_logprobs

PROMPTS = [[0, 11, 12, 13], [0, 40], [0, 7, 8, 9, 10, 11, 12, 13, 14, 15], [0, 21, 22]]
COMPLETIONS = [[30, 31, 32], [41, 42, 43, 44, 45, 46, 47], [50], []]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request, tiny_llama, tiny_gpt2):
    folder = tiny_llama if request.param == "llama" else tiny_gpt2
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def naive_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """One unpadded pair: the full vocabulary's log-probs at every position that predicts a completion token."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0]
    return torch.log_softmax(logits.double(), dim=-1)[len(prompt) - 1:len(prompt) - 1 + len(completion)]


def naive_tokens(model, prompt: list[int], completion: list[int]) -> list[float]:
    logprobs = naive_logprobs(model, prompt, completion)
    return [logprobs[k, token].item() for k, token in enumerate(completion)]


def naive_margins(model, prompt: list[int], completion: list[int]) -> list[float]:
    """Each written token's log-prob minus the best token's at its position."""
    logprobs = naive_logprobs(model, prompt, completion)
    return [(logprobs[k, token] - logprobs[k].max()).item() for k, token in enumerate(completion)]


def naive(model, prompt: list[int], completion: list[int]) -> float:
    return sum(naive_tokens(model, prompt, completion))


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("batch_size,positions_per_chunk", [(4, 1024), (3, 2), (1, 1)])
def test_equals_the_naive_computation_whatever_the_batching(model, padding_side, batch_size, positions_per_chunk):
    found = completion_logprobs(model, PROMPTS, COMPLETIONS, batch_size=batch_size,
                                positions_per_chunk=positions_per_chunk, padding_side=padding_side)
    expected = [naive(model, p, c) for p, c in zip(PROMPTS, COMPLETIONS)]
    assert [f.tokens for f in found] == [len(c) for c in COMPLETIONS]
    for result, value in zip(found, expected):
        assert result.logprob == pytest.approx(value, abs=1e-5)
    assert found[3] == CompletionLogprob(0.0, 0) and found[3].mean is None
    assert found[1].mean == pytest.approx(expected[1] / 7, abs=1e-6)
    assert all(f.logprob < 0 for f in found[:3])
    for result, prompt, completion in zip(found, PROMPTS, COMPLETIONS):
        assert result.token_logprobs == pytest.approx(naive_tokens(model, prompt, completion), abs=1e-5)
    assert found[1].lowest == pytest.approx(min(naive_tokens(model, PROMPTS[1], COMPLETIONS[1])), abs=1e-5)
    assert found[3].lowest is None
    for result, prompt, completion in zip(found, PROMPTS, COMPLETIONS):
        assert result.token_margins == pytest.approx(naive_margins(model, prompt, completion), abs=1e-5)
    assert found[3].widest_margin is None


def test_the_margin_is_zero_where_the_policy_wrote_its_own_first_choice(model):
    prompt = PROMPTS[0]
    with torch.no_grad():
        first_choice = int(model(torch.tensor([prompt])).logits[0, -1].argmax())
    runner_up = int(model(torch.tensor([prompt])).logits[0, -1].argsort(descending=True)[1])
    chosen, other = completion_logprobs(model, [prompt, prompt], [[first_choice], [runner_up]])
    assert chosen.token_margins == (0.0,)
    assert other.widest_margin < 0
    assert other.widest_margin == pytest.approx(other.logprob - chosen.logprob, abs=1e-5)


def test_the_lowest_token_is_the_least_likely_one():
    result = CompletionLogprob(logprob=-3.5, tokens=3, token_logprobs=(-0.25, -3.0, -0.25))
    assert result.lowest == -3.0 and result.mean == pytest.approx(-3.5 / 3)
    assert CompletionLogprob(-3.5, 3, (-0.25, -3.0, -0.25), (0.0, -2.5, 0.0)).widest_margin == -2.5
    assert CompletionLogprob(logprob=-1.0, tokens=2).lowest is None  # made without per-token values


def test_a_pair_scores_the_same_alone_and_beside_longer_ones(model):
    alone = completion_logprobs(model, PROMPTS[1:2], COMPLETIONS[1:2])[0]
    batched = completion_logprobs(model, PROMPTS, COMPLETIONS, padding_side="left")[1]
    assert batched.logprob == pytest.approx(alone.logprob, abs=1e-5)


def test_bad_input_is_a_clear_error(model):
    with pytest.raises(ValueError, match="one completion per prompt"):
        completion_logprobs(model, PROMPTS, COMPLETIONS[:2])
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        completion_logprobs(model, [[0], []], [[1], [2]])
    with pytest.raises(ValueError, match="padding_side"):
        completion_logprobs(model, PROMPTS, COMPLETIONS, padding_side="middle")
    with pytest.raises(ValueError, match="batch_size=0"):
        completion_logprobs(model, PROMPTS, COMPLETIONS, batch_size=0)


def test_a_model_that_transforms_its_logits_after_the_head_is_refused(model, monkeypatch):
    monkeypatch.setattr(model.config, "final_logit_softcapping", 30.0, raising=False)
    with pytest.raises(PRMError, match="final_logit_softcapping=30.0"):
        completion_logprobs(model, PROMPTS, COMPLETIONS)
