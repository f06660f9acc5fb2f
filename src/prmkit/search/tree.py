"""PRM-guided step search: beam search and diverse verifier tree search (DVTS), over a batch of problems at once.

A round extends beams by one step: the policy continues each beam's text until it writes the delimiter (a stop
string), and the PRM scores every extended prefix; all problems of a batch share one `generate` call and one
`score_many` call per round. The last round (`max_rounds`) has no stop string, so what is still open is written
to its end, and every result is a whole solution.

A beam ends when its step ended without the delimiter (the model's end of text, or max_new_tokens), when the
step commits to a final answer (a `\\boxed{}`, "The answer is"), or when the step is empty (the policy wrote the
delimiter at once). An empty step is never sent to the PRM: the beam keeps the steps and scores it had, and a
beam with no step at all has no score and ranks below every scored one.

- beam: n beams per problem. Each round the n children are scored, the ended ones are set aside, and the best
  n / beam_width open ones are kept; each is continued beam_width times (if fewer remain open, the n children
  are shared out among them, the better ones taking the extra). The answer is the best-scored ended beam (the
  best n are kept as candidates).
- dvts: n / beam_width independent subtrees. Each round every open subtree gets beam_width children and keeps
  the best one; a subtree ends when that child ended. The answer is the best-scored subtree.

Ties go to the earlier beam (the children of better-ranked parents come first), so a search is deterministic for
a given generator output.

A PRMScorer keeps the keys and values of every chain it scored during a search (`kept_caches`), so a round's
`score_many` call runs only the new step of each child on top of its parent, scored the round before.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Sequence

from prmkit.data.problems import derive_seed
from prmkit.generation.base import Generator
from prmkit.scoring.inputs import split_steps
from prmkit.search.options import SearchOptions
from prmkit.search.select import Solution, commits_to_answer, ranking


@dataclass
class Beam:
    problem: int  # index in the batch
    solution: Solution = field(default_factory=lambda: Solution(text="", steps=[], finish_reason="stop", logprob=0.0))
    ended: bool = False


@dataclass
class TreeResult:
    chosen: Solution
    candidates: list[Solution]  # best first
    tokens: int  # every token generated for this problem, pruned beams included
    rounds: int  # rounds in which this problem had an open beam
    generated: list[int] = field(default_factory=list)  # beams continued in each of those rounds


def _extend(generator: Generator, scorer, problems: Sequence[str], parents: list[tuple[Beam, int]],
            options: SearchOptions, final: bool, seed: int, tokens: list[int]) -> list[Beam]:
    """Each parent continued `count` times by one step (to the end in the final round), the new prefixes scored
    in one `score_many` call; children come back in parent order."""
    flat = [parent for parent, count in parents for _ in range(count)]
    prompts = [generator.prompt(problems[b.problem], b.solution.text) for b in flat]
    stop = () if final else (options.delimiter,)
    samples = generator.generate(prompts, 1, stop=stop, max_new_tokens=options.max_new_tokens,
                                 temperature=options.temperature, seed=seed)
    children = []
    for parent, (sample,) in zip(flat, samples):
        tokens[parent.problem] += sample.tokens
        new_steps = split_steps(sample.text, options.delimiter)
        old = parent.solution
        solution = Solution(text=old.text + sample.text + (sample.stop or ""), steps=old.steps + new_steps,
                            step_scores=list(old.step_scores), score=old.score, finish_reason=sample.finish_reason,
                            tokens=old.tokens + sample.tokens, logprob=_path_logprob(old.logprob, sample.logprob))
        ended = (final or sample.finish_reason != "stop" or not new_steps
                 or any(commits_to_answer(step) for step in new_steps))
        children.append((Beam(parent.problem, solution, ended), bool(new_steps)))
    grown = [beam for beam, has_new_step in children if has_new_step]
    scores = scorer.score_many([(problems[b.problem], b.solution.steps) for b in grown]) if grown else []
    for beam, step_scores in zip(grown, scores):
        beam.solution.scored(step_scores, options.aggregate)
    return [beam for beam, _ in children]


def _path_logprob(before: float | None, step: float | None) -> float | None:
    """A path's log-prob: the sum of its steps' log-probs, each under the prompt and the prefix it continued;
    unknown once one step's is."""
    return None if before is None or step is None else before + step


