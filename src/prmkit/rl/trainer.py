"""Process-supervised GRPO: TRL's GRPOTrainer with per-token advantages from a prmkit PRM's step rewards.

    from prmkit import PRMReward
    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer
    trainer = ProcessGRPOTrainer(model=policy, prm=PRMReward("runs/prm"), train_dataset=rows,
                                 args=ProcessGRPOConfig(output_dir="grpo", advantage_rule="min"))

The PRM is the trainer's one reward function: TRL samples, calls it once per batch (so it logs the PRM's chain
reward as `rewards/<name>/mean`), then this class replaces TRL's per-completion advantages with per-token ones
(`prmkit.rl.advantages`, which documents the rules). Sampling, KL, clipping, the loss and vLLM generation stay
TRL's: its `_compute_loss` takes advantages of shape (B, T) as they are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
from dataclasses import dataclass, field

import torch
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id

from prmkit.answers import AnswerChecker, extract_answer
from prmkit.data.records import split_steps
from prmkit.errors import PRMError
from prmkit.rl.advantages import RULES, SCALES, completion_steps, group_advantages
from prmkit.scoring.aggregate import chain_reward
from prmkit.scoring.inputs import completion_text


@dataclass
class ProcessGRPOConfig(GRPOConfig):
    """GRPOConfig plus how step rewards become advantages. `outcome_weight` > 0 adds that weight times the
    group-normalised answer correctness (the dataset's `answer_column` checked by `prmkit.answers`)."""

    advantage_rule: str = field(default="sum", metadata={"help": "sum, min or outcome"})
    outcome_weight: float = field(default=0.0, metadata={"help": "weight of answer correctness"})
    advantage_scale: str = field(default="rms", metadata={"help": "rms: a group's sum/min advantages scaled to unit "
                                                                   "root mean square; none: as the rule makes them"})
    answer_column: str = field(default="answer", metadata={"help": "dataset column with the gold answer"})

    def __post_init__(self):
        problems = []
        if self.advantage_rule not in RULES:
            problems.append(f"advantage_rule={self.advantage_rule!r} is not known; use one of {', '.join(RULES)}")
        if self.advantage_scale not in SCALES:
            problems.append(f"advantage_scale={self.advantage_scale!r} is not known; use one of {', '.join(SCALES)}")
        if not self.outcome_weight >= 0:
            problems.append(f"outcome_weight={self.outcome_weight!r} is negative; use 0 (PRM only) or more")
        problems += _inherited_problems(self)
        if problems:
            raise PRMError("; ".join(problems))
        super().__post_init__()


def _inherited_problems(config: ProcessGRPOConfig) -> list[str]:
    """GRPOConfig fields that shape TRL's per-completion advantages, which this trainer replaces: a value other than
    TRL's default would be accepted and do nothing, so it is refused by name with what to use instead."""
    problems = []
    if config.scale_rewards not in ("group", True):  # TRL reads True as "group", False as "none"
        problems.append(f"scale_rewards={config.scale_rewards!r} is not supported: ProcessGRPOTrainer always divides "
                        "by the standard deviation within each group (TRL's default, 'group'); leave scale_rewards "
                        "unset")
    if config.reward_weights is not None:
        problems.append(f"reward_weights={config.reward_weights!r} is not supported: the PRM is the trainer's one "
                        "reward; weigh answer correctness against it with outcome_weight= instead")
    if config.multi_objective_aggregation != "sum_then_normalize":
        problems.append(f"multi_objective_aggregation={config.multi_objective_aggregation!r} is not supported: the "
                        "PRM is the trainer's one reward, so there is nothing to aggregate; leave it unset and mix "
                        "in answer correctness with outcome_weight=")
    return problems


def _decoder(processing_class):
    tokenizer = getattr(processing_class, "tokenizer", processing_class)

    def decode(ids) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)  # as TRL decodes completions

    return decode


