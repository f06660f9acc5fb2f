"""The vLLM generation backend: continuous batching, prefix caching (rollouts from one prefix share its KV cache)
and tensor parallelism. vLLM pins its own torch and transformers, so it lives in its own environment
(scripts/setup_vllm.sh) and is imported only when a `VLLMGenerator` is built.

Prompts are tokenized here, with the same tokenizer and rule as the transformers backend, and sent to vLLM as
token ids, so both backends read identical inputs. Each prompt is one vLLM request with its own seed (derived from
the call's seed and the prompt's place), so its samples do not depend on what else is in the batch. vLLM keeps the
stop string in the text it returns and `cut_at_stop` cuts it, exactly as the transformers backend does.

Each sample's `logprob` is the sum of vLLM's log-probs of its sampled tokens (`SamplingParams(logprobs=0)`: the
sampled token's alone). vLLM computes those from the raw logits, before temperature, top-p and penalties, only in
its `logprobs_mode="raw_logprobs"` (its default); the engine is started in that mode and refuses another.
With `options.logprobs` off no log-probs are asked for and every `logprob` is None.

This process never touches CUDA before vLLM has started: vLLM starts its engine process by fork only while the
parent has no CUDA context (with one it must spawn instead, which re-imports the caller's main module and fails in
a script without an `if __name__ == "__main__":` guard), and a context held here costs GPU memory for nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Sequence

import torch

from prmkit.backbones import resolve_base
from prmkit.device import resolve_dtype
from prmkit.errors import PRMError
from prmkit.generation.base import FinishReason, Sample, chat_prompt, check_stop, cut_at_stop
from prmkit.generation.options import GenerationOptions


RAW_LOGPROBS = "raw_logprobs"


def request_seed(seed: int, prompt_index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/prompt/{prompt_index}".encode()).digest()[:8], "big") % (2**63)


def engine_dtype(dtype: str | None, platform: str, supported: Sequence[torch.dtype]) -> torch.dtype:
    """The weights' dtype for vLLM, by the rule of `prmkit.device.resolve_dtype` (auto: fp32 on CPU, bf16 where the
    GPU supports it, fp16 otherwise), but asking vLLM's platform what it supports (`supported`, from NVML on
    NVIDIA GPUs) instead of torch.cuda, which would create a CUDA context in this process."""
    if dtype not in (None, "auto"):
        return resolve_dtype(dtype, torch.device("cpu"))  # a named dtype needs no device
    if platform == "cpu":
        return torch.float32
    return torch.bfloat16 if torch.bfloat16 in supported else torch.float16


def samples_from_outputs(outputs, n: int, stop: tuple[str, ...]) -> list[list[Sample]]:
    """vLLM's request outputs as `n` Samples per prompt. A greedy request was drawn once (see `generate`): its
    sample is repeated, and the repeats say 0 tokens, since nothing was generated for them; a prompt's samples then
    add up to the tokens vLLM really generated. A repeat's logprob is None: it covers no generated token."""
    results = []
    for out in outputs:
        samples = [VLLMGenerator._sample(c, stop) for c in sorted(out.outputs, key=lambda c: c.index)]
        if len(samples) == 1 and n > 1:
            samples += [replace(samples[0], tokens=0, logprob=None)] * (n - 1)
        results.append(samples)
    return results


def sampled_logprob(completion) -> float | None:
    """The sum of the sampled tokens' log-probs: vLLM's `logprobs` holds one {token id: Logprob} per generated
    token, the sampled token among them; None when vLLM returned none."""
    if completion.logprobs is None:
        return None
    return float(sum(step[token].logprob for token, step in zip(completion.token_ids, completion.logprobs)))