def kept_caches(scorer):
    """The scorer's keys and values kept from one round to the next (PRMScorer.kept_caches), so that a round reads
    only each child's new step and not its parent's whole chain again; freed when the search ends. A scorer without
    them (a served PRM, a test's fake) scores as it does."""
    keep = getattr(scorer, "kept_caches", None)
    return keep() if keep is not None else nullcontext()


def shares(total: int, parts: int) -> list[int]:
    """`total` children over `parts` parents, as evenly as possible, the first parents taking the extra."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _best(beams: list[Beam], k: int) -> list[Beam]:
    return [beams[i] for i in ranking([b.solution for b in beams])[:k]]


def beam_search(generator: Generator, scorer, problems: Sequence[str], options: SearchOptions,
                seed: int) -> list[TreeResult]:
    n, keep = options.n, max(1, options.n // options.beam_width)
    tokens = [0] * len(problems)
    open_beams: list[list[Beam]] = [[Beam(p)] for p in range(len(problems))]
    ended: list[list[Beam]] = [[] for _ in problems]
    generated: list[list[int]] = [[] for _ in problems]
    with kept_caches(scorer):
        for round_index in range(options.max_rounds):
            parents = [(beam, count) for beams in open_beams for beam, count in zip(beams, shares(n, len(beams)))]
            if not parents:
                break
            for p, beams in enumerate(open_beams):
                if beams:
                    generated[p].append(n)
            children = _extend(generator, scorer, problems, parents, options,
                               final=round_index == options.max_rounds - 1,
                               seed=derive_seed(seed, "beam", round_index), tokens=tokens)
            for p in range(len(problems)):
                mine = [c for c in children if c.problem == p]
                ended[p] += [c for c in mine if c.ended]
                open_beams[p] = _best([c for c in mine if not c.ended], keep)
    results = []
    for p in range(len(problems)):
        candidates = [b.solution for b in _best(ended[p] + open_beams[p], n)]
        results.append(TreeResult(candidates[0], candidates, tokens[p], len(generated[p]), generated[p]))
    return results


def dvts(generator: Generator, scorer, problems: Sequence[str], options: SearchOptions,
         seed: int) -> list[TreeResult]:
    width, subtrees = options.beam_width, max(1, options.n // options.beam_width)
    tokens = [0] * len(problems)
    open_beams: list[list[Beam]] = [[Beam(p) for _ in range(subtrees)] for p in range(len(problems))]
    ended: list[list[Beam]] = [[] for _ in problems]
    generated: list[list[int]] = [[] for _ in problems]
    with kept_caches(scorer):
        for round_index in range(options.max_rounds):
            parents = [(beam, width) for beams in open_beams for beam in beams]
            if not parents:
                break
            for p, beams in enumerate(open_beams):
                if beams:
                    generated[p].append(len(beams) * width)
            children = _extend(generator, scorer, problems, parents, options,
                               final=round_index == options.max_rounds - 1,
                               seed=derive_seed(seed, "dvts", round_index), tokens=tokens)
            open_beams = [[] for _ in problems]
            for start in range(0, len(children), width):
                best = _best(children[start:start + width], 1)[0]
                (ended[best.problem] if best.ended else open_beams[best.problem]).append(best)
    results = []
    for p in range(len(problems)):
        candidates = [b.solution for b in _best(ended[p] + open_beams[p], subtrees)]
        results.append(TreeResult(candidates[0], candidates, tokens[p], len(generated[p]), generated[p]))
    return results
