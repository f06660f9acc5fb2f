"""Run inside .venv-vllm: prmkit's VLLMGenerator on one or more models, each with a list of generate calls.

stdin: {"memory": share of CPU memory, "models": [{"model": folder, "system_prompt": str or null,
        "problems": [str, ...], "calls": [{"prompts": [...] or null for the problems' chat prompts, "n": int,
        "stop": [...], "max_new_tokens": int, "temperature": float, "seed": int}, ...]}, ...]}
stdout (last line): {"models": [{"prompts": [chat prompt per problem], "calls": [[[sample as a dict, ...] per
        prompt] per call]}, ...]}
"""

import json
import sys
from dataclasses import asdict


def main() -> None:
    payload = json.load(sys.stdin)
    from prmkit.generation import GenerationOptions
    from prmkit.generation.vllm_backend import VLLMGenerator

    answers = []
    for spec in payload["models"]:
        options = GenerationOptions(backend="vllm", gpu_memory_utilization=payload["memory"],
                                    system_prompt=spec["system_prompt"])
        generator = VLLMGenerator(spec["model"], options, enforce_eager=True, max_model_len=512)
        prompts = [generator.prompt(problem) for problem in spec["problems"]]
        calls = []
        for call in spec["calls"]:
            out = generator.generate(call["prompts"] or prompts, call["n"], stop=call["stop"],
                                     max_new_tokens=call["max_new_tokens"], temperature=call["temperature"],
                                     seed=call["seed"])
            calls.append([[asdict(sample) for sample in samples] for samples in out])
        generator.close()
        answers.append({"prompts": prompts, "calls": calls})
    print(json.dumps({"models": answers}))


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which re-imports this file
    main()