class _StepScores:
    """The trainer's reward function: asks the PRM for every completion's step scores once, keeps them (and the
    answers' correctness) for the advantages, and returns the PRM's chain reward for TRL to log.

    The PRM reads the policy's tokens decoded, the text whose steps receive the rewards, not TRL's `completions`:
    where TRL parses a conversational response (a reasoning part or tool calls split out of the content) those
    are another text, and its step scores would land on other steps of the decoded one. Answer correctness is
    checked on TRL's `completions`, where a parsed response's answer is its content."""

    def __init__(self, trainer: ProcessGRPOTrainer, prm):
        self.trainer, self.prm = trainer, prm
        self.__name__ = getattr(prm, "__name__", "prm")

    def __call__(self, prompts, completions, completion_ids=None, **columns) -> list[float]:
        assert completion_ids is not None, "TRL passes every reward function the completion ids"
        decode = _decoder(self.trainer.processing_class)
        texts = [decode(ids) for ids in completion_ids]
        scores = self.prm.step_scores_many(prompts, texts)
        if inspect.iscoroutine(scores):
            # TRL calls this from synchronous code; a served PRM's client is async, so it gets a loop of its own in
            # a thread (the calling thread may already run one, as in a notebook)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                scores = pool.submit(asyncio.run, scores).result()
        self.trainer._pending = {"texts": texts, "ids": [list(i) for i in completion_ids],
                                 "scores": list(scores), "correct": self.trainer._correctness(completions, columns)}
        floor, aggregate = self.prm.floor, self.prm.aggregate
        return [floor if s is None else chain_reward(s, aggregate, floor, self.prm.truncated) for s in scores]


class ProcessGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages are per token, from the step rewards of `prm` (a `PRMReward` or a
    `RemotePRMReward`; a remote one must be given the run's `separator`, which the trainer needs to find the
    steps in the policy's tokens)."""

    def __init__(self, model, prm, args: ProcessGRPOConfig | None = None, **kwargs):
        if "reward_funcs" in kwargs:
            raise PRMError("ProcessGRPOTrainer takes its reward from prm=; drop reward_funcs= (answer correctness "
                           "comes in through ProcessGRPOConfig(outcome_weight=..., answer_column=...))")
        for name in ("tools", "environment_factory"):
            if kwargs.get(name) is not None:
                raise PRMError(f"ProcessGRPOTrainer does not take {name}=: TRL joins the policy's turns and the "
                               "tools' answers into one completion, and the PRM would score the tools' text as the "
                               "policy's steps; train without tools, or with GRPOTrainer and PRMReward as one of "
                               "its reward_funcs (one reward per completion)")
        if args is not None and not isinstance(args, ProcessGRPOConfig):
            raise PRMError(f"args is a {type(args).__name__}; use ProcessGRPOConfig, which adds advantage_rule")
        self.separator = prm.separator if prm.separator is not None else _run_separator(prm)
        if args is None:  # TRL's default, with the fields this trainer reads
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = ProcessGRPOConfig(f"{name.split('/')[-1]}-GRPO")
        self.prm = prm
        self._pending: dict | None = None
        self._checker: AnswerChecker | None = None
        super().__init__(model=model, reward_funcs=[_StepScores(self, prm)], args=args, **kwargs)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self._checker is not None:  # its worker processes live as long as the training run, no longer
                self._checker.close()
                self._checker = None

    def _correctness(self, completions, columns) -> list[float] | None:
        if self.args.outcome_weight == 0:
            return None
        golds = columns.get(self.args.answer_column)
        if golds is None:
            raise PRMError(f"outcome_weight={self.args.outcome_weight} needs the gold answers, but the dataset has "
                           f"no column {self.args.answer_column!r}; set answer_column= to the column that has them")
        if self._checker is None:
            self._checker = AnswerChecker()
        answers = [extract_answer(completion_text(c)) for c in completions]
        return [float(ok) for ok in self._checker.check_many(answers, [str(g) for g in golds])]

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        pending, self._pending = self._pending, None
        assert pending is not None, "TRL did not call the PRM reward for this batch"
        if "tool_mask" in output:
            raise PRMError("the rollout_func returned an env_mask: its completions hold text the policy did not "
                           "write, which the PRM would score as the policy's steps; ProcessGRPOTrainer needs "
                           "completions that are the policy's tokens alone")
        rows = gather_object(list(zip(*self._per_completion(pending))))  # groups may span processes
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        advantages, flat_groups = [], 0
        for start in range(0, len(rows), g):
            rewards, ends, lengths, outcomes = zip(*[r[:4] for r in rows[start:start + g]])
            group = group_advantages(rewards, ends, lengths, outcomes, self.args.advantage_rule,
                                     self.args.outcome_weight, scale=self.args.advantage_scale)
            flat_groups += all(v == 0 for values in group for v in values)
            advantages += group
        local = advantages[self.accelerator.process_index * len(inputs):][:len(inputs)]
        width = output["completion_ids"].shape[1]
        table = torch.zeros(len(local), width, device=output["completion_ids"].device)
        for i, values in enumerate(local):
            table[i, :len(values)] = torch.tensor(values[:width])
        output["advantages"] = table
        self._log_steps(mode, rows)
        self._log_advantages(mode, advantages, flat_groups / max(len(rows) // g, 1))
        return output

    def _per_completion(self, pending: dict):
        """Per completion: step rewards (floor rules applied), step end tokens, token count, outcome reward, and
        flags for the log (no step, a step left unread)."""
        decode = _decoder(self.processing_class)
        floor = self.prm.floor
        rewards, ends, lengths, outcomes, empty, cut = [], [], [], [], [], []
        for i, (ids, text, scores) in enumerate(zip(pending["ids"], pending["texts"], pending["scores"])):
            steps = split_steps(text, self.separator)
            empty.append(not scores and not steps)
            cut.append(scores is not None and any(s is None for s in scores))
            step_rewards, step_ends = completion_steps(ids, text, steps, scores, floor, decode)
            rewards.append(step_rewards)
            ends.append(step_ends)
            lengths.append(len(ids))
            chain = floor if scores is None else chain_reward(scores, self.prm.aggregate, floor, self.prm.truncated)
            correct = pending["correct"][i] if pending["correct"] is not None else 0.0
            outcomes.append(chain + self.args.outcome_weight * correct if self.args.advantage_rule == "outcome"
                            else correct)
        return rewards, ends, lengths, outcomes, empty, cut, pending["correct"] or [None] * len(rewards)

    def _log_steps(self, mode: str, rows) -> None:
        """Beside TRL's metrics: the drift signs of a policy learning to game the PRM (step count, step reward,
        completions the PRM could not read whole or found no step in) and, with answers, accuracy."""
        metrics = self._metrics[mode]
        metrics["process/steps_per_completion"].append(sum(0 if r[4] else len(r[0]) for r in rows) / len(rows))
        steps = [s for r in rows if not r[4] for s in r[0]]
        metrics["process/step_reward_mean"].append(sum(steps) / len(steps) if steps else float("nan"))
        metrics["process/no_step_share"].append(sum(r[4] for r in rows) / len(rows))
        metrics["process/truncated_share"].append(sum(r[5] for r in rows) / len(rows))
        if rows[0][6] is not None:
            metrics["process/answer_accuracy"].append(sum(r[6] for r in rows) / len(rows))


    def _log_advantages(self, mode: str, advantages: list[list[float]], flat_share: float) -> None:
        """The advantages the loss receives, per token (TRL's own `frac_reward_zero_std` and advantage logs read
        its per-completion rewards, here the PRM's chain reward, which these replace): their root mean square,
        largest magnitude, and the share of groups whose every token got 0 (nothing learned from them)."""
        values = [v for completion in advantages for v in completion]
        metrics = self._metrics[mode]
        metrics["process/advantage_rms"].append(math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0)
        metrics["process/advantage_abs_max"].append(max((abs(v) for v in values), default=0.0))
        metrics["process/zero_advantage_group_share"].append(flat_share)


def _run_separator(prm):
    scorer = getattr(prm, "scorer", None)
    if scorer is None:
        raise PRMError(f"{prm!r} has no separator: the trainer must cut completions into the PRM's steps itself; "
                       "give the run's separator, e.g. RemotePRMReward(url, separator='\\n\\n')")
    return scorer.metadata.separator
