"""`run_search` end to end with a scripted policy and a score-reading PRM: the output rows, grading against gold
answers, continuing a killed run, refusing to mix settings in one output, bad input, and the budget report."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from search_fakes import ScriptedPolicy, StepScorer  # noqa: E402

from prmkit.errors import PRMError  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.search.options import SearchOptions  # noqa: E402
from prmkit.search.run import run_search  # noqa: E402

# Every problem gets the same four samples: a confident wrong 5, two lukewarm 4s and an unlikely 6.
SAMPLES = ["I think \\boxed{5} [0.9]", "It is \\boxed{4} [0.5]", "So \\boxed{4} [0.5]", "Maybe \\boxed{6} [0.1]"]


def four_answers(problem: str, prefix: str, k: int) -> str:
    return SAMPLES[k % 4]


class Killed(Exception):
    pass


class DiesAfter(ScriptedPolicy):
    """A policy whose process is 'killed' at its `calls`-th generate call."""

    def __init__(self, script, calls: int):
        super().__init__(script)
        self.left = calls

    def generate(self, *args, **kwargs):
        if self.left == 0:
            raise Killed()
        self.left -= 1
        return super().generate(*args, **kwargs)


class OneStreamPerCall(ScriptedPolicy):
    """A policy that draws a whole generate call from the call's seed, as the transformers backend samples a padded
    batch from one seed: a problem's samples depend on the other prompts of the call and their places."""

    def __init__(self):
        super().__init__(self.draw)
        self.stream = random.Random()

    def generate(self, prompts, n=1, *, seed=None, **kwargs):
        self.stream = random.Random(seed)
        return super().generate(prompts, n, seed=seed, **kwargs)

    def draw(self, problem: str, prefix: str, k: int) -> str:
        return f"So \\boxed{{{self.stream.randint(1, 9)}}} [{self.stream.random():.3f}]"


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "problems.jsonl"
    write_jsonl([{"prompt": "How many apples?", "gold_answer": "4", "id": "a"},
                 {"question": "How many pears?", "answer": "Two and two.\n#### 4"},
                 {"problem": "How many plums?"}], path)
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rows_hold_the_choice_its_steps_scores_answer_tokens_and_grade(data, tmp_path):
    policy, scorer = ScriptedPolicy(four_answers), StepScorer()
    out = tmp_path / "out.jsonl"
    summary = run_search(scorer, policy, data, out, SearchOptions(method="weighted-best-of-n"), prm="runs/prm")
    rows = lines(out)
    assert [r["row"] for r in rows] == [1, 2, 3] and rows[0]["id"] == "a"
    first = rows[0]
    assert first["solution"] == SAMPLES[1] and first["answer"] == "4" and first["correct"] is True
    assert first["steps"] == [SAMPLES[1]] and first["step_scores"] == [0.5] and first["score"] == 0.5
    assert first["tokens"] == sum(c["tokens"] for c in first["candidates"]) > 0
    assert [c["correct"] for c in first["candidates"]] == [False, True, True, False]
    assert first["method"] == "weighted-best-of-n" and first["options"]["n"] == 4
    assert first["policy"] == "fake:policy" and first["prm"] == "runs/prm"
    assert rows[1]["gold_answer"] == "4" and rows[1]["correct"] is True  # GSM8K's "#### 4" read as 4
    assert rows[2]["gold_answer"] is None and rows[2]["correct"] is None  # searched, not graded
    assert (summary.graded, summary.correct, summary.searched, summary.resumed) == (2, 2, 3, 0)
    assert len(scorer.calls) == 1 and len(scorer.calls[0]) == 12  # one batch: one score_many for all samples


def test_best_of_n_and_greedy_choose_differently(data, tmp_path):
    best = run_search(StepScorer(), ScriptedPolicy(four_answers), data, tmp_path / "best.jsonl",
                      SearchOptions(method="best-of-n"))
    policy = ScriptedPolicy(four_answers)
    greedy = run_search(StepScorer(), policy, data, tmp_path / "greedy.jsonl", SearchOptions(method="greedy"))
    assert best.correct == 0 and lines(tmp_path / "best.jsonl")[0]["answer"] == "5"
    assert greedy.correct == 0 and [c["temperature"] for c in policy.calls] == [0.0]
    assert all(len(r["candidates"]) == 1 for r in lines(tmp_path / "greedy.jsonl"))


