"""A scripted policy and a PRM that reads scores off the steps, so search mechanics are tested exactly and fast.

The policy follows the Generator contract: `prompt(problem, prefix)` keeps both apart, and `generate` asks a
script for each sample's whole continuation, then cuts it at the first stop string as a real backend does. The
scorer gives a step the number written in it as `[0.7]` (0.5 when there is none) and records every call.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Sequence

from prmkit.generation.base import Sample, cut_at_stop

Script = Callable[[str, str, int], "str | tuple[str, str]"]  # (problem, prefix, k-th such sample) -> text[, end]
SCORE = re.compile(r"\[([0-9.]+)\]")
SEP = "\x1f"


class ScriptedPolicy:
    name = "fake:policy"

    def __init__(self, script: Script):
        self.script = script
        self.calls: list[dict] = []
        self.tokens = 0  # every token of every sample, as a search must count them

    def prompt(self, problem: str, prefix: str = "") -> str:
        return f"{problem}{SEP}{prefix}"

    def generate(self, prompts: Sequence[str], n: int = 1, *, stop: Sequence[str] = (),
                 max_new_tokens: int | None = None, temperature: float | None = None,
                 seed: int | None = None) -> list[list[Sample]]:
        seen: Counter = Counter()
        out = []
        for prompt in prompts:
            problem, prefix = prompt.split(SEP, 1)
            row = []
            for _ in range(n):
                k = seen[(problem, prefix)]
                seen[(problem, prefix)] += 1
                written = self.script(problem, prefix, k)
                text, end = written if isinstance(written, tuple) else (written, "eos")
                cut, matched = cut_at_stop(text, stop)
                if matched is not None:
                    row.append(Sample(cut, len(cut.split()) + 1, "stop", matched))
                else:
                    row.append(Sample(text, len(text.split()) + (end == "eos"), end))
            out.append(row)
            self.tokens += sum(sample.tokens for sample in row)
        self.calls.append({"prompts": [p.split(SEP, 1) for p in prompts], "n": n, "stop": tuple(stop),
                           "temperature": temperature, "seed": seed})
        return out

    def close(self) -> None:
        pass


class StepScorer:
    def __init__(self):
        self.calls: list[list[tuple[str, list[str]]]] = []

    def score_many(self, chains):
        chains = [(prompt, list(steps)) for prompt, steps in chains]
        self.calls.append(chains)
        for _, steps in chains:
            assert steps and all(s.strip() for s in steps), f"an empty step was sent to the PRM: {steps}"
        return [[float(m.group(1)) if (m := SCORE.search(step)) else 0.5 for step in steps] for _, steps in chains]
