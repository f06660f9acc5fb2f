"""Why shards take whole batches (docs/sharding.md): with the transformers backend a prompt's samples depend on
the other prompts of its generate call, even with the same seed, so only running a batch's call exactly as one
process runs it gives a problem the record one process writes."""

from __future__ import annotations

from prmkit.generation.hf import TransformersGenerator
from prmkit.generation.options import GenerationOptions


def test_a_prompts_samples_change_when_another_prompt_joins_its_call(tiny_llama):
    generator = TransformersGenerator(str(tiny_llama), GenerationOptions(max_new_tokens=12, temperature=1.0,
                                                                         system_prompt=None, device="cpu"))
    first = generator.prompt("Tom has 3 apples and buys 12 more.")
    other = generator.prompt("She sells 4 boxes of 6 pens, so she sells how many pens in all?")

    def texts(prompts):
        return [[s.text for s in row] for row in generator.generate(prompts, n=2, seed=7)]

    together = texts([first, other])
    assert texts([first, other]) == together  # the same call, the same samples
    assert texts([first])[0] != together[0]  # the same prompt and seed in another call: other samples
