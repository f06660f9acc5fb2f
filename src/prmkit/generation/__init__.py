"""Sampling solutions from a policy model, for labelling and search: `options` (every default), `base` (the
outputs contract: `Sample`, the `Generator` protocol, chat prompts, stop strings), `hf` (the transformers backend,
CPU or GPU), `vllm_backend` (vLLM: prefix caching, tensor parallel) and `load_generator` to pick one by name."""

from prmkit.generation.base import Generator, Sample, load_generator
from prmkit.generation.options import GenerationOptions

__all__ = ["GenerationOptions", "Generator", "Sample", "load_generator"]
