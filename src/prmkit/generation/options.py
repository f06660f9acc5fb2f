"""Every default of sampling from a policy model, written once. A field name is also the keyword argument and,
with dashes, the command-line flag (`max_new_tokens` = `--max-new-tokens`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from prmkit.errors import PRMError

BACKENDS = ("transformers", "vllm")
DEFAULT_SYSTEM_PROMPT = ("Solve the problem step by step. Separate the steps with a blank line. "
                         "End with: The answer is \\boxed{ANSWER}.")


@dataclass(frozen=True)
class GenerationOptions:
    backend: str = "transformers"  # transformers (CPU or GPU) or vllm (its own environment; see the README)
    max_new_tokens: int = 384  # per sample, or per step where a stop string cuts it
    temperature: float = 0.8  # 0 is greedy
    top_p: float = 1.0
    seed: int = 0  # the same seed and inputs give the same samples on the same backend and device
    generation_batch_size: int = 16  # sequences per generate call (transformers backend)
    device: str | None = None  # cuda, mps or cpu; None: the first available
    dtype: str = "auto"  # auto = bf16 on a GPU, fp32 on CPU
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT  # None: the chat template's own default
    # Each Sample's logprob, the policy's confidence (`prmkit search` writes it): one extra forward per generated
    # batch on the transformers backend, vLLM's sampled-token log-probs. False: logprob is None, at no cost;
    # the samples are the same either way. Labelling and rl-filter never read it and turn it off.
    logprobs: bool = True
    tensor_parallel_size: int = 1  # vllm: GPUs per model
    enable_prefix_caching: bool = True  # vllm: rollouts from one prefix reuse its KV cache
    gpu_memory_utilization: float = 0.9  # vllm

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise PRMError(f"backend={self.backend!r} is not known; use one of {', '.join(BACKENDS)}")
        if self.max_new_tokens < 1:
            raise PRMError(f"max_new_tokens={self.max_new_tokens}; use a positive number of tokens")
        if self.temperature < 0:
            raise PRMError(f"temperature={self.temperature}; use 0 (greedy) or more")
        if not 0 < self.top_p <= 1:
            raise PRMError(f"top_p={self.top_p}; use a value in (0, 1]")
        if self.generation_batch_size < 1:
            raise PRMError(f"generation_batch_size={self.generation_batch_size}; use a positive number of sequences")
        if self.tensor_parallel_size < 1:
            raise PRMError(f"tensor_parallel_size={self.tensor_parallel_size}; use 1 or more GPUs")

    def replace(self, **changes) -> "GenerationOptions":
        return replace(self, **changes)
