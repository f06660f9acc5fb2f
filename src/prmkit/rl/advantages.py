"""Per-token advantages from per-step PRM rewards: the pure math of process-supervised GRPO, free of TRL and torch.

A completion of T tokens is cut into steps; step j ends at token `ends[j]` (the token that holds the step's last
character) and has a reward r_j. Within a group (the G completions of one prompt):

- `normalize_steps`: every step reward of the group, all completions together, becomes
  (r - mean) / (std + EPS), mean and std (Bessel-corrected, as TRL's) over all the group's steps. One step in the
  whole group, or identical rewards (std below 1e-8), gives 0 to every step: there is nothing to prefer.
- rule `sum` (DeepSeekMath's process supervision): token t gets the sum of the normalised rewards of the steps
  that end at or after t.
- rule `min` (PURE's min-form credit assignment): token t gets the minimum of those normalised rewards, so one
  bad future step sets the value, and a long chain of fair steps cannot add up to outweigh it.
- rule `outcome` (plain GRPO): every token gets its completion's (r - mean) / (std + EPS) over the group's
  completion rewards; a group of one completion gets 0.

Scale (`scale="rms"`, the default): the rules must move the policy by comparable amounts, or a comparison between
them measures step size, not credit assignment. `outcome`'s advantages have unit scale (std 1 over the group), but
`sum` adds up every later step's normalised reward, so a token early in a chain of four steps carries about four
units, and `min` carries about one. So a group's `sum`/`min` token values are divided by their root mean square
over all the group's tokens, sqrt(mean over tokens of v^2): afterwards their mean square is 1, the scale of
`outcome`'s (r - mean) / std (to be exact, those have Bessel std 1, so mean square (G - 1) / G over the G
completions, 0.875 at G = 8: a small factor beside sum's four). Tokens are what the policy-gradient loss sums over,
so the per-token RMS is what sets the size of the update. One positive number per group changes no token's sign and
no order within the group: what each rule prefers stays the rule's, only its step size is shared. A group whose
values are all 0 (RMS below STD_ZERO: identical rewards) keeps them. The outcome term added under `outcome_weight`
is not rescaled: it keeps its unit scale, so `outcome_weight=0.1` means a tenth of the process term's scale.
`scale="none"` gives the unscaled values.

The rules that make every token well defined (the trainer applies them before calling these functions):
a completion with no step counts as one step with the floor reward that ends at its last token, so saying nothing
never escapes the PRM; a step the PRM did not read (cut by its max_length, or past the size limits) gets the floor;
the last step ends at the completion's last token, so tokens after its text (a trailing separator, the EOS token)
share its credit instead of getting none.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

from prmkit.errors import PRMError
from prmkit.scoring.aggregate import floor_steps

RULES = ("sum", "min", "outcome")
SCALES = ("rms", "none")  # how a group's process values are scaled (module docstring)
STD_ZERO = 1e-8  # a spread below this is rounding: the rewards count as identical
EPS = 1e-4  # TRL's epsilon in (r - mean) / (std + eps), so `outcome` equals TRL's own advantages


def group_stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and Bessel-corrected std (0 for fewer than two values, where a spread is not defined)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def normalize(values: Sequence[float]) -> list[float]:
    """(v - mean) / (std + EPS); all zeros when the values are identical or there is only one."""
    if not values:
        return []
    mean, std = group_stats(values)
    if std < STD_ZERO:
        # identical rewards: nothing to prefer. The mean of equal floats can differ from them in the last bit, and
        # (v - mean) / EPS would turn that rounding into a signal
        return [0.0] * len(values)
    return [(v - mean) / (std + EPS) for v in values]


def normalize_steps(group: Sequence[Sequence[float]]) -> list[list[float]]:
    """The step rewards of a group's completions, normalised over all the group's steps together."""
    flat = normalize([r for rewards in group for r in rewards])
    out, at = [], 0
    for rewards in group:
        out.append(flat[at:at + len(rewards)])
        at += len(rewards)
    return out


def token_values(rewards: Sequence[float], ends: Sequence[int], length: int, rule: str) -> list[float]:
    """One value per token of a completion of `length` tokens from its (normalised) step rewards, under `sum` or
    `min`. `ends` are the steps' end tokens, non-decreasing, the last one `length - 1`."""
    assert len(rewards) == len(ends) and rewards, "every completion has at least one step (the floor rule)"
    assert ends[-1] == length - 1 and all(a <= b for a, b in itertools.pairwise(ends)), ends
    values = [0.0] * length
    future = 0.0 if rule == "sum" else math.inf
    j = len(rewards) - 1
    for t in range(length - 1, -1, -1):  # walk backwards, adding each step once its end is reached
        while j >= 0 and ends[j] >= t:
            future = future + rewards[j] if rule == "sum" else min(future, rewards[j])
            j -= 1
        values[t] = future
    return values


def token_rewards(rewards: Sequence[float], ends: Sequence[int], length: int) -> list[float]:
    """A completion's step rewards as token-level rewards, the shape PPO's reward-to-go and GAE read (verl's
    `token_level_scores`): step j's reward at its end token `ends[j]`, 0 on every other token. Steps that end at one
    token (a step that ends inside the token that ends the next) add up there, so the sum over tokens is always
    the sum of the step rewards."""
    assert len(rewards) == len(ends), (rewards, ends)
    values = [0.0] * length
    for reward, end in zip(rewards, ends):
        assert 0 <= end < length, f"step end {end} outside a completion of {length} tokens"
        values[end] += reward
    return values


