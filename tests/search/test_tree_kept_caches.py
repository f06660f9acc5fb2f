"""Beam search and DVTS with a real (tiny) PRM keep its keys and values from one round to the next: they choose the
same solutions, with the same scores to 1e-5, as the same search without kept caches, and the PRM reads fewer
tokens; the caches are freed when the search ends."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from search_fakes import ScriptedPolicy  # noqa: E402

from prmkit.scoring.scorer import PRMScorer  # noqa: E402
from prmkit.search.options import SearchOptions  # noqa: E402
from prmkit.search.tree import beam_search, dvts  # noqa: E402

TOL = 1e-5
PROBLEMS = ["Compute 3 + 4 * 2 - 5, step by step.", "Tom has 3 apples and buys 12 more. How many?"]


def arithmetic(problem: str, prefix: str, k: int) -> str:
    """A step of sums that depends on the problem, the beam and the sample; an answer from the third step on, and
    sometimes already in the second (so some beams end early and are not extended)."""
    depth = prefix.count("\n\n")
    a, b = (zlib.crc32(f"{problem}|{prefix}|{k}|{i}".encode()) % 20 for i in range(2))
    if depth >= 2 or (depth == 1 and (a + k) % 5 == 0):
        return f"So {a} + {b} = {a + b}. The answer is {a + b}."
    return f"{a} + {b} = {a + b}.\n\nnot reached"


@pytest.fixture(scope="module")
def scorer(tiny_run):
    return PRMScorer.from_pretrained(tiny_run, device="cpu", batch_size=4)


def search(method: str, scorer, model) -> tuple[list, int]:
    """The search's results and the tokens `model` (the PRM's) read."""
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["input_ids"].numel()),
                                           with_kwargs=True)
    try:
        run = beam_search if method == "beam" else dvts
        options = SearchOptions(method=method, n=8, beam_width=2, max_rounds=4, problems_per_batch=2)
        return run(ScriptedPolicy(arithmetic), scorer, PROBLEMS, options, seed=0), sum(seen)
    finally:
        hook.remove()


@pytest.mark.parametrize("method", ["beam", "dvts"])
def test_kept_caches_choose_the_same_solutions_and_read_fewer_tokens(scorer, method):
    # The same scorer seen only through score_many, as tree.py sees a scorer without kept caches.
    plain = SimpleNamespace(score_many=scorer.score_many)
    without, tokens_without = search(method, plain, scorer.model)
    kept, tokens_kept = search(method, scorer, scorer.model)
    assert scorer._kept is None  # freed when the search ended
    for a, b in zip(without, kept):
        assert a.chosen.text == b.chosen.text
        assert [c.text for c in a.candidates] == [c.text for c in b.candidates]
        for x, y in zip(a.candidates, b.candidates):
            assert y.step_scores == pytest.approx(x.step_scores, abs=TOL)
        assert a.rounds == b.rounds and a.generated == b.generated
    assert any(len(r.chosen.steps) >= 3 for r in kept)  # the search went on for rounds, on kept caches
    assert tokens_kept < 0.8 * tokens_without
