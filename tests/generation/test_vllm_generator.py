"""The vLLM generation backend: how its outputs become Samples (no vLLM needed), the hint when vLLM is missing, and,
where .venv-vllm exists, the outputs contract, seeds, stop strings and greedy agreement with the transformers
backend on SmolLM2-135M-Instruct."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch
from vllm_helpers import CPU_MEMORY_SHARE, build_vllm_sized_llama, needs_vllm, run_in_vllm

from prmkit.errors import PRMError
from prmkit.generation import GenerationOptions, Sample, load_generator
from prmkit.generation.vllm_backend import VLLMGenerator, engine_dtype, request_seed, samples_from_outputs

PROMPTS = ["Tom has 3 apples.", "What is the total cost?", "Step 1: 7 - 2 = 5."]
STOPS = list("0123456789 .=+-*/?")  # a random model emits one of these within a few tokens
PROBLEMS = ["Tom has 3 bags of 4 apples. How many apples does he have?",
            "A pen costs 2 dollars. How much do 5 pens cost?",
            "What is 7 - 2?"]
GREEDY_TOKENS = 16


def completion(text: str, tokens: int, finish_reason: str, index: int = 0, logprobs=None):
    return SimpleNamespace(text=text, token_ids=list(range(tokens)), finish_reason=finish_reason, index=index,
                           logprobs=logprobs)


def test_a_samples_logprob_sums_the_sampled_tokens_logprobs():
    # with SamplingParams(logprobs=0) each step holds the sampled token, and may hold others (a top-k request)
    steps = [{0: SimpleNamespace(logprob=-0.5)},
             {1: SimpleNamespace(logprob=-1.25), 7: SimpleNamespace(logprob=-3.0)},
             {2: SimpleNamespace(logprob=-0.25)}]
    sample = VLLMGenerator._sample(completion("So 7.", 3, "stop", logprobs=steps), ())
    assert sample.logprob == pytest.approx(-2.0) and sample.tokens == 3
    assert VLLMGenerator._sample(completion("So 7.", 3, "stop"), ()).logprob is None  # vLLM computed none
    repeated = samples_from_outputs([SimpleNamespace(outputs=[completion("So 7.", 3, "stop", logprobs=steps)])],
                                    n=2, stop=())[0]
    assert [s.logprob for s in repeated] == [pytest.approx(-2.0), None]  # a repeat covers no generated token


def test_samples_are_cut_at_the_earliest_stop_and_told_apart_from_eos_and_length():
    stop = ("\n\n", "=")
    # vLLM keeps the stop string (include_stop_str_in_output); the earliest of the stop strings wins
    assert VLLMGenerator._sample(completion("3 + 4 = 7.\n\n", 9, "stop"), stop) == Sample(
        text="3 + 4 ", tokens=9, finish_reason="stop", stop="=")
    assert VLLMGenerator._sample(completion("So 7.\n\n", 4, "stop"), stop) == Sample(
        text="So 7.", tokens=4, finish_reason="stop", stop="\n\n")
    # vLLM says "stop" for an EOS too; with no stop string in the text it was the EOS
    assert VLLMGenerator._sample(completion("So 7.", 4, "stop"), stop).finish_reason == "eos"
    assert VLLMGenerator._sample(completion("So 7 and", 12, "length"), stop) == Sample(
        text="So 7 and", tokens=12, finish_reason="length", stop=None)


def test_a_greedy_sample_repeated_n_times_counts_its_tokens_once():
    # vLLM draws a greedy request once; the n - 1 repeats generated nothing
    greedy = SimpleNamespace(outputs=[completion("So 7.", 5, "stop")])
    sampled = SimpleNamespace(outputs=[completion("b", 3, "length", index=1), completion("a", 2, "length")])
    repeated, drawn = samples_from_outputs([greedy, sampled], n=3, stop=())[0], \
        samples_from_outputs([sampled], n=2, stop=())[0]
    assert [s.text for s in repeated] == ["So 7."] * 3 and {s.finish_reason for s in repeated} == {"eos"}
    assert [s.tokens for s in repeated] == [5, 0, 0]
    assert [(s.text, s.tokens) for s in drawn] == [("a", 2), ("b", 3)]  # in vLLM's index order, each counted


def test_auto_dtype_follows_what_the_platform_supports():
    assert engine_dtype("auto", "cuda", [torch.bfloat16, torch.float16, torch.float32]) == torch.bfloat16
    assert engine_dtype(None, "cuda", [torch.float16, torch.float32]) == torch.float16  # e.g. a V100
    assert engine_dtype("auto", "cpu", ()) == torch.float32
    assert engine_dtype("fp16", "cuda", [torch.bfloat16]) == torch.float16  # a named dtype is kept
    with pytest.raises(PRMError, match="dtype='half8' is not known"):
        engine_dtype("half8", "cuda", ())


def test_building_the_generator_creates_no_cuda_context_before_vllm_starts(tiny_llama, monkeypatch):
    """vLLM forks its engine process only from a parent without a CUDA context; the generator must not make one
    (e.g. by asking torch.cuda whether bf16 is supported) before `LLM` is built."""
    built = {}

    def no_cuda(*args, **kwargs):
        raise AssertionError("torch.cuda was asked before vLLM started")

    for name in ("is_bf16_supported", "init", "_lazy_init", "get_device_capability", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    vllm = ModuleType("vllm")
    vllm.LLM = lambda **kwargs: built.update(kwargs)
    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(device_type="cuda", supported_dtypes=[torch.float16, torch.float32])
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    VLLMGenerator(str(tiny_llama), GenerationOptions(backend="vllm", gpu_memory_utilization=0.5))
    assert built["dtype"] == torch.float16 and built["gpu_memory_utilization"] == 0.5
    assert built["logprobs_mode"] == "raw_logprobs"  # a Sample's logprob is the policy's, before temperature
    with pytest.raises(PRMError, match="logprobs_mode='processed_logprobs'"):
        VLLMGenerator(str(tiny_llama), GenerationOptions(backend="vllm"), logprobs_mode="processed_logprobs")


def test_vllm_is_asked_for_the_sampled_tokens_logprobs_only_when_they_are_wanted(tiny_llama, monkeypatch):
    asked = []

    class LLM:
        def __init__(self, **kwargs):
            pass

        def generate(self, inputs, params, use_tqdm):
            asked.extend(params)
            return [SimpleNamespace(outputs=[completion("So 7.", 1, "stop", logprobs=None if p.logprobs is None
                                                        else [{0: SimpleNamespace(logprob=-0.5)}])])
                    for p in params]

    vllm = ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, lambda **kwargs: SimpleNamespace(**kwargs)
    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(device_type="cuda", supported_dtypes=[torch.float16])
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    on = VLLMGenerator(str(tiny_llama), GenerationOptions(backend="vllm")).generate(PROMPTS[:2], n=1)
    assert [p.logprobs for p in asked] == [0, 0] and [s.logprob for (s,) in on] == [-0.5, -0.5]
    asked.clear()
    off = VLLMGenerator(str(tiny_llama), GenerationOptions(backend="vllm", logprobs=False)).generate(PROMPTS[:2], n=1)
    assert [p.logprobs for p in asked] == [None, None] and [s.logprob for (s,) in off] == [None, None]
    assert [s.text for (s,) in off] == [s.text for (s,) in on]


def test_on_cpu_prompts_are_never_prefilled_in_chunks(tiny_llama, monkeypatch):
    """vLLM's CPU worker rewinds a chunked request's seeded generator, which a CPU torch.Generator cannot do: with
    chunked prefill the engine dies on a large seeded batch (the real run is in the vLLM tests below)."""
    built = {}
    vllm = ModuleType("vllm")
    vllm.LLM = lambda **kwargs: built.update(kwargs)
    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(device_type="cpu", supported_dtypes=[torch.float32])
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    VLLMGenerator(str(tiny_llama), GenerationOptions(backend="vllm"))
    assert built["enable_chunked_prefill"] is False
    platforms.current_platform = SimpleNamespace(device_type="cuda", supported_dtypes=[torch.float16])
    built.clear()
    VLLMGenerator(str(tiny_llama), GenerationOptions(backend="vllm"))
    assert "enable_chunked_prefill" not in built  # a GPU keeps vLLM's own scheduling


def test_request_seeds_depend_on_the_call_seed_and_the_prompt_place_only():
    assert request_seed(0, 1) == request_seed(0, 1)
    assert len({request_seed(seed, index) for seed in range(3) for index in range(3)}) == 9


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this environment")
def test_without_vllm_the_error_says_how_to_get_it(tiny_llama):
    with pytest.raises(PRMError, match="scripts/setup_vllm.sh"):
        load_generator(str(tiny_llama), GenerationOptions(backend="vllm"))


def smollm2_folder() -> tuple[str | None, str]:
    from prmkit.backbones import resolve_base

    try:
        return resolve_base("smollm2-135m"), ""
    except PRMError as err:
        return None, f"SmolLM2-135M-Instruct is not available here: {err}"


@pytest.fixture(scope="module")
def vllm_answers(tmp_path_factory):
    """One run in .venv-vllm: the contract calls on a tiny random model, then (when SmolLM2 is here) greedy chat
    prompts on SmolLM2."""
    tiny = build_vllm_sized_llama(tmp_path_factory.mktemp("vllm-policy"))

    def call(prompts, n, seed, *, stop=(), max_new_tokens=12, temperature=1.0):
        return {"prompts": prompts, "n": n, "seed": seed, "stop": list(stop), "max_new_tokens": max_new_tokens,
                "temperature": temperature}

    tiny_calls = [
        call(PROMPTS, 2, 4), call(PROMPTS, 2, 4), call(PROMPTS, 2, 5),
        call([PROMPTS[0], "The answer is"], 2, 4),  # the first prompt again, with another batch mate
        call(["Tom has"] * 4, 2, 3, stop=STOPS, max_new_tokens=40),
        call(["Each friend gets"], 3, 1, temperature=0),
        call(["Each friend gets"], 1, 9, temperature=0),  # the same prompt greedy again: another call and seed, n=1
        # seeded samples of more prompt tokens than one scheduler step holds (64 x ~160 > 8,192)
        call([f"Tom has {i} apples and " * 20 for i in range(64)], 2, 7, max_new_tokens=4),
    ]
    greedy = [call(None, 1, 0, max_new_tokens=GREEDY_TOKENS, temperature=0)]
    models = [{"model": str(tiny), "system_prompt": None, "problems": [], "calls": tiny_calls}]
    smollm2, _ = smollm2_folder()
    if smollm2:
        models.append({"model": smollm2, "system_prompt": GenerationOptions().system_prompt, "problems": PROBLEMS,
                       "calls": greedy})
    answer = run_in_vllm("generate.py", {"memory": CPU_MEMORY_SHARE, "models": models})
    return [[[[Sample(**s) for s in samples] for samples in out] for out in model["calls"]] + [model["prompts"]]
            for model in answer["models"]]


@needs_vllm
def test_n_samples_per_prompt_in_prompt_order_with_token_counts(vllm_answers):
    first = vllm_answers[0][0]
    assert [len(samples) for samples in first] == [2, 2, 2]
    for sample in (s for samples in first for s in samples):
        assert 1 <= sample.tokens <= 12
        assert sample.finish_reason in ("eos", "length")  # no stop strings were given
        assert (sample.finish_reason == "length") == (sample.tokens == 12)
        assert sample.stop is None


@needs_vllm
def test_same_seed_same_samples_whatever_the_batch_other_seed_other_samples(vllm_answers):
    first, again, other, other_batch = vllm_answers[0][:4]
    assert again == first
    assert [s.text for p in other for s in p] != [s.text for p in first for s in p]
    assert other_batch[0] == first[0]  # a prompt's samples do not depend on the other prompts of the call
    assert first[0][0] != first[0][1]  # the n samples of one prompt are different draws


@needs_vllm
def test_stop_strings_cut_the_sample_before_the_stop(vllm_answers):
    samples = [s for p in vllm_answers[0][4] for s in p]
    assert "stop" in [s.finish_reason for s in samples]
    for sample in samples:
        assert not any(stop in sample.text for stop in STOPS)
        assert (sample.stop is not None) == (sample.finish_reason == "stop")
        assert 1 <= sample.tokens <= 40


@needs_vllm
def test_greedy_gives_n_equal_samples(vllm_answers):
    greedy, alone = vllm_answers[0][5][0], vllm_answers[0][6][0][0]
    assert len({s.text for s in greedy}) == 1
    assert greedy[0].tokens >= 1 and [s.tokens for s in greedy[1:]] == [0, 0]  # drawn once, counted once
    # the repeated answer is what greedy decoding writes, not a copy of one lucky draw: a separate greedy
    # generation of the prompt (another call and seed) writes the same text at the same cost
    assert (alone.text, alone.tokens, alone.finish_reason) == (greedy[0].text, greedy[0].tokens,
                                                               greedy[0].finish_reason)


@needs_vllm
def test_greedy_output_agrees_with_the_transformers_backend(vllm_answers):
    """Same chat prompts, temperature 0, fp32 on both: the first tokens of every answer are the same."""
    folder, reason = smollm2_folder()
    if folder is None:
        pytest.skip(reason)
    greedy, prompts = vllm_answers[1][0], vllm_answers[1][1]
    hf = load_generator(folder, GenerationOptions(max_new_tokens=GREEDY_TOKENS))
    assert [hf.prompt(problem) for problem in PROBLEMS] == prompts
    expected = hf.generate(prompts, n=1, temperature=0)
    encode = hf.tokenizer
    for got, want in zip(greedy, expected):
        got_ids = encode(got[0].text, add_special_tokens=False)["input_ids"]
        want_ids = encode(want[0].text, add_special_tokens=False)["input_ids"]
        assert got_ids[:8] == want_ids[:8], (got[0].text, want[0].text)
        assert got[0].tokens == want[0].tokens and got[0].finish_reason == want[0].finish_reason
        if got[0].text == want[0].text:  # the same tokens: vLLM's raw log-probs and the transformers forward agree
            assert got[0].logprob == pytest.approx(want[0].logprob, abs=1e-3)


def test_search_leaves_the_prm_half_the_gpu_unless_told_otherwise():
    """vLLM's 0.9 would leave the PRM, on the same GPU, a tenth of it; `prmkit search` asks for half, as
    search-and-learn does, and the flag still decides."""
    from prmkit.cli import build_parser
    from prmkit.cli.common import generation_options

    def memory(*flags):
        args = build_parser().parse_args(["search", "run", "data.jsonl", "out.jsonl", "--policy", "m", *flags])
        return generation_options(args).gpu_memory_utilization

    assert memory() == 0.5
    assert memory("--gpu-memory-utilization", "0.7") == 0.7
    label = build_parser().parse_args(["label", "data.jsonl", "out.jsonl", "--policy", "m"])
    assert label.gpu_memory_utilization == GenerationOptions().gpu_memory_utilization  # vLLM alone on its GPU


@needs_vllm
def test_a_seeded_batch_larger_than_one_scheduler_step_is_sampled_whole(vllm_answers):
    big = vllm_answers[0][7]
    assert len(big) == 64 and all(len(samples) == 2 for samples in big)
    assert all(1 <= s.tokens <= 4 for samples in big for s in samples)
