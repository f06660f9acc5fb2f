"""`prmkit search` rows read by `prmkit eval` as they are: a sampling method's `candidates` and a budgets row's
`samples` become one group per problem, each sample with its own correct, answer and mean_logprob; repeated pools
are read once; greedy, beam and dvts rows, mixed candidate styles, dicts without steps and bad fields are errors
naming the file, row and field. The rows are built with `Solution.row()`, as `prmkit search` writes them; the
whole flow on a real search is tests/e2e/test_search_eval_e2e.py."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from prmkit.errors import PRMError
from prmkit.evaluation.evaluate import best_of_n_groups
from prmkit.evaluation.splits import load_split
from prmkit.files import write_jsonl
from prmkit.search.select import Solution

SCORER = SimpleNamespace(metadata=SimpleNamespace(separator="\n\n", neutral_label="positive", label_scheme=None))
IDENTITY = {"options": {"n": 3, "seed": 0}, "policy": "transformers:tiny", "prm": "runs/prm"}


def solution(steps: list[str], correct: bool | None, logprob: float | None = -2.0, tokens: int = 4) -> dict:
    row = Solution(text="\n\n".join(steps), steps=steps, step_scores=[0.5] * len(steps), score=0.5,
                   tokens=tokens, logprob=logprob).row()
    return {**row, "correct": correct}


POOL = [solution(["2 + 2 = 4.", "The answer is 4."], True, -1.0),
        solution(["2 + 2 = 5.", "The answer is 5."], False, -3.0),
        solution(["It is 4."], True, -2.0)]


def method_row(row: int, prompt: str, candidates: list[dict], method: str = "best-of-n", chosen: int = 0) -> dict:
    """A method run's row as prmkit.search.run writes it: the chosen solution's fields at the top level."""
    top = dict(candidates[chosen])
    answer = {"answer": top.pop("answer"), "correct": top.pop("correct")}
    return {"row": row, "prompt": prompt, "gold_answer": "4", **answer, **top, "tokens": 12,
            "candidates": candidates, "method": method, **IDENTITY}


def budgets_row(row: int, prompt: str, samples: list[dict]) -> dict:
    greedy = solution(["Greedy: 4."], True, -0.5)
    beam = {"4": {**solution(["Beam: 4."], True, -0.7), "rounds": 2}}
    return {"row": row, "prompt": prompt, "gold_answer": "4", "greedy": greedy, "samples": samples, "beam": beam,
            "method": "budgets", **IDENTITY}


def load(tmp_path, rows: list[dict], name: str = "search.jsonl"):
    path = tmp_path / name
    write_jsonl(rows, path)
    return load_split(path, SCORER)


def refused(tmp_path, rows: list[dict], message: str) -> None:
    with pytest.raises(PRMError, match=re.escape(message)):
        load(tmp_path, rows)


def test_a_method_row_gives_its_candidates_each_with_its_own_fields(tmp_path):
    split = load(tmp_path, [method_row(1, "What is 2 + 2?", POOL, chosen=2)])
    assert [c.steps for c in split.chains] == [p["steps"] for p in POOL]
    assert [c.correct for c in split.chains] == [True, False, True]
    assert [c.answer for c in split.chains] == [p["answer"] for p in POOL]
    assert [c.mean_logprob for c in split.chains] == pytest.approx([-0.25, -0.75, -0.5])
    assert len({c.group for c in split.chains}) == 1 and split.chains[0].title == "row 1 candidate 0"
    assert split.notes == []


def test_a_budgets_row_gives_its_samples_and_not_greedy_or_beam(tmp_path):
    split = load(tmp_path, [budgets_row(1, "What is 2 + 2?", POOL), budgets_row(2, "What is 3 + 3?", POOL[:2])])
    assert [c.steps for c in split.chains] == [p["steps"] for p in POOL + POOL[:2]]
    assert split.chains[3].title == "row 2 sample 0"
    for chain in split.chains:
        chain.scores = [0.5] * len(chain.steps)
    groups = best_of_n_groups(split)
    assert [g["correct"] for g in groups] == [[True, False, True], [True, False]]
    assert [g["confidence"] for g in groups] == [pytest.approx([-0.25, -0.75, -0.5]), pytest.approx([-0.25, -0.75])]


def test_one_group_per_problem_and_a_repeated_pool_is_read_once(tmp_path):
    """Two sampling methods of one search share their samples: joined in one file, each sample is read once. The
    same prompt at another data row is another problem."""
    rows = [method_row(1, "P", POOL), method_row(2, "P", POOL[:2]),
            method_row(1, "P", POOL, method="majority", chosen=1)]
    split = load(tmp_path, rows)
    assert len(split.chains) == 5
    for chain in split.chains:
        chain.scores = [0.5]
    assert [len(g["correct"]) for g in best_of_n_groups(split)] == [3, 2]
    assert len(split.notes) == 1 and "1 `prmkit search` row(s) (3) hold the same samples" in split.notes[0]


def test_a_problem_with_other_samples_in_the_same_file_is_an_error(tmp_path):
    other = [POOL[1], POOL[0], POOL[2]]
    refused(tmp_path, [method_row(1, "P", POOL), method_row(1, "P", other)],
            "search.jsonl: row 2: the problem of row 1 (data row 1 'P') again, with other samples")
    refused(tmp_path, [method_row(1, "P", POOL), budgets_row(1, "P", POOL + POOL[:1])],
            "evaluate each as a file of its own, e.g. `prmkit eval RUN a.jsonl b.jsonl`")


@pytest.mark.parametrize("method, why", [("greedy", "one solution per problem"),
                                         ("beam", "beams a PRM kept"), ("dvts", "subtrees a PRM grew")])
def test_greedy_beam_and_dvts_rows_are_refused(tmp_path, method, why):
    with pytest.raises(PRMError, match=f"row 1: a `prmkit search --method {method}` row; .*{why}.*--budgets run"):
        load(tmp_path, [method_row(1, "P", POOL[:1] if method == "greedy" else POOL, method=method)])


def test_budgets_without_samples_is_refused(tmp_path):
    row = budgets_row(1, "P", POOL)
    del row["samples"]
    refused(tmp_path, [row], "row 1: a `prmkit search --budgets` row without 'samples'")


def test_mixed_styles_and_dicts_without_steps_are_errors_naming_row_and_field(tmp_path):
    mixed = {"prompt": "P", "candidates": [POOL[0], "2 + 2 = 4."]}
    refused(tmp_path, [mixed], "search.jsonl: row 1, field 'candidates[1]': candidates[0] is a dict")
    refused(tmp_path, [{"prompt": "P", "candidates": ["2 + 2 = 4.", POOL[0]]}],
            "field 'candidates[1]': candidates[0] is a string or step list and candidates[1] a dict")
    no_steps = {k: v for k, v in POOL[1].items() if k != "steps"}
    refused(tmp_path, [method_row(1, "P", [POOL[0], no_steps])],
            "row 1, field 'candidates[1].steps': a candidate written as a dict needs its steps as 'steps'")
    refused(tmp_path, [method_row(1, "P", [{**POOL[0], "steps": "2 + 2 = 4."}])], "'steps' is str")
    refused(tmp_path, [budgets_row(1, "P", [POOL[0], no_steps])], "field 'samples[1].steps'")
    refused(tmp_path, [budgets_row(1, "P", ["a", "b"])],
            "field 'samples': expected the samples as `prmkit search` writes them")
    refused(tmp_path, [{"prompt": "P", "candidates": POOL, "correct": [True, False, True]}],
            "row 1, field 'correct': a list beside candidates written as dicts")


def test_bad_candidate_fields_name_the_candidate(tmp_path):
    refused(tmp_path, [method_row(1, "P", [POOL[0], {**POOL[1], "correct": "yes"}])],
            "row 1, field 'candidates[1].correct': expected true, false or null")
    refused(tmp_path, [method_row(1, "P", [POOL[0], {**POOL[1], "mean_logprob": 0.3}])],
            "row 1, field 'candidates[1].mean_logprob': expected the policy's mean log-prob")


def test_a_search_without_gold_answers_says_why_there_is_no_best_of_n(tmp_path):
    split = load(tmp_path, [method_row(1, "P", [{**p, "correct": None} for p in POOL])])
    assert [c.correct for c in split.chains] == [None] * 3
    assert any("no sample of these `prmkit search` rows is graded" in note for note in split.notes)


def test_plain_rows_read_as_before(tmp_path):
    split = load(tmp_path, [{"prompt": "P", "candidates": ["a", ["b", "c"]], "correct": [True, False],
                             "answers": ["1", "2"], "mean_logprob": [-0.1, -0.2]},
                            {"prompt": "Q", "completions": ["x"], "correct": True, "mean_logprob": -0.3}])
    assert [c.steps for c in split.chains] == [["a"], ["b", "c"], ["x"]]
    assert [c.group for c in split.chains] == ["row 1", "row 1", "Q"]
    assert [c.mean_logprob for c in split.chains] == [-0.1, -0.2, -0.3]