def char_ends(text: str, steps: Sequence[str]) -> list[int]:
    """The character just past each step in `text`, found in order (steps are stripped pieces of the text). A step
    not found (a text that decodes differently) ends where the previous one did, sharing its end token."""
    ends, cursor = [], 0
    for step in steps:
        at = text.find(step, cursor)
        if at >= 0:
            cursor = at + len(step)
        ends.append(cursor)
    return ends


def token_ends(ids: Sequence[int], ends: Sequence[int], decode: Callable[[Sequence[int]], str]) -> list[int]:
    """The token that holds each character end of `decode(ids)`: the first k whose decoded prefix ids[:k+1] begins
    with the text up to that end, found by bisection on the decoded prefixes. A step that ends inside a token ends
    at that token; decoding the policy's own ids keeps the policy's tokenization (re-encoding the text could cut it
    differently). The last step is moved to the last token (the trailing-token rule).

    Not the prefix's length: a byte-level tokenizer splits a character of several bytes (an emoji, CJK, "é")
    across tokens, and a prefix cut inside it decodes to replacement characters (U+FFFD), as long as the text or
    longer, before the character is written; the step would end a token or more early."""
    if not ids:
        return []
    text = decode(ids)
    prefixes: dict[int, str] = {}

    def written(k: int, end: int) -> bool:
        if k not in prefixes:
            prefixes[k] = decode(ids[:k])
        return prefixes[k].startswith(text[:end])

    out = []
    for end in ends:
        lo, hi = 1, len(ids)
        while lo < hi:  # smallest prefix length k whose text holds the text up to `end`
            mid = (lo + hi) // 2
            if written(mid, end):
                hi = mid
            else:
                lo = mid + 1
        out.append(max(lo - 1, out[-1] if out else 0))
    if out:
        out[-1] = len(ids) - 1
    return out


def completion_steps(ids: Sequence[int], text: str, steps: Sequence[str], scores: Sequence[float | None] | None,
                     floor: float, decode: Callable[[Sequence[int]], str]) -> tuple[list[float], list[int]]:
    """A completion's step rewards and their end tokens, by the defined cases: a step the PRM did not read (None
    or NaN, or a step past the scores it returned) gets `floor`, and a completion with no step is one floor step
    that ends at its last token. `steps` are the completion's pieces of `text` (the policy's decoded `ids`).

    More scores than steps means the PRM read another text, or cut it at another separator, than the one whose
    steps receive the rewards: no step could be matched to its score, so that is an error, never a guess."""
    if scores is not None and len(scores) > len(steps):
        raise PRMError(f"the PRM returned {len(scores)} step scores for a completion of {len(steps)} steps "
                       f"({text[:80]!r}): it scored another text, or cut it at another separator, than the one the "
                       "rewards are placed on; score the decoded completion, cut at the trainer's separator")
    rewards = floor_steps(scores or [], floor)
    rewards += [floor] * (len(steps) - len(rewards))
    if not rewards:
        rewards, steps = [floor], [text]
    return rewards, token_ends(ids, char_ends(text, steps), decode) or [0]


def unit_rms(group: Sequence[Sequence[float]]) -> list[list[float]]:
    """A group's token values divided by their root mean square over all its tokens, so their mean square is 1;
    unchanged when every value is 0 (RMS below STD_ZERO), where there is nothing to scale."""
    squares = [v * v for values in group for v in values]
    rms = math.sqrt(sum(squares) / len(squares)) if squares else 0.0
    if rms < STD_ZERO:
        return [list(values) for values in group]
    return [[v / rms for v in values] for values in group]


def group_advantages(step_rewards: Sequence[Sequence[float]], ends: Sequence[Sequence[int]],
                     lengths: Sequence[int], outcomes: Sequence[float], rule: str,
                     outcome_weight: float = 0.0, scale: str = "rms") -> list[list[float]]:
    """Per-token advantages of one group. `step_rewards[i]`/`ends[i]` are completion i's steps (at least one each),
    `outcomes[i]` its outcome reward. `sum`/`min` add `outcome_weight` x the normalised outcome to every token;
    `outcome` uses the normalised outcome alone (the caller folds the PRM's chain reward into `outcomes`).
    `scale="rms"` brings the `sum`/`min` values of the group to unit root mean square before the outcome term is
    added (module docstring); `scale="none"` leaves them as the rule makes them."""
    if rule not in RULES:
        raise ValueError(f"advantage rule {rule!r} is not known; use one of {', '.join(RULES)}")
    if scale not in SCALES:
        raise ValueError(f"advantage scale {scale!r} is not known; use one of {', '.join(SCALES)}")
    outcome = normalize(outcomes)
    if rule == "outcome":
        return [[outcome[i]] * lengths[i] for i in range(len(lengths))]
    normed = normalize_steps(step_rewards)
    process = [token_values(normed[i], ends[i], lengths[i], rule) if lengths[i] else []
               for i in range(len(lengths))]
    if scale == "rms":
        process = unit_rms(process)
    return [[v + outcome_weight * outcome[i] for v in values] for i, values in enumerate(process)]
