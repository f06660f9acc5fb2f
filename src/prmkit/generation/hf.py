"""The transformers generation backend: batched sampling with stop strings on CPU or one GPU.

Prompts are expanded to `n` copies each, sorted by length so a batch pads little, generated `generation_batch_size`
sequences at a time with left padding, and put back in prompt order. Each batch samples from its own seed
(derived from the call's seed and the batch's place), inside a forked RNG so the caller's torch random state is
untouched and a call repeated with the same inputs gives the same samples.

Each sample's `logprob` comes from one extra teacher-forced forward over the batch's prompts and counted tokens
(`confidence.completion_logprobs`): `generate` only exposes scores after temperature and top-p, and the baseline
wants the raw distribution. The forward draws no random numbers, so the samples are the same with or without it;
with `options.logprobs` off it is skipped and every `logprob` is None.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Sequence

import torch

from prmkit.backbones import resolve_base
from prmkit.device import resolve_device, resolve_dtype
from prmkit.generation.base import FinishReason, Sample, chat_prompt, check_stop, cut_at_stop
from prmkit.generation.confidence import completion_logprobs
from prmkit.generation.options import GenerationOptions


def batch_seed(seed: int, batch_index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{batch_index}".encode()).digest()[:8], "big") % (2**63)


class TransformersGenerator:
    """A causal LM from a folder, a .gguf file, an alias (smollm2-135m) or a hub id, sampling with `generate`."""

    def __init__(self, model: str, options: GenerationOptions | None = None, *, trust_remote_code: bool = False):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.options = options or GenerationOptions()
        folder = resolve_base(model)
        self.name = f"transformers:{model}"
        self.device = resolve_device(self.options.device)
        dtype = resolve_dtype(self.options.dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        self.tokenizer.padding_side = "left"  # decoder-only batches must end where generation starts
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, use_safetensors=True,
                                                          trust_remote_code=trust_remote_code)
        self.model.to(self.device).eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # A chat template writes its own special tokens; a bare tokenizer adds its BOS the usual way.
        self.add_special_tokens = not getattr(self.tokenizer, "chat_template", None)

    def prompt(self, problem: str, prefix: str = "") -> str:
        return chat_prompt(self.tokenizer, problem, prefix, self.options.system_prompt)

    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], n: int = 1, *, stop: Sequence[str] = (),
                 max_new_tokens: int | None = None, temperature: float | None = None,
                 seed: int | None = None) -> list[list[Sample]]:
        from transformers import GenerationConfig

        stop = check_stop(stop)
        if n < 1:
            raise ValueError(f"n={n}; ask for at least one sample per prompt")
        temperature = self.options.temperature if temperature is None else temperature
        seed = self.options.seed if seed is None else seed
        config = GenerationConfig(
            max_new_tokens=max_new_tokens or self.options.max_new_tokens,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=self.options.top_p if temperature > 0 else None,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_ids),
            stop_strings=list(stop) or None,
        )
        encoded = [self.tokenizer(p, add_special_tokens=self.add_special_tokens)["input_ids"] for p in prompts]
        expanded = [i for i in range(len(prompts)) for _ in range(n)]
        order = sorted(range(len(expanded)), key=lambda j: len(encoded[expanded[j]]))
        samples: list[Sample | None] = [None] * len(expanded)
        size = self.options.generation_batch_size
        for batch_index, start in enumerate(range(0, len(order), size)):
            rows = order[start:start + size]
            batch = self.tokenizer.pad({"input_ids": [encoded[expanded[j]] for j in rows]}, return_tensors="pt")
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                torch.manual_seed(batch_seed(seed, batch_index))
                output = self.model.generate(input_ids=batch["input_ids"].to(self.device),
                                             attention_mask=batch["attention_mask"].to(self.device),
                                             generation_config=config, tokenizer=self.tokenizer)
            new_tokens = output[:, batch["input_ids"].shape[1]:].tolist()
            drawn = [self._sample(ids, stop) for ids in new_tokens]
            if self.options.logprobs:
                scored = completion_logprobs(self.model, [encoded[expanded[j]] for j in rows],
                                             [ids[:s.tokens] for ids, s in zip(new_tokens, drawn)], batch_size=size)
                drawn = [replace(sample, logprob=confidence.logprob) for sample, confidence in zip(drawn, scored)]
            for j, sample in zip(rows, drawn):
                samples[j] = sample
        return [samples[i * n:(i + 1) * n] for i in range(len(prompts))]

    def _sample(self, ids: list[int], stop: tuple[str, ...]) -> Sample:
        """One sequence's new tokens as a Sample. Finished sequences are padded after their end, and the pad
        token may be the EOS token, so the text before the first EOS/pad decides why it ended."""
        ends = self.eos_ids | {self.tokenizer.pad_token_id}
        end = next((i for i, token in enumerate(ids) if token in ends), len(ids))
        text = self.tokenizer.decode(ids[:end], skip_special_tokens=True)
        text, matched = cut_at_stop(text, stop)
        reason: FinishReason
        if matched is not None:
            reason, tokens = "stop", end
        elif end < len(ids):
            reason, tokens = "eos", end + 1  # the EOS token was generated too
        else:
            reason, tokens = "length", len(ids)
        return Sample(text=text, tokens=tokens, finish_reason=reason, stop=matched)

    def close(self) -> None:
        self.model = None