class VLLMGenerator:
    """A causal LM from a folder, a .gguf file, an alias (smollm2-135m) or a hub id, sampling with vLLM.
    `engine_args` go to `vllm.LLM` as they are (max_model_len, enforce_eager, ...)."""

    def __init__(self, model: str, options: GenerationOptions | None = None, *, trust_remote_code: bool = False,
                 **engine_args):
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as err:
            raise PRMError(f"the vllm backend needs vLLM ({err}); create its environment with "
                           "scripts/setup_vllm.sh and run prmkit from .venv-vllm") from None
        from transformers import AutoTokenizer

        self.options = options or GenerationOptions()
        folder = resolve_base(model)
        self.name = f"vllm:{model}"
        platform = current_platform.device_type  # vLLM runs where its build targets; it cannot be moved
        if self.options.device is not None and self.options.device != platform:
            raise PRMError(f"device={self.options.device!r}, but this vLLM build runs on {platform!r}; leave device "
                           f"unset or set it to {platform!r} (or use backend=transformers)")
        dtype = engine_dtype(self.options.dtype, platform,
                             () if platform == "cpu" else current_platform.supported_dtypes)
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        # A chat template writes its own special tokens; a bare tokenizer adds its BOS the usual way.
        self.add_special_tokens = not getattr(self.tokenizer, "chat_template", None)
        mode = engine_args.setdefault("logprobs_mode", RAW_LOGPROBS)
        if mode != RAW_LOGPROBS:
            raise PRMError(f"logprobs_mode={mode!r}: a Sample's logprob is the policy's raw log-probability, which "
                           f"vLLM reports only with logprobs_mode={RAW_LOGPROBS!r}; leave it unset")
        if platform == "cpu":
            # With a prompt's prefill cut into chunks, vLLM's CPU worker rewinds that request's seeded generator,
            # which a CPU torch.Generator cannot do ("CPU Generator does not use offset"): the engine dies on the
            # first batch of seeded samples whose prompts overflow one scheduler step (e.g. 100 problems x 4).
            engine_args.setdefault("enable_chunked_prefill", False)
        self.llm = LLM(model=folder, tokenizer=folder, dtype=dtype, seed=self.options.seed,
                       tensor_parallel_size=self.options.tensor_parallel_size,
                       enable_prefix_caching=self.options.enable_prefix_caching,
                       gpu_memory_utilization=self.options.gpu_memory_utilization,
                       trust_remote_code=trust_remote_code, **engine_args)

    def prompt(self, problem: str, prefix: str = "") -> str:
        return chat_prompt(self.tokenizer, problem, prefix, self.options.system_prompt)

    def generate(self, prompts: Sequence[str], n: int = 1, *, stop: Sequence[str] = (),
                 max_new_tokens: int | None = None, temperature: float | None = None,
                 seed: int | None = None) -> list[list[Sample]]:
        from vllm import SamplingParams

        stop = check_stop(stop)
        if n < 1:
            raise ValueError(f"n={n}; ask for at least one sample per prompt")
        if self.llm is None:
            raise PRMError("this generator is closed; build a new one")
        temperature = self.options.temperature if temperature is None else temperature
        seed = self.options.seed if seed is None else seed
        # Greedy decoding has one answer, and vLLM refuses n > 1 without sampling: ask once and repeat it.
        draws = n if temperature > 0 else 1
        params = [SamplingParams(n=draws, temperature=temperature,
                                 top_p=self.options.top_p if temperature > 0 else 1.0,
                                 max_tokens=max_new_tokens or self.options.max_new_tokens,
                                 seed=request_seed(seed, index), stop=list(stop) or None,
                                 include_stop_str_in_output=True, skip_special_tokens=True,
                                 logprobs=0 if self.options.logprobs else None)
                  for index in range(len(prompts))]
        inputs = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=self.add_special_tokens)["input_ids"]}
                  for p in prompts]
        return samples_from_outputs(self.llm.generate(inputs, params, use_tqdm=False), n, stop)

    @staticmethod
    def _sample(completion, stop: tuple[str, ...]) -> Sample:
        """vLLM's finish_reason says "stop" for EOS and stop strings alike; the cut text tells them apart. Its
        token ids end with the EOS token or the one that completed the stop string, as the transformers
        backend counts them."""
        text, matched = cut_at_stop(completion.text, stop)
        reason: FinishReason
        if matched is not None:
            reason = "stop"
        elif completion.finish_reason == "length":
            reason = "length"
        else:
            reason = "eos"
        return Sample(text=text, tokens=len(completion.token_ids), finish_reason=reason, stop=matched,
                      logprob=sampled_logprob(completion))

    def close(self) -> None:
        """Stop vLLM's engine processes now, rather than when the interpreter exits."""
        if self.llm is not None:
            engine_core = getattr(self.llm.llm_engine, "engine_core", None)
            if engine_core is not None:
                engine_core.shutdown()
            self.llm = None
