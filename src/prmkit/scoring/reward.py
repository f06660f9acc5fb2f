"""A trained PRM as an RL reward: `PRMReward` plugs into TRL's GRPOTrainer as one of `reward_funcs`.

    from prmkit import PRMReward
    reward = PRMReward("runs/prm", aggregate="min")
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], ...)

TRL calls `reward(prompts=[...], completions=[...], **columns)` with one prompt per completion and expects one
float per completion; it logs the reward under `reward.__name__`. Prompts and completions may be strings or
chat message lists. A completion with no step (empty or whitespace only) gets the floor reward, the lowest a
scored chain can get, so a policy cannot earn reward by saying nothing. No completion raises: one with more than
`max_steps` steps or a step over `max_step_chars` characters is scored as far as it goes and counts as truncated
(`bound_steps`, the rule `prmkit serve` applies too), so one runaway sample cannot end an RL run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from prmkit.errors import PRMError
from prmkit.scoring.aggregate import AGGREGATIONS, FLOOR, TRUNCATED, chain_reward, floor_steps, log_truncated_share
from prmkit.scoring.inputs import MAX_STEP_CHARS, MAX_STEPS, Separator, bound_steps, completion_text, prompt_text
from prmkit.scoring.options import ScoringOptions
from prmkit.scoring.scorer import PRMScorer

DEFAULTS = ScoringOptions()


class PRMReward:
    """Callable reward: one aggregate PRM score per completion.

    `floor` is the reward for a completion with no scorable step (default 0.0: the lowest probability of a bce
    PRM, and the wrong-step label of an mse one). `truncated` says what a completion longer than the PRM's
    max_length gets: "kept" scores the steps that fit, "floor" gives the floor, so that hiding a bad step past
    the cut cannot pay under the `min` aggregation.
    """

    def __init__(self, scorer: PRMScorer | str | Path, *, aggregate: str = "min", floor: float | None = None,
                 truncated: str = "kept", separator: Separator = None, batch_size: int = DEFAULTS.batch_size,
                 device: str | None = None, dtype: str | None = None, name: str | None = None,
                 max_steps: int = MAX_STEPS, max_step_chars: int = MAX_STEP_CHARS):
        if aggregate not in AGGREGATIONS:
            raise PRMError(f"aggregate={aggregate!r} is not known; use one of {', '.join(AGGREGATIONS)}")
        if truncated not in TRUNCATED:
            raise PRMError(f"truncated={truncated!r} is not known; use 'kept' or 'floor'")
        if not isinstance(scorer, PRMScorer):
            scorer = PRMScorer.from_pretrained(scorer, device=device, dtype=dtype, batch_size=batch_size)
        self.scorer = scorer
        self.aggregate = aggregate
        self.floor = FLOOR if floor is None else float(floor)
        self.truncated = truncated
        self.separator = separator
        self.max_steps = max_steps
        self.max_step_chars = max_step_chars
        self.__name__ = name or f"prm_{aggregate}"  # TRL names the logged reward column after this

    def steps_of(self, completion) -> list[str]:
        return self.scorer.split_steps(completion_text(completion), self.separator)

    def __call__(self, prompts: Sequence, completions: Sequence, **kwargs) -> list[float]:
        """One reward per completion; extra keyword arguments (dataset columns, trainer state) are ignored."""
        if len(prompts) != len(completions):
            raise PRMError(f"{len(prompts)} prompts for {len(completions)} completions; give one prompt per "
                           "completion (TRL repeats each prompt for its generations)")
        scores = self.step_scores_many(prompts, completions)
        log_truncated_share(kwargs.get("log_metric"), self.__name__, scores)
        return [self.floor if s is None else chain_reward(s, self.aggregate, self.floor, self.truncated)
                for s in scores]

    def step_scores_many(self, prompts: Sequence, completions: Sequence) -> list[list[float | None] | None]:
        """The PRM's step scores per completion (None where a step was left unscored); None for a completion with
        no step."""
        steps = [bound_steps(self.steps_of(c), self.max_steps, self.max_step_chars) for c in completions]
        todo = [i for i, (kept, cut) in enumerate(steps) if kept or cut]
        scored = self.scorer.score_many([(prompt_text(prompts[i]), steps[i][0]) for i in todo])
        out: list[list[float | None] | None] = [None] * len(completions)
        for i, step_scores in zip(todo, scored):
            out[i] = step_scores + [None] * steps[i][1]
        return out

    def step_rewards(self, prompt, completion) -> list[float]:
        """One reward per step of the completion (for trainers with per-step rewards); a step left unscored (cut
        by max_length or the size limits) or scored NaN or infinite gets the floor (`floor_steps`, the rule every
        per-step reward follows); a completion with no step gets an empty list."""
        scores = self.step_scores_many([prompt], [completion])[0]
        return [] if scores is None else floor_steps(scores, self.floor)
