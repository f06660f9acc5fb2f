"""`prmkit search` as a user runs it: a tiny policy (random weights, so its text is noise) guided by the tiny PRM
run, through the transformers backend. What is checked is the plumbing: one row per problem with the fields the
README promises, beam rounds cut at the delimiter, a second run that finds the work done, a run killed mid-batch
that resumes to the unbroken run's file, and the budget report with its table, JSON and PNG."""

from __future__ import annotations

import json

from prmkit.cli import main
from prmkit.data.synthetic import generate_records
from prmkit.files import write_jsonl

COMMON = ["--max-new-tokens", "12", "--device", "cpu", "--problems-per-batch", "2"]


def test_search_cli_beam_resume_and_budgets(tiny_run, tiny_llama, tmp_path, capsys):
    problems = tmp_path / "problems.jsonl"
    rows = generate_records(3, seed=11)
    write_jsonl([{"prompt": r["prompt"], "gold_answer": r["gold_answer"]} for r in rows[:2]]
                + [{"prompt": rows[2]["prompt"]}], problems)
    out = tmp_path / "beam.jsonl"
    args = ["search", str(tiny_run), str(problems), str(out), "--policy", str(tiny_llama), "--method", "beam",
            "--n", "4", "--beam-width", "2", "--max-rounds", "3", *COMMON]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "searched 3 of 3 problems (beam, n=4, beam width 2)" in printed
    assert "of 2 problems with a gold answer" in printed
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["row"] for r in written] == [1, 2, 3]
    for row in written:
        assert row["method"] == "beam" and row["options"]["beam_width"] == 2 and 1 <= row["rounds"] <= 3
        assert len(row["step_scores"]) == len(row["steps"]) and row["tokens"] > 0
        assert all(s is None or 0.0 <= s <= 1.0 for s in row["step_scores"])
        assert 1 <= len(row["candidates"]) <= 4
    assert [r["correct"] is None for r in written] == [False, False, True]

    assert main(args) == 0  # everything is there already: nothing is generated again
    assert "searched 0 of 3 problems" in capsys.readouterr().out

    # Killed while writing the batch of rows 1-2: row 1 whole, row 2 cut off. The batch is searched again whole
    # and the file ends exactly as the unbroken run wrote it (the policy samples a padded batch from one seed, so
    # row 2 searched alone would come out otherwise).
    unbroken = out.read_bytes()
    first, second = unbroken.split(b"\n")[:2]
    out.write_bytes(first + b"\n" + second[:40])
    assert main(args) == 0
    assert "searched 2 of 3 problems" in capsys.readouterr().out
    assert out.read_bytes() == unbroken

    report_out = tmp_path / "budgets.jsonl"
    assert main(["search", str(tiny_run), str(problems), str(report_out), "--policy", str(tiny_llama),
                 "--budgets", "1,2", "--beam-width", "2", "--max-rounds", "2", *COMMON]) == 0
    printed = capsys.readouterr().out
    assert "accuracy at budgets" in printed and "weighted-best-of-n" in printed
    report = json.loads((tmp_path / "budgets.budgets.json").read_text())
    assert report["budgets"] == [1, 2] and report["graded"] == 2
    assert set(report["methods"]["beam"]) == {"2"} and set(report["methods"]["best-of-n"]) == {"1", "2"}
    assert (tmp_path / "budgets.budgets.png").stat().st_size > 10_000
