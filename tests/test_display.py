"""The one progress bar of score, label and search: what it prints on stderr, and nothing when it is off."""

from __future__ import annotations

from prmkit.display import progress_bar


def test_a_progress_bar_counts_done_of_total_with_its_fields_on_stderr(capsys):
    with progress_bar(True, "labelling", total=10, unit="solutions", extra="{task.fields[rollouts]:,} rollouts",
                      completed=3, rollouts=0) as update:
        update(advance=2, rollouts=1234)
    captured = capsys.readouterr()
    assert "labelling" in captured.err and "5/10 solutions" in captured.err and "1,234 rollouts" in captured.err
    assert captured.out == ""  # stdout stays the command's own output


def test_a_progress_bar_without_a_unit_shows_a_percentage_and_prints_its_description_as_it_is(capsys):
    with progress_bar(True, "scoring {odd}[name].jsonl", total=200, extra="{task.fields[rows]} rows", rows=0) as update:
        update(completed=100, rows=7)
    err = capsys.readouterr().err
    assert "scoring {odd}[name].jsonl" in err and "50%" in err and "7 rows" in err


def test_a_progress_bar_that_is_off_prints_nothing(capsys):
    with progress_bar(False, "searching", unit="problems") as update:
        update(completed=2, total=5)
    assert capsys.readouterr() == ("", "")