def test_a_killed_run_continues_where_it_stopped_and_ends_as_an_uninterrupted_one(data, tmp_path):
    options = SearchOptions(method="beam", n=4, beam_width=2, problems_per_batch=1)
    whole = tmp_path / "whole.jsonl"
    run_search(StepScorer(), ScriptedPolicy(four_answers), data, whole, options)

    out = tmp_path / "out.jsonl"
    with pytest.raises(Killed):
        run_search(StepScorer(), DiesAfter(four_answers, calls=2), data, out, options)
    assert [r["row"] for r in lines(out)] == [1, 2]
    with out.open("a") as handle:
        handle.write('{"row": 3, "prompt": "How many pl')  # a write cut off by the kill
    policy = ScriptedPolicy(four_answers)
    summary = run_search(StepScorer(), policy, data, out, options)
    assert (summary.resumed, summary.searched) == (2, 1)
    assert {problem for call in policy.calls for problem, _ in call["prompts"]} == {"How many plums?"}
    assert out.read_text() == whole.read_text()


@pytest.mark.parametrize("method", ["best-of-n", "beam", "dvts"])
def test_a_half_written_batch_is_searched_again_whole_and_ends_as_an_uninterrupted_run(data, tmp_path, method):
    options = SearchOptions(method=method, n=4, beam_width=2, problems_per_batch=2)
    whole = tmp_path / "whole.jsonl"
    run_search(StepScorer(), OneStreamPerCall(), data, whole, options)

    out = tmp_path / "out.jsonl"
    first_row = whole.read_text().splitlines(keepends=True)[0]
    out.write_text(first_row + '{"row": 2, "prompt": "How many pe')  # killed while writing the batch of rows 1-2
    policy = OneStreamPerCall()
    summary = run_search(StepScorer(), policy, data, out, options)
    assert (summary.resumed, summary.searched) == (1, 2)
    assert out.read_text() == whole.read_text()
    # the half-written batch ran with both its problems, as in the unbroken run; the kept row was not rewritten
    assert {problem for problem, _ in policy.calls[0]["prompts"]} == {"How many apples?", "How many pears?"}
    assert [json.loads(line)["row"] for line in out.read_text().splitlines()] == [1, 2, 3]


def test_an_output_of_another_search_is_not_continued(data, tmp_path):
    out = tmp_path / "out.jsonl"
    run_search(StepScorer(), ScriptedPolicy(four_answers), data, out, SearchOptions(limit=1))
    with pytest.raises(PRMError, match=r"other settings \(options differ\).*--overwrite"):
        run_search(StepScorer(), ScriptedPolicy(four_answers), data, out, SearchOptions(n=2))
    summary = run_search(StepScorer(), ScriptedPolicy(four_answers), data, out,
                         SearchOptions(n=2, overwrite=True))
    assert summary.resumed == 0 and len(lines(out)) == 3


def test_bad_rows_are_all_reported_with_row_field_and_fix(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine, no gold"}\n{"text": "where?"}\n"just a string"\n{"prompt": "  "}\n'
                    '{"prompt": "ok", "gold_answer": ["4"]}\n')
    with pytest.raises(PRMError) as err:
        run_search(StepScorer(), ScriptedPolicy(four_answers), path, tmp_path / "out.jsonl")
    message = str(err.value)
    assert "4 of 5 rows cannot be searched" in message
    assert "row 2, field 'prompt/problem/question': missing" in message and "--problem-field" in message
    assert "row 3, field '-': expected an object" in message
    assert "row 4, field 'prompt': the problem must be a non-empty string" in message
    assert "row 5, field 'gold_answer': a gold answer is a string or a number" in message
    assert "row 1" not in message


def test_named_fields_and_a_wrong_output_suffix(tmp_path):
    path = tmp_path / "named.jsonl"
    write_jsonl([{"q": "How many?", "truth": 4}], path)
    out = tmp_path / "out.jsonl"
    summary = run_search(StepScorer(), ScriptedPolicy(four_answers), path, out,
                         SearchOptions(method="majority", problem_field="q", gold_field="truth"))
    assert summary.correct == 1 and lines(out)[0]["gold_answer"] == "4"
    with pytest.raises(PRMError, match="give a .jsonl path"):
        run_search(StepScorer(), ScriptedPolicy(four_answers), path, tmp_path / "out.csv",
                   SearchOptions(problem_field="q"))
    with pytest.raises(PRMError, match="field 'truth': missing"):
        run_search(StepScorer(), ScriptedPolicy(four_answers), data_without(tmp_path), out,
                   SearchOptions(problem_field="q", gold_field="truth", overwrite=True))


def data_without(tmp_path: Path) -> Path:
    path = tmp_path / "nogold.jsonl"
    write_jsonl([{"q": "How many?"}], path)
    return path


