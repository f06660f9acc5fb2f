"""Conversion of every source format: counts, label semantics row by row, options, errors, and the real files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from prmkit.data.convert import FORMATS, convert, convert_rows, format_options
from prmkit.data.records import validate_records
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "formats"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
STEPWISE = SHARED / "prm800k_phase1_stepwise"
SAMPLES = SHARED / "prm_format_samples"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"real data folder {SHARED} is absent")


def run(tmp_path: Path, source_format: str, name: str, **options) -> tuple[list[dict], object]:
    out = tmp_path / f"{source_format}.jsonl"
    report = convert(source_format, FIXTURES / name, out, **options)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    check_written(records, report)
    return records, report


def check_written(records: list[dict], report) -> None:
    validate_records(records, report.source, scheme="binary")  # raises on any invalid record
    assert report.rows_written == len(records)
    assert report.rows_read == report.rows_converted + report.rows_skipped
    kinds = Counter()
    for record in records:
        for value in record["labels"]:
            kinds["unlabelled" if value is None else "positive" if value == 1 else "negative" if value == 0
                  else "soft"] += 1
    assert {k: v for k, v in report.label_counts.items() if v} == dict(kinds)


# ---------------------------------------------------------------- prm800k (raw)

def test_prm800k_follows_the_chosen_path(tmp_path):
    records, report = run(tmp_path, "prm800k", "prm800k.jsonl")
    assert (report.rows_read, report.rows_converted, report.rows_written) == (5, 4, 4)
    assert report.skipped == {"no chosen step (finish_reason=bad_problem)": 1}
    solved, gave_up, phase2, neutral = records
    assert solved["completions"] == ["First add: $2 + 3 = 5$.", "Now I subtract.", "Subtract: $5 - 2 = 3$.",
                                     "So the answer is 3.\n\n# Answer\n\n3"]
    assert solved["labels"] == [1.0, 1.0, 1.0, 1.0]  # chosen index 1 is the neutral one; human step positive
    assert gave_up["completions"] == ["I multiply 7 by 6."] and gave_up["labels"] == [1.0]
    assert phase2["completions"][-1] == "Then $5 + 1 = 7$." and phase2["labels"] == [1.0, 1.0, 0.0]
    assert neutral["labels"] == [1.0, 1.0]
    assert solved["finish_reason"] == "solution" and phase2["generation"] == 4
    assert solved["ground_truth_answer"] == "3"
    assert report.discarded == {"alternative completions (not chosen)": 5, "candidates of the final unchosen step": 2,
                                "steps after the last chosen step": 1}
    assert report.breakdown["finish_reason=solution"] == 2 and report.breakdown["finish_reason=give_up"] == 1
    assert report.breakdown["finish_reason=bad_problem"] == 1 and report.breakdown["finish_reason=found_error"] == 1
    assert any("neutral rating 0 -> positive (1.0)" in c for c in report.choices)
    assert any("discarded" in c for c in report.choices)
    assert "rows read 5, converted 4, skipped 1; records written 4" in report.summary()
    assert json.loads(json.dumps(report.to_dict()))["skipped"] == dict(report.skipped)


@pytest.mark.parametrize("neutral, solved, phase2", [
    ("negative", [1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0]),
    ("ignore", [1.0, None, 1.0, 1.0], [1.0, None, 0.0]),
])
def test_prm800k_neutral_policy_maps_the_chosen_zero(tmp_path, neutral, solved, phase2):
    records, report = run(tmp_path, "prm800k", "prm800k.jsonl", neutral=neutral)
    assert records[0]["labels"] == solved
    assert records[2]["labels"] == phase2
    if neutral == "negative":
        assert records[3]["labels"] == [0.0, 0.0]
    else:  # the all-neutral row has nothing left to train on: skipped and counted, not written
        assert len(records) == 3
        assert report.skipped["no labelled step left (neutral='ignore', human_steps='positive')"] == 1
    assert any(f"neutral={neutral!r}" in c for c in report.choices)


def test_prm800k_options(tmp_path):
    records, _ = run(tmp_path, "prm800k", "prm800k.jsonl", human_steps="unlabelled")
    assert records[0]["labels"] == [1.0, 1.0, None, 1.0]
    records, report = run(tmp_path, "prm800k", "prm800k.jsonl", skip_finish_reasons=("give_up", "bad_problem"))
    assert len(records) == 3
    assert report.skipped == {"finish_reason=give_up (in skip_finish_reasons)": 1,
                              "finish_reason=bad_problem (in skip_finish_reasons)": 1}
    with pytest.raises(PRMError, match="giveup"):
        convert("prm800k", FIXTURES / "prm800k.jsonl", tmp_path / "x.jsonl", skip_finish_reasons=["giveup"])
    with pytest.raises(PRMError, match="neutral='zero'"):
        convert("prm800k", FIXTURES / "prm800k.jsonl", tmp_path / "x.jsonl", neutral="zero")


def test_prm800k_bad_rating_and_index_name_row_and_field(tmp_path):
    rows = read_rows(FIXTURES / "prm800k.jsonl")
    rows[1]["label"]["steps"][0]["completions"][0]["rating"] = 2
    with pytest.raises(PRMError, match=r"row 2, field 'label\.steps\[0\]\.completions\[0\]\.rating'"):
        convert_rows("prm800k", rows, "f.jsonl")
    rows = read_rows(FIXTURES / "prm800k.jsonl")
    rows[0]["label"]["steps"][1]["chosen_completion"] = 5
    with pytest.raises(PRMError, match=r"row 1, field 'label\.steps\[1\]\.chosen_completion': index 5"):
        convert_rows("prm800k", rows, "f.jsonl")


# ---------------------------------------------------------------- prm800k-stepwise

def test_prm800k_stepwise_chains_and_alternatives(tmp_path):
    records, report = run(tmp_path, "prm800k-stepwise", "prm800k_stepwise.jsonl")
    assert (report.rows_read, report.rows_converted, report.rows_skipped) == (12, 10, 2)
    assert report.skipped == {"candidate without a rating (rating null, not human-written)": 1,
                              "human-written step the labeler did not keep (not preferred)": 1}
    shown = [(r["kind"], r["completions"], r["labels"]) for r in records]
    first = "First $3 \\cdot 4 = 12$."
    assert shown == [
        ("chain", [first, "Then I add 1.", "So the result is 13.\n\n# Answer\n\n13"], [1.0, 1.0, 1.0]),
        ("alternative", ["First $3 \\cdot 4 = 7$."], [0.0]),
        ("alternative", [first, "Let me restate the problem."], [None, 1.0]),
        ("alternative", [first, "Then I add 1.", "So the result is 11.\n\n# Answer\n\n11"], [None, None, 0.0]),
        ("chain", [first], [1.0]),
        ("alternative", [first, "Then $12 + 1 = 14$."], [None, 0.0]),
        ("chain", ["A hexagon has six sides.\n\n# Answer\n\n6"], [1.0]),
        ("alternative", ["Let me picture a hexagon."], [1.0]),
    ]
    assert records[0]["is_solution"] is True and records[1]["error_reason"] == "incorrect_arithmetic_skills"
    # every rating of the source is used exactly once
    labelled = sum(v is not None for r in records for v in r["labels"])
    assert labelled == report.rows_converted


def test_prm800k_stepwise_options(tmp_path):
    records, report = run(tmp_path, "prm800k-stepwise", "prm800k_stepwise.jsonl", neutral="ignore",
                          attach_answer=False, human_steps="unlabelled")
    assert records[0]["completions"][-1] == "So the result is 13." and records[0]["labels"] == [1.0, None, 1.0]
    assert [r["completions"][-1] for r in records].count("Let me restate the problem.") == 0
    assert "A hexagon has six sides." not in [r["completions"][-1] for r in records]
    assert report.skipped["neutral rating with neutral='ignore': no labelled step left"] == 2
    assert report.skipped["preferred step with no label left (neutral='ignore')"] == 1
    records, _ = run(tmp_path, "prm800k-stepwise", "prm800k_stepwise.jsonl", neutral="negative")
    assert records[2]["labels"] == [None, 0.0] and records[6]["labels"] == [0.0]


def test_prm800k_stepwise_reads_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_rows(FIXTURES / "prm800k_stepwise.jsonl")
    schema = pa.schema([("instruction", pa.string()), ("responses", pa.list_(pa.string())),
                        ("next_response", pa.string()), ("answer", pa.string()), ("is_human_response", pa.bool_()),
                        ("is_solution", pa.bool_()), ("is_preferred_response", pa.bool_()),
                        ("rating", pa.float64()), ("error_reason", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "fixture.parquet")
    from_parquet = convert("prm800k-stepwise", tmp_path / "fixture.parquet", tmp_path / "a.jsonl")
    assert from_parquet.rows_written == 8
    assert (tmp_path / "a.jsonl").read_text() == _converted_text(tmp_path, "prm800k-stepwise",
                                                                 "prm800k_stepwise.jsonl")


def _converted_text(tmp_path: Path, source_format: str, name: str) -> str:
    convert(source_format, FIXTURES / name, tmp_path / "b.jsonl")
    return (tmp_path / "b.jsonl").read_text()


# ---------------------------------------------------------------- math-shepherd

def test_math_shepherd_tags_and_mismatches(tmp_path):
    records, report = run(tmp_path, "math-shepherd", "math_shepherd.jsonl")
    assert (report.rows_read, report.rows_written) == (6, 2)
    assert report.skipped == {"'ки' tags and '+'/'-' labels do not line up (count or text differs)": 2,
                              "no 'ки' step tag in input": 1, "no 'Step 1:' before the first tag": 1}
    ok, wrong = records
    assert ok["prompt"] == "What is 2 + 3 - 1?"  # '+' and '-' inside the maths are not labels
    assert ok["completions"] == ["Step 1: 2 + 3 = <<2+3=5>>5.", "Step 2: 5 - 1 = <<5-1=4>>4. The answer is: 4"]
    assert ok["labels"] == [1.0, 1.0] and wrong["labels"] == [1.0, 0.0] and wrong["task"] == "MATH"
    records, report = run(tmp_path, "math-shepherd", "math_shepherd.jsonl", strip_step_prefix=True)
    assert records[0]["completions"][0] == "2 + 3 = <<2+3=5>>5."
    assert any("strip_step_prefix=True" in c for c in report.choices)


# ---------------------------------------------------------------- processbench

@pytest.mark.parametrize("after_error, after", [("unlabelled", None), ("negative", 0.0)])
def test_processbench_first_error(tmp_path, after_error, after):
    options = {} if after_error == "unlabelled" else {"after_error": after_error}
    records, report = run(tmp_path, "processbench", "processbench.json", **options)
    assert report.skipped == {"label is not a step index (-1 or 0..len(steps)-1)": 1}
    no_error, middle, first = records
    assert no_error["labels"] == [1.0, 1.0, 1.0] and no_error["first_error"] == -1
    assert middle["labels"] == [1.0, 0.0, after, after] and middle["first_error"] == 1
    assert first["labels"] == [0.0, after] and first["id"] == "fixture-2"
    assert middle["final_answer_correct"] is False and middle["generator"] == "fixture-model"
    assert any(f"after_error={after_error!r}" in c for c in report.choices)


# ---------------------------------------------------------------- math-aps

def test_math_aps_tree_labels_each_node_once(tmp_path):
    records, report = run(tmp_path, "math-aps", "math_aps.jsonl")
    assert (report.rows_read, report.rows_converted, report.rows_written) == (2, 1, 3)
    assert report.skipped == {"no node with a step below the question": 1}
    assert report.discarded == {"root nodes (question only, no step)": 2,
                                "repeated nodes (same solution_prefix, merged)": 1}
    assert [(r["completions"], r["labels"]) for r in records] == [
        (["We add the two ones.", "So $1 + 1 = 2$."], [0.75, 1.0]),
        (["We add the two ones.", "So $1 + 1 = 3$."], [None, 0.0]),
        (["Guessing, the answer is 11."], [0.25]),
    ]
    assert records[0]["prompt"] == "What is $1 + 1$? Give a number." and records[0]["final_answer"] == "2"
    records, _ = run(tmp_path, "math-aps", "math_aps.jsonl", threshold=0.5)
    assert [r["labels"] for r in records] == [[1.0, 1.0], [None, 0.0], [0.0]]


# ---------------------------------------------------------------- trl

def test_trl_identity_normalises_labels(tmp_path):
    records, report = run(tmp_path, "trl", "trl.jsonl")
    assert [r["labels"] for r in records] == [[1.0, 1.0], [0.0, 1.0], [1.0, None, 1.0]]
    assert records[1]["source"] == "x" and "ternary" in report.choices[0]
    records, _ = run(tmp_path, "trl", "trl.jsonl", neutral="negative")
    assert records[2]["labels"] == [1.0, None, 0.0]


def test_trl_invalid_rows_raise_or_are_counted(tmp_path):
    bad = tmp_path / "bad.jsonl"
    rows = [{"prompt": "p", "completions": ["a"], "labels": [1]}, {"prompt": "q", "completions": ["a", "b"],
                                                                   "labels": [1]},
            {"prompt": "r", "completions": ["a"], "labels": [1.5]}]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PRMError, match="row 2, field 'labels'"):
        convert("trl", bad, tmp_path / "out.jsonl")
    report = convert("trl", bad, tmp_path / "out.jsonl", skip_invalid=True)
    assert report.rows_written == 1 and report.skipped == {"invalid 'labels' (skip_invalid)": 2}


# ---------------------------------------------------------------- errors

def test_bad_input_raises_with_file_row_field_and_fix(tmp_path):
    with pytest.raises(PRMError, match="no such file"):
        convert("prm800k", tmp_path / "missing.jsonl", tmp_path / "out.jsonl")
    with pytest.raises(PRMError, match="unknown data format 'shepherd'.*math-shepherd"):
        convert("shepherd", FIXTURES / "math_shepherd.jsonl", tmp_path / "out.jsonl")
    with pytest.raises(PRMError, match="no option 'after_eror'.*after_error"):
        convert("processbench", FIXTURES / "processbench.json", tmp_path / "out.jsonl", after_eror="negative")
    with pytest.raises(PRMError, match=r"processbench.json: row 1, field 'input'.*looks like 'processbench'"):
        convert("math-shepherd", FIXTURES / "processbench.json", tmp_path / "out.jsonl")
    with pytest.raises(PRMError, match=r"row 1, field 'question\.problem'.*looks like 'prm800k-stepwise'"):
        convert("prm800k", FIXTURES / "prm800k_stepwise.jsonl", tmp_path / "out.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"input": "x", "label": "y"}) + "\n{not json\n")
    with pytest.raises(PRMError, match="row 2 is not valid JSON"):
        convert("math-shepherd", broken, tmp_path / "out.jsonl")
    with pytest.raises(PRMError, match="overwrite the input"):
        convert("trl", FIXTURES / "trl.jsonl", FIXTURES / "trl.jsonl")
    assert not (tmp_path / "out.jsonl").exists()  # nothing half-written


def test_every_format_lists_its_options():
    assert format_options("prm800k") == {"neutral": "positive", "human_steps": "positive", "skip_finish_reasons": ()}
    assert format_options("processbench") == {"after_error": "unlabelled"}
    assert set(FORMATS) == {"prm800k", "prm800k-stepwise", "math-shepherd", "processbench", "math-aps", "prmbench",
                            "trl"}


# ---------------------------------------------------------------- the real files in ../shared/data

@pytest.fixture(scope="module")
def stepwise_train():
    path = STEPWISE / "phase1_train_plus.stepwise-critic.parquet"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return convert_rows("prm800k-stepwise", read_rows(path), str(path))


@needs_shared
@pytest.mark.parametrize("name, rows, ratings", [
    ("phase1_test", 5449, {1: 2245, 0: 867, -1: 1970, None: 367}),
    ("phase1_train_plus", 51835, {1: 18782, 0: 10234, -1: 19656, None: 3163}),
])
def test_real_prm800k_stepwise_counts_match_source_md(name, rows, ratings, stepwise_train):
    if name == "phase1_train_plus":
        records, report = stepwise_train
    else:
        path = STEPWISE / f"{name}.stepwise-critic.parquet"
        records, report = convert_rows("prm800k-stepwise", read_rows(path), str(path))
    check_written(records, report)
    assert report.rows_read == rows
    human_on_chain = report.breakdown["human-written steps on a chain"]
    # every -1/0/+1 rating is used once; only null-rated rows are skipped
    assert report.label_counts["negative"] == ratings[-1]
    assert report.label_counts["positive"] == ratings[1] + ratings[0] + human_on_chain
    assert report.rows_skipped + human_on_chain == ratings[None]
    assert report.rows_converted == rows - report.rows_skipped


@needs_shared
def test_real_prm800k_raw_samples_agree_with_the_stepwise_file(stepwise_train):
    records, report = convert_rows("prm800k", read_rows(SAMPLES / "samples_prm800k.jsonl"), "samples")
    check_written(records, report)
    assert (report.rows_read, report.rows_written) == (6, 6)
    assert +report.breakdown >= Counter({"finish_reason=solution": 4, "finish_reason=found_error": 1,
                                         "finish_reason=give_up": 1})
    phase2 = next(r for r in records if r["finish_reason"] == "found_error")
    assert phase2["labels"][-1] == 0.0  # the first error, kept from the step where labelling stopped
    # the same labelling walk, from the raw file and from the flattened file, gives the same chain
    raw = next(r for r in records if r["prompt"] == "How many seconds are in 7.8 minutes?")
    chains = [r for r in stepwise_train[0] if r["kind"] == "chain" and r["prompt"] == raw["prompt"]]
    assert [(c["completions"], c["labels"]) for c in chains] == [(raw["completions"], raw["labels"])]


@needs_shared
def test_real_math_shepherd_and_math_aps_samples():
    rows = read_rows(SAMPLES / "samples_math-shepherd.jsonl")
    records, report = convert_rows("math-shepherd", rows, "samples")
    check_written(records, report)
    assert (report.rows_read, report.rows_written) == (7, 7)
    for row, record in zip(rows, records):
        assert len(record["labels"]) == row["input"].count("ки")
        assert row["label"].startswith(record["prompt"])
    rows = read_rows(SAMPLES / "samples_math-aps.jsonl")
    records, report = convert_rows("math-aps", rows, "samples")
    check_written(records, report)
    assert (report.rows_read, report.rows_converted) == (3, 3)
    nodes = sum(len({n["solution_prefix"].rstrip() for n in row["reasoning_steps"]}) - 1 for row in rows)
    assert sum(v is not None for r in records for v in r["labels"]) == nodes  # every non-root node once


@needs_shared
@pytest.mark.parametrize("name, rows, no_error", [("gsm8k", 400, 193), ("math", 1000, 406)])
def test_real_processbench_counts_match_source_md(tmp_path, name, rows, no_error):
    report = convert("processbench", SHARED / "processbench" / f"{name}.json", tmp_path / "pb.jsonl")
    records = [json.loads(line) for line in (tmp_path / "pb.jsonl").read_text().splitlines()]
    check_written(records, report)
    assert (report.rows_read, report.rows_written) == (rows, rows)
    assert report.breakdown["rows without an error"] == no_error
    assert sum(r["first_error"] == -1 for r in records) == no_error
    for record in records:
        if record["first_error"] >= 0:
            assert record["labels"][record["first_error"]] == 0.0
            assert set(record["labels"][:record["first_error"]]) <= {1.0}
