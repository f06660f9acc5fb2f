"""A scripted policy that follows the Generator protocol: rollouts reach the gold answer by rule, so the labels
`prmkit label` should write are known exactly."""

from __future__ import annotations

from prmkit.generation.base import Sample
from prmkit.generation.options import GenerationOptions

MARK = "<<prefix>>"


class FakePolicy:
    """Knows each problem's gold answer and first wrong step (from synthetic records). A rollout from a prefix
    that holds only correct steps reaches the gold answer in its first `good` samples of every `n`; from a prefix
    holding the error, none does. Sampled solutions (no prefix) are the record's own steps, and `fail_after`
    calls end the "process" with an exception, as a kill would."""

    def __init__(self, records: list[dict], good: int = 2, options: GenerationOptions | None = None,
                 fail_after: int | None = None, delimiter: str = "\n\n"):
        self.name = "fake:rules"
        self.options = options or GenerationOptions(max_new_tokens=32, temperature=0.7, seed=5)
        self.truth = {r["prompt"]: r for r in records}
        self.good, self.fail_after, self.delimiter = good, fail_after, delimiter
        self.calls: list[dict] = []

    def prompt(self, problem: str, prefix: str = "") -> str:
        return f"{problem}{MARK}{prefix}"

    def generate(self, prompts, n=1, *, stop=(), max_new_tokens=None, temperature=None, seed=None):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("killed")
        self.calls.append({"prompts": list(prompts), "n": n, "seed": seed, "stop": tuple(stop),
                           "max_new_tokens": max_new_tokens, "temperature": temperature})
        return [[self._sample(p, j) for j in range(n)] for p in prompts]

    def _sample(self, prompt: str, j: int) -> Sample:
        problem, prefix = prompt.split(MARK)
        record = self.truth[problem]
        if not prefix:  # a whole solution
            text = self.delimiter.join(record["completions"])
        else:
            steps = len([s for s in prefix.split(self.delimiter) if s.strip()])
            error = record["first_error"]
            clean = error == -1 or steps <= error
            answer = record["gold_answer"] if clean and j < self.good else str(int(record["gold_answer"]) + 7)
            text = f"Going on from here. The answer is \\boxed{{{answer}}}."
        return Sample(text=text, tokens=len(text.split()), finish_reason="eos")

    def close(self) -> None:
        pass
