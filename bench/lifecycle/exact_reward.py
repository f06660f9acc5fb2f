"""The exact judge as a process reward: each step of a policy's completion scored 1 when it is right and 0 when it
is wrong, or built on a wrong step (`lifecycle.exact.exact_labels`, judged against the problem's gold chain). A
completion that never states an answer has its last step scored 0: the judge calls a step of prose without numbers
right, so a chain that stops before the answer would otherwise earn a perfect reward for saying nothing.

It is the process rules' positive control, as answer correctness is GRPO's: a step reward that is right by
construction. A process rule that loses with a learned PRM and holds with this one lost to the PRM, not to the rule;
one that loses with both lost to the rule. It needs every training problem's gold chain, which only the benchmark's
synthetic problems have, so it lives here and not in prmkit.

`ProcessGRPOTrainer` takes it where it takes a `PRMReward`: the same `step_scores_many`, `separator`, `floor`,
`aggregate` and `truncated`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lifecycle.exact import STATED_ANSWER, exact_labels
from lifecycle.problems import gold_values
from prmkit.data.records import split_steps
from prmkit.errors import PRMError
from prmkit.scoring.inputs import completion_text, prompt_text

EXACT = "exact"  # what --prm says to score with this judge instead of a PRM run folder


class ExactStepReward:
    """Step rewards from the exact judge for the problems of `rows` (prompt, gold_answer, gold_steps)."""

    aggregate, floor, truncated = "min", 0.0, "kept"  # chain reward: 1 when every step is right
    __name__ = EXACT

    def __init__(self, rows: Sequence[dict], separator: str = "\n\n"):
        self.separator = separator
        self.problems = {}
        for i, row in enumerate(rows):
            if not row.get("gold_steps"):
                raise PRMError(f"row {i} ({row['prompt'][:60]!r}) has no gold_steps: the exact judge reads the "
                               "gold chain; use the benchmark's problem rows (lifecycle.problems.problem_rows)")
            self.problems[row["prompt"]] = (gold_values(row["gold_steps"]), str(row["gold_answer"]))

    def step_scores_many(self, prompts: Sequence, completions: Sequence) -> list[list[float] | None]:
        """Per completion, 1.0 or 0.0 per step (the trainer's split at `separator`, so the scores land on the steps
        the trainer finds); None for one with no step."""
        out: list[list[float] | None] = []
        for prompt, completion in zip(prompts, completions, strict=True):
            problem = prompt_text(prompt)
            if problem not in self.problems:
                raise PRMError(f"the exact judge has no gold chain for the prompt {problem[:60]!r}")
            steps = split_steps(completion_text(completion), self.separator)
            values, answer = self.problems[problem]
            if not steps:
                out.append(None)
                continue
            labels = exact_labels(problem, steps, values, answer)
            if not any(STATED_ANSWER.search(step) for step in steps):
                labels[-1] = 0
            out.append([float(label) for label in labels])
        return out
