"""The search methods on a batch of problems, each returning the chosen solution, the candidates it was chosen
from and the tokens it cost.

greedy and the selection rules (majority, best-of-n, weighted-best-of-n, softmax-weighted, filtered-majority,
majority-of-bests) sample whole solutions (no stop string), cut each into steps at the delimiter and score every
sample's steps with the PRM in one `score_many` call; they differ only in how one sample is chosen
(prmkit.search.select, with the rules of prmkit.evaluation.selection). beam and dvts search step by step
(prmkit.search.tree).

`budget_results` runs every method at every budget of a `--budgets` run. The sampling methods at N read the
first N of max(N) samples drawn once per problem at the search temperature: the samples of a problem are drawn
independently, so the first N of them are a sample of N. The columns are then nested (N=2 sees the samples N=1
saw), which is less noise between columns than independent draws, not a bias. Greedy is one sample at
temperature 0 (N=1). Beam and dvts cannot be cut down from a larger search, so they run once per N, at the N that
are multiples of beam_width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prmkit.data.problems import derive_seed
from prmkit.generation.base import Generator
from prmkit.search.options import SAMPLING, TREE_METHODS, SearchOptions
from prmkit.search.select import Solution, choose_index, from_text
from prmkit.search.tree import beam_search, dvts


@dataclass
class MethodResult:
    chosen: Solution
    candidates: list[Solution]  # for the sampling methods: every sample, in sampling order
    tokens: int  # every token generated for the problem
    rounds: int | None = None  # beam and dvts: rounds the search ran


def sample_solutions(generator: Generator, scorer, problems: Sequence[str], n: int, options: SearchOptions, *,
                     temperature: float, seed: int) -> list[list[Solution]]:
    """`n` whole solutions per problem, each cut into steps and scored; steps of all samples of all problems go
    to the PRM in one `score_many` call (a sample with no step is not sent and stays unscored)."""
    prompts = [generator.prompt(problem) for problem in problems]
    samples = generator.generate(prompts, n, stop=(), max_new_tokens=options.max_new_tokens,
                                 temperature=temperature, seed=seed)
    solutions = [[from_text(s.text, options.delimiter, finish_reason=s.finish_reason, tokens=s.tokens,
                            logprob=s.logprob) for s in row] for row in samples]
    score_solutions(scorer, problems, solutions, options.aggregate)
    return solutions


def score_solutions(scorer, problems: Sequence[str], solutions: list[list[Solution]], how: str) -> None:
    todo = [(problems[p], solution) for p, row in enumerate(solutions) for solution in row if solution.steps]
    if not todo:
        return
    scores = scorer.score_many([(problem, solution.steps) for problem, solution in todo])
    for (_, solution), step_scores in zip(todo, scores):
        solution.scored(step_scores, how)


def choose(method: str, solutions: list[Solution], options: SearchOptions, problem: str) -> Solution:
    return solutions[choose_index(method, solutions, seed=options.seed, problem=problem,
                                  **options.selection(method))]


def run_method(method: str, generator: Generator, scorer, problems: Sequence[str], options: SearchOptions,
               seed: int) -> list[MethodResult]:
    """One method (with options.n, or for greedy one sample at temperature 0) on every problem of a batch."""
    if method in ("beam", "dvts"):
        search = beam_search if method == "beam" else dvts
        return [MethodResult(r.chosen, r.candidates, r.tokens, r.rounds)
                for r in search(generator, scorer, problems, options, derive_seed(seed, method, options.n))]
    greedy = method == "greedy"
    n = 1 if greedy else options.n
    temperature = 0.0 if greedy else options.temperature
    batches = sample_solutions(generator, scorer, problems, n, options, temperature=temperature,
                               seed=derive_seed(seed, "greedy" if greedy else "samples", n))
    return [MethodResult(choose(method, row, options, problem), row, sum(s.tokens for s in row))
            for problem, row in zip(problems, batches)]


def budget_results(generator: Generator, scorer, problems: Sequence[str], options: SearchOptions,
                   seed: int) -> list[dict]:
    """For each problem: the greedy solution, the max(N) samples, and one beam / dvts result per N, as row
    fields (the caller adds the problem and marks answers right or wrong)."""
    methods, budgets = options.budget_methods, options.budgets
    out: list[dict] = [{} for _ in problems]
    if "greedy" in methods:
        for row, result in zip(out, run_method("greedy", generator, scorer, problems, options, seed)):
            row["greedy"] = result.chosen.row()
    if any(m in SAMPLING for m in methods):
        samples = sample_solutions(generator, scorer, problems, max(budgets), options,
                                   temperature=options.temperature, seed=derive_seed(seed, "budget-samples"))
        for row, solutions in zip(out, samples):
            row["samples"] = [s.row() for s in solutions]
    for method in (m for m in TREE_METHODS if m in methods):
        for n in options.tree_budgets():
            results = run_method(method, generator, scorer, problems, options.replace(n=n), seed)
            for row, result in zip(out, results):
                row.setdefault(method, {})[str(n)] = {**result.chosen.row(), "tokens": result.tokens,
                                                      "rounds": result.rounds}
    return out
