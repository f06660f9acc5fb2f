"""A trained PRM guiding a policy at test time: `options` (every default), `select` (solutions and how one is
chosen, by the rules of prmkit.evaluation.selection), `tune` (the rules' settings chosen on a validation
search's output: `prmkit search-tune`), `tree` (beam search and DVTS, step by step), `methods` (each method
on a batch of problems, and every method at N = 1, 2, 4, ... for a budgets run), `report` (the budget numbers,
table and plot), `problems` (reading problems, the resumable output) and `run` (`prmkit search`)."""

from prmkit.search.options import METHODS, SearchOptions
from prmkit.search.run import SearchSummary, run_search

__all__ = ["METHODS", "SearchOptions", "SearchSummary", "run_search"]
