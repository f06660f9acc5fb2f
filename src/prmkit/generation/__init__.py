"""Sampling solutions from a policy model, for labelling and search: `options` (every default), `base` (the
outputs contract: `Sample`, the `Generator` protocol, chat prompts, stop strings), `hf` (the transformers backend,
CPU or GPU), `vllm_backend` (vLLM: prefix caching, tensor parallel), `confidence` (the policy's log-prob of
what it wrote, the baseline beside a PRM) and `load_generator` to pick one by name."""

from prmkit.generation.base import Generator, Sample
from prmkit.generation.options import GenerationOptions

__all__ = ["GenerationOptions", "Generator", "Sample", "load_generator"]


def load_generator(model: str, options: GenerationOptions | None = None) -> Generator:
    """A generator for `model` (a folder, a .gguf file, an alias such as smollm2-135m, or a hub id) on the
    backend `options.backend` names."""
    options = options or GenerationOptions()
    if options.backend == "vllm":
        from prmkit.generation.vllm_backend import VLLMGenerator
        return VLLMGenerator(model, options)
    from prmkit.generation.hf import TransformersGenerator
    return TransformersGenerator(model, options)