def test_budgets_reuse_the_first_n_samples_and_report_every_method(data, tmp_path):
    out = tmp_path / "budgets.jsonl"
    policy = ScriptedPolicy(four_answers)
    options = SearchOptions(budgets=(1, 2, 4), beam_width=2)
    summary = run_search(StepScorer(), policy, data, out, options)
    sampled = [c for c in policy.calls if c["stop"] == () and c["temperature"] == options.temperature]
    assert [c["n"] for c in sampled] == [4]  # max(N) samples once, not 1 + 2 + 4
    methods = summary.report["methods"]
    accuracy = {m: {n: cell["accuracy"] for n, cell in cells.items()} for m, cells in methods.items()}
    # Two graded problems, each with samples 5 (0.9), 4, 4 (0.5 each), 6 (0.1) against gold 4.
    assert accuracy["greedy"] == {"1": 0.0}
    assert accuracy["majority"] == {"1": 0.0, "2": 0.0, "4": 1.0}  # 5 vs 4 at N=2: the first seen wins
    assert accuracy["best-of-n"] == {"1": 0.0, "2": 0.0, "4": 0.0}
    assert accuracy["weighted-best-of-n"] == {"1": 0.0, "2": 0.0, "4": 1.0}  # 1.0 for 4 against 0.9 for 5
    assert accuracy["any sample right"] == {"1": 0.0, "2": 1.0, "4": 1.0}
    assert set(accuracy["beam"]) == set(accuracy["dvts"]) == {"2", "4"}  # multiples of the beam width only
    rows = lines(out)
    tokens = [sum(s["tokens"] for s in r["samples"][:2]) for r in rows]
    assert methods["best-of-n"]["2"]["tokens"] == pytest.approx(sum(tokens) / 3)  # all problems count tokens
    assert methods["best-of-n"]["2"]["graded"] == 2
    assert json.loads(Path(summary.files["json"]).read_text())["methods"] == methods
    assert Path(summary.files["png"]).stat().st_size > 10_000


def test_greedy_keeps_its_n_1_column_when_the_budgets_start_higher(data, tmp_path):
    from prmkit.search.report import columns, markdown_table

    summary = run_search(StepScorer(), ScriptedPolicy(four_answers), data, tmp_path / "b.jsonl",
                         SearchOptions(budgets=(4,), beam_width=2))
    assert columns(summary.report) == [1, 4]
    table = markdown_table(summary.report)
    assert table.splitlines()[0] == "| method | N=1 | N=4 |"
    assert "| greedy | 0.000 (" in table and "| best-of-n | - | 0.000 (" in table


@pytest.mark.parametrize("options, answer", [
    (SearchOptions(method="softmax-weighted", vote_temperature=0.1), "5"),  # 1 against 2 exp(-4) for the 4s
    (SearchOptions(method="softmax-weighted", vote_temperature=1.0), "4"),  # 2 exp(-0.4) = 1.34 against 1
    (SearchOptions(method="filtered-majority", keep_fraction=0.5), "5"),  # the top two, 5 and 4, tie: 5 first
    (SearchOptions(method="filtered-majority", keep_fraction=0.75), "4"),  # three kept: 4 twice
    (SearchOptions(method="majority-of-bests", mob_fraction=0.25), "4"),  # best of one: uniform, 4 is 1 in 2
])
def test_the_selection_rules_choose_with_their_settings(data, tmp_path, options, answer):
    out = tmp_path / "out.jsonl"
    run_search(StepScorer(), ScriptedPolicy(four_answers), data, out, options)
    rows = lines(out)
    assert [r["answer"] for r in rows] == [answer] * 3
    assert rows[0]["options"] == options.identity() and rows[0]["method"] == options.method
    assert set(options.selection(options.method)) <= set(rows[0]["options"])


def test_budget_reports_name_the_settings_and_continue_under_new_ones(data, tmp_path):
    """A budgets row holds every sample whatever the selection settings, so a run with other settings continues
    the output and reports with its own."""
    from prmkit.search.report import markdown_table

    out = tmp_path / "b.jsonl"
    methods = ("softmax-weighted", "filtered-majority", "majority-of-bests")
    first = run_search(StepScorer(), ScriptedPolicy(four_answers), data, out,
                       SearchOptions(budgets=(4,), budget_methods=methods, vote_temperature=0.1))
    again = run_search(StepScorer(), ScriptedPolicy(four_answers), data, out,
                       SearchOptions(budgets=(4,), budget_methods=methods, vote_temperature=1.0))
    assert again.resumed == 3 and again.searched == 0
    assert first.report["methods"]["softmax-weighted"]["4"]["accuracy"] == 0.0
    assert again.report["methods"]["softmax-weighted"]["4"]["accuracy"] == 1.0
    assert again.report["selection"]["softmax-weighted"] == {"vote_temperature": 1.0}
    assert "| softmax-weighted (vote_temperature=1.0) |" in markdown_table(again.report)
    assert "| filtered-majority (keep_fraction=0.5) |" in markdown_table(again.report)
