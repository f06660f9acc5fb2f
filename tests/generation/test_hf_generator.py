"""The transformers generation backend on a tiny random model: the outputs contract, seeds, stop strings, greedy."""

from __future__ import annotations

import pytest
import torch

from prmkit.errors import PRMError
from prmkit.generation import GenerationOptions, load_generator
from prmkit.generation.base import chat_prompt, check_stop, cut_at_stop


@pytest.fixture(scope="module")
def generator(tiny_llama):
    options = GenerationOptions(max_new_tokens=12, temperature=1.0, generation_batch_size=3, system_prompt=None)
    return load_generator(str(tiny_llama), options)


def test_n_samples_per_prompt_in_prompt_order(generator):
    prompts = ["Tom has 3 apples.", "What is the total cost?", "Step 1: 7 - 2 = 5."]
    out = generator.generate(prompts, n=2, seed=4)
    assert [len(samples) for samples in out] == [2, 2, 2]
    alone = generator.generate([prompts[1]], n=2, seed=4, temperature=0)
    batched = generator.generate(prompts, n=2, seed=4, temperature=0)
    assert [s.text for s in batched[1]] == [s.text for s in alone[0]]  # left padding does not change greedy output
    for samples in out:
        for sample in samples:
            assert 1 <= sample.tokens <= 12
            assert sample.finish_reason in ("eos", "length")  # no stop strings were given
            assert (sample.finish_reason == "length") == (sample.tokens == 12)


def test_same_seed_same_samples_other_seed_other_samples_and_caller_rng_untouched(generator):
    prompts = ["Tom has 3 apples.", "The answer is"]
    state = torch.get_rng_state()
    first = generator.generate(prompts, n=3, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    assert generator.generate(prompts, n=3, seed=7) == first
    other = generator.generate(prompts, n=3, seed=8)
    assert [s.text for p in other for s in p] != [s.text for p in first for s in p]


def test_greedy_gives_n_equal_samples_whatever_the_seed(generator):
    out = generator.generate(["Each friend gets"], n=3, temperature=0, seed=1)
    again = generator.generate(["Each friend gets"], n=1, temperature=0, seed=99)
    assert len({s.text for s in out[0]}) == 1
    assert out[0][0] == again[0][0]


def test_stop_strings_cut_the_sample_before_the_stop(generator):
    stops = list("0123456789 .=+-*/?")  # a random model emits one of these within a few tokens
    out = generator.generate(["Tom has"] * 4, n=2, stop=stops, seed=3, max_new_tokens=40)
    reasons = [s.finish_reason for p in out for s in p]
    assert "stop" in reasons
    for sample in (s for p in out for s in p):
        assert not any(stop in sample.text for stop in stops)
        assert (sample.stop is not None) == (sample.finish_reason == "stop")


def test_sample_accounting_for_stop_eos_and_length(generator):
    tokenizer = generator.tokenizer
    body = tokenizer("Tom has 3 apples.\n\nThe answer", add_special_tokens=False)["input_ids"]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    stopped = generator._sample(body + [pad, pad], ("\n\n",))
    assert (stopped.text, stopped.finish_reason, stopped.tokens, stopped.stop) == (
        "Tom has 3 apples.", "stop", len(body), "\n\n")
    ended = generator._sample(body + [eos, pad], ())
    assert (ended.finish_reason, ended.tokens) == ("eos", len(body) + 1)
    full = generator._sample(body, ())
    assert (full.finish_reason, full.tokens, full.text) == ("length", len(body), "Tom has 3 apples.\n\nThe answer")


def test_cut_at_stop_takes_the_earliest_stop():
    assert cut_at_stop("a\n\nb. c", ["b.", "\n\n"]) == ("a", "\n\n")
    assert cut_at_stop("abc", ["x"]) == ("abc", None)


def test_bad_stop_and_options_are_clear_errors():
    with pytest.raises(PRMError, match="wrap it"):
        check_stop("\n\n")
    with pytest.raises(PRMError, match="empty"):
        check_stop(["\n\n", ""])
    with pytest.raises(PRMError, match="backend"):
        GenerationOptions(backend="tgi")
    with pytest.raises(PRMError, match="temperature"):
        GenerationOptions(temperature=-1)


def test_chat_prompt_uses_the_template_and_opens_the_assistant_turn(tokenizer):
    plain = chat_prompt(tokenizer, "What is 2 + 2?", "First, ", "Be brief.")
    assert plain == "Be brief.\n\nWhat is 2 + 2?\n\nFirst, "
    templated = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer, eos_token="</s>")
    templated.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    text = chat_prompt(templated, "What is 2 + 2?", "First, ", "Be brief.")
    assert text == "<system>Be brief.</system><user>What is 2 + 2?</user><assistant>First, "


def test_each_samples_logprob_is_the_raw_log_prob_of_its_counted_tokens(generator):
    """Checked against `generate`'s own raw logits (before temperature and top-p) on a greedy run: every counted
    token, the EOS one included, and nothing after it."""
    from transformers import GenerationConfig

    prompts = ["Tom has 3 apples.", "What is the total cost?"]
    samples = generator.generate(prompts, n=1, temperature=0, max_new_tokens=12)
    config = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=generator.tokenizer.pad_token_id,
                              eos_token_id=sorted(generator.eos_ids))
    for prompt, (sample,) in zip(prompts, samples):
        ids = generator.tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = generator.model.generate(input_ids=ids, generation_config=config, output_logits=True,
                                       return_dict_in_generate=True)
        new = out.sequences[0, ids.shape[1]:]
        expected = sum(torch.log_softmax(out.logits[k][0].double(), -1)[new[k]].item() for k in range(sample.tokens))
        assert sample.logprob == pytest.approx(expected, abs=1e-4)
        assert sample.logprob < 0


def test_the_extra_forward_does_not_change_the_samples(generator, monkeypatch):
    import prmkit.generation.hf as hf
    from prmkit.generation.confidence import CompletionLogprob

    prompts = ["Tom has 3 apples.", "The answer is", "Each friend gets"]
    scored = generator.generate(prompts, n=3, seed=11)
    monkeypatch.setattr(hf, "completion_logprobs",
                        lambda model, prompt_ids, completion_ids, **_: [CompletionLogprob(0.0, 0)] * len(prompt_ids))
    unscored = generator.generate(prompts, n=3, seed=11)
    assert [(s.text, s.tokens, s.finish_reason) for p in scored for s in p] == \
        [(s.text, s.tokens, s.finish_reason) for p in unscored for s in p]
    assert all(s.logprob is not None and s.logprob < 0 for p in scored for s in p)
    assert len({s.logprob for p in scored for s in p}) > 1


def test_with_logprobs_off_no_extra_forward_runs_and_the_samples_are_the_same(tiny_llama, generator, monkeypatch):
    import prmkit.generation.hf as hf

    prompts = ["Tom has 3 apples.", "The answer is", "Each friend gets"]
    scored = generator.generate(prompts, n=3, seed=11)
    off = load_generator(str(tiny_llama), generator.options.replace(logprobs=False))

    def forbidden(*args, **kwargs):
        raise AssertionError("completion_logprobs ran with logprobs=False")

    monkeypatch.setattr(hf, "completion_logprobs", forbidden)
    unscored = off.generate(prompts, n=3, seed=11)
    assert [(s.text, s.tokens, s.finish_reason, s.stop) for p in scored for s in p] == \
        [(s.text, s.tokens, s.finish_reason, s.stop) for p in unscored for s in p]
    assert all(s.logprob is None for p in unscored for s in p)
    assert all(s.logprob is not None for p in scored for s in p)
