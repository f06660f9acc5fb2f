"""`prmkit search-tune`: every grid point's validation accuracy by hand, the choice, the file `--select-settings`
applies, and the guarantee that held-out problems never steer a choice (an audit hook sees every file opened)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from search_fakes import ScriptedPolicy, StepScorer  # noqa: E402

from prmkit.cli import main  # noqa: E402
from prmkit.errors import PRMError  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.search.options import SearchOptions  # noqa: E402
from prmkit.search.run import run_search  # noqa: E402
from prmkit.search.tune import (  # noqa: E402
    accuracy,
    grid,
    held_out_accuracy,
    read_candidates,
    read_settings,
    tune_selection,
)

OPENED: list[str] | None = None  # while a list, the audit hook appends every path opened


def _audit(event: str, args) -> None:
    if event == "open" and OPENED is not None and isinstance(args[0], (str, Path)):
        OPENED.append(str(Path(args[0]).resolve()))


sys.addaudithook(_audit)  # hooks cannot be removed; this one records only while OPENED is a list


def problem(prompt: str, samples: list[tuple[float, str, bool]]) -> dict:
    """A `--budgets` output row: (score, answer, correct) per sample."""
    return {"row": 1, "prompt": prompt, "gold_answer": "g", "options": {"seed": 3},
            "samples": [{"solution": "s", "score": score, "answer": answer, "truncated": False, "correct": right,
                         "tokens": 1} for score, answer, right in samples]}


# A confident right 5 against two lukewarm wrong 7s: the PRM should outweigh the vote. Held out, the opposite.
TRUST_THE_PRM = [(0.9, "5", True), (0.5, "7", False), (0.5, "7", False)]
TRUST_THE_VOTE = [(0.9, "5", False), (0.5, "7", True), (0.5, "7", True)]


@pytest.fixture
def splits(tmp_path) -> tuple[Path, Path]:
    validation, held_out = tmp_path / "val.jsonl", tmp_path / "test.jsonl"
    write_jsonl([problem("p1", TRUST_THE_PRM)], validation)
    write_jsonl([problem("q1", TRUST_THE_VOTE), problem("q2", TRUST_THE_VOTE)], held_out)
    return validation, held_out


def test_every_grid_point_is_scored_and_the_first_best_chosen(splits):
    """softmax: the 7s win above T = 0.4 / ln 2 = 0.577; filtered: ceil(keep * 3) kept, 1 or 2 kept pick the 5
    (two kept tie 1-1, the 5 seen first), 3 kept pick the 7s; majority-of-bests: m = round(0.25 * 3) = 1 picks
    uniformly (7 with 2/3), m = 2 picks the 5 with 1 - (2/3)^2 = 5/9."""
    tuned = tune_selection(splits[0])
    softmax = tuned["rules"]["softmax-weighted"]
    assert [(p["settings"]["vote_temperature"], p["accuracy"]) for p in softmax["grid"]] == [
        (0.01, 1.0), (0.03, 1.0), (0.1, 1.0), (0.3, 1.0), (1.0, 0.0), (3.0, 0.0)]
    assert softmax["chosen"] == {"vote_temperature": 0.01}
    filtered = tuned["rules"]["filtered-majority"]
    assert [p["accuracy"] for p in filtered["grid"]] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert tuned["rules"]["majority"]["accuracy"] == 0.0 and tuned["rules"]["best-of-n"]["accuracy"] == 1.0
    assert [p["accuracy"] for p in tuned["rules"]["majority-of-bests"]["grid"]] == [0.0, 1.0, 1.0]
    assert len(grid("majority-of-bests")) == 3
    assert tuned["settings"] == {"vote_temperature": 0.01, "keep_fraction": 0.125, "mob_fraction": 0.5,
                                 "mob_resamples": 200}
    assert tuned["seed"] == 3 and tuned["problems"] == 1  # the seed the validation search ran with


def test_tuning_opens_only_the_validation_file(splits):
    global OPENED
    validation, held_out = splits
    OPENED = []
    try:
        tune_selection(validation)
    finally:
        opened, OPENED = OPENED, None
    assert set(opened) == {str(validation.resolve())}
    assert str(held_out.resolve()) not in opened


def test_held_out_problems_are_read_after_the_choice_and_never_change_it(splits, tmp_path, capsys):
    """Tuned on the held-out file the choice would differ (so a leak would show), yet with --held-out the file
    holds the choices made on validation alone; the held-out file is opened only after the settings were
    written."""
    global OPENED
    validation, held_out = splits
    assert tune_selection(held_out)["settings"]["vote_temperature"] == 1.0  # what a leak would choose
    alone, both = tmp_path / "alone.json", tmp_path / "both.json"
    assert main(["search-tune", str(validation), "--out", str(alone)]) == 0
    OPENED = []
    try:
        assert main(["search-tune", str(validation), "--out", str(both), "--held-out", str(held_out)]) == 0
    finally:
        opened, OPENED = OPENED, None
    written_alone, written = json.loads(alone.read_text()), json.loads(both.read_text())
    assert written["settings"] == written_alone["settings"] and written["rules"] == written_alone["rules"]
    first_held = opened.index(str(held_out.resolve()))
    assert opened[0] == str(validation.resolve())
    assert any(Path(path).parent == tmp_path and path != str(validation.resolve()) for path in opened[:first_held])
    report = written["held_out"]["rules"]["softmax-weighted"]
    assert report["chosen"]["accuracy"] == 0.0 and report["default"]["accuracy"] == 0.0  # T=0.01 and 0.1: the 5s
    assert written["held_out"]["rules"]["majority"]["chosen"]["accuracy"] == 1.0
    assert "softmax-weighted" in capsys.readouterr().out


def test_the_held_out_file_cannot_be_the_validation_file(splits):
    tuned = tune_selection(splits[0])
    with pytest.raises(PRMError, match="is the validation file"):
        held_out_accuracy(tuned, splits[0])


def test_tuning_takes_the_first_n_candidates_and_skips_ungraded_problems(tmp_path):
    path = tmp_path / "val.jsonl"
    ungraded = {**problem("p2", TRUST_THE_PRM), "gold_answer": None}
    # the first two samples: the right 5 (0.9) and a wrong 7; a third and fourth wrong 7 join at N=4
    write_jsonl([problem("p1", [*TRUST_THE_PRM, (0.4, "7", False)]), ungraded], path)
    assert tune_selection(path, n=2, rules=("majority",))["rules"]["majority"]["accuracy"] == 1.0  # 1-1: first
    assert tune_selection(path, rules=("majority",))["rules"]["majority"]["accuracy"] == 0.0
    assert tune_selection(path, rules=("majority",))["problems"] == 1


def test_bad_validation_files_say_what_to_give(tmp_path):
    path = tmp_path / "val.jsonl"
    write_jsonl([{"row": 1, "prompt": "p", "gold_answer": "1", "solution": "greedy"}], path)
    with pytest.raises(PRMError, match="line 1 has no `samples` or `candidates`"):
        tune_selection(path)
    write_jsonl([{"prompt": "p", "gold_answer": "1", "samples": [{"score": 0.5, "answer": "1"}]}], path)
    with pytest.raises(PRMError, match="line 1: candidates without correct, truncated"):
        tune_selection(path)
    write_jsonl([{**problem("p", TRUST_THE_PRM), "gold_answer": None}], path)
    with pytest.raises(PRMError, match="no problem with a gold answer"):
        tune_selection(path)
    with pytest.raises(PRMError, match="rules top-k are not known"):
        tune_selection(path, rules=("top-k",))
    with pytest.raises(PRMError, match="no such file"):
        tune_selection(tmp_path / "missing.jsonl")


def test_settings_files_are_read_back_or_refused(splits, tmp_path):
    out = tmp_path / "settings.json"
    assert main(["search-tune", str(splits[0]), "--out", str(out)]) == 0
    assert read_settings(out) == {"vote_temperature": 0.01, "keep_fraction": 0.125, "mob_fraction": 0.5,
                                  "mob_resamples": 200}
    out.write_text(json.dumps({"settings": {"temperature": 0.3}}))
    with pytest.raises(PRMError, match="settings temperature are not selection settings"):
        read_settings(out)
    out.write_text("[]")
    with pytest.raises(PRMError, match="not a `prmkit search-tune` file"):
        read_settings(out)


FOUR = ["I think \\boxed{5} [0.9]", "It is \\boxed{4} [0.5]", "So \\boxed{4} [0.5]", "Maybe \\boxed{6} [0.1]"]


def test_tuning_scores_a_search_output_as_the_budget_report_does(tmp_path):
    """The same rule, settings and seed pick the same samples in the budget report and in tuning, so validation
    accuracy is the accuracy a search with the chosen settings reports (majority-of-bests' bootstrap included)."""
    data = tmp_path / "val_problems.jsonl"
    write_jsonl([{"prompt": f"Problem {i}?", "gold_answer": "4"} for i in range(6)], data)
    out = tmp_path / "val.jsonl"
    options = SearchOptions(budgets=(4,), budget_methods=("majority-of-bests", "softmax-weighted"),
                            mob_resamples=7, mob_fraction=0.25, vote_temperature=1.0)
    summary = run_search(StepScorer(), ScriptedPolicy(lambda p, prefix, k: FOUR[k % 4]), data, out, options)
    report = summary.report["methods"]
    problems, seed = read_candidates(out)
    assert seed == options.seed and len(problems) == 6
    for rule in ("majority-of-bests", "softmax-weighted"):
        assert accuracy(rule, options.selection(rule), problems, seed)["accuracy"] == report[rule]["4"]["accuracy"]
    assert 0 < report["majority-of-bests"]["4"]["accuracy"] < 1  # seven uniform picks: problems differ
    assert report["softmax-weighted"]["4"]["accuracy"] == 1.0  # 2 exp(-0.4) = 1.34 for the 4s, 1 for the 5
