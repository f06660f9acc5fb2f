"""TRL's stepwise dataset recipes (prmkit.data.recipes, `prmkit data recipe`): hand-written rows with the exact rows
TRL's scripts make of them, the quirks included; the real rows in ../shared/data checked against prmkit's own
converters (two independent readings of the same files must agree where their choices do); the written folder read
back by `datasets` and by prmkit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prmkit.cli import main
from prmkit.data.convert import convert_rows
from prmkit.data.recipe_output import parse_inputs, run_recipe, trl_train_test_split
from prmkit.data.recipes import build, math_shepherd_row, prm800k_rows
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
SAMPLES = SHARED / "prm_format_samples"
STEPWISE = SHARED / "prm800k_phase1_stepwise"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "formats"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"real data folder {SHARED} is absent")


def shepherd(text: str, signs: str) -> dict:
    """A Math-Shepherd row: `text` with "ки" after each step, the label text with the signs in their place."""
    label = text
    for sign in signs:
        label = label.replace("ки", sign, 1)
    return {"input": text, "label": label, "task": "GSM8K"}


def test_math_shepherd_row_as_trl_splits_it():
    row = shepherd("Tom has 3 apples and buys 12. How many? Step 1: 3 + 12 = 15 ки\nStep 2: The answer is: 15 ки",
                   "+-")
    assert math_shepherd_row(row) == {"prompt": "Tom has 3 apples and buys 12. How many?",
                                      "completions": ["Step 1: 3 + 12 = 15", "Step 2: The answer is: 15"],
                                      "labels": [True, False]}
    # lowercase "step 1:", then the question mark when there is no step marker at all
    lower = shepherd("How many? step 1: 15 ки\nstep 2: done ки", "++")
    assert math_shepherd_row(lower)["completions"] == ["step 1: 15", "step 2: done"]
    by_question = shepherd("How many? 3 + 12 = 15 ки So 15 ки", "-+")
    assert math_shepherd_row(by_question) == {"prompt": "How many?", "completions": ["3 + 12 = 15", "So 15"],
                                              "labels": [False, True]}


def test_math_shepherd_misannotated_prompts_lose_their_first_label_as_in_trl():
    """TRL's list of prompts with a tag inside the problem: the first label is dropped and the text is left as
    split (the prompt is the text before the stray tag)."""
    row = shepherd("Parker has 4 ки boxes. How many? Step 1: 4 ки\nStep 2: 4 ки", "-++")
    assert math_shepherd_row(row) == {"prompt": "Parker has 4",
                                      "completions": ["boxes. How many? Step 1: 4", "Step 2: 4"],
                                      "labels": [True, True]}


def test_math_shepherd_rows_trls_script_stops_on_are_skipped_with_the_reason():
    rows = [shepherd("How many? Step 1: 15 ки", "+"),
            {"input": "How many? Step 1: 15", "label": "How many? Step 1: 15", "task": "GSM8K"},  # no tag
            {"input": "How many? Step 1: 15 ки", "label": "How many? Step 1: 15 x", "task": "GSM8K"},
            shepherd("Step 1: or Step 1: twice ки", "+"),
            shepherd("No marker and no question ки", "+")]
    records, report = build("math-shepherd", rows, "fixture")
    assert len(records) == 1 and report.rows_skipped == 4
    assert all("TRL's script stops here" in reason for reason in report.skipped)
    assert {reason.split(" (")[0] for reason in report.skipped} == {
        "no 'ки' step tag in input", "a 'ки' tag without '+' or '-' at its place in label",
        "'Step 1:' more than once before the first tag", "no 'Step 1:', 'step 1:' or '?' before the first tag"}


def completion(text: str, rating) -> dict:
    return {"text": text, "rating": rating, "flagged": False}


def prm800k(steps: list[dict], problem: str = "What is 2 + 3 - 2?") -> dict:
    return {"labeler": "x", "timestamp": "t", "generation": 1, "is_quality_control_question": False,
            "is_initial_screening_question": False, "question": {"problem": problem, "ground_truth_answer": "3"},
            "label": {"steps": steps, "total_time": 1, "finish_reason": "solution"}}


def test_prm800k_row_gives_a_row_per_other_candidate_then_the_chosen_path():
    row = prm800k([
        {"completions": [completion("2 + 3 = 5.", 1)], "human_completion": None, "chosen_completion": 0},
        {"completions": [completion("Hmm.", 0), completion("5 - 2 = 4.", -1), completion("Now subtract.", 1)],
         "human_completion": None, "chosen_completion": 2},
        {"completions": [completion("5 - 2 = 7.", -1), completion("5 - 2 = 1.", None)],
         "human_completion": {"text": "5 - 2 = 3.", "rating": None}, "chosen_completion": None},
        {"completions": [completion("So 3.", 1), completion("So 4.", -1)], "human_completion": None,
         "chosen_completion": None},
    ])
    prefix = ["2 + 3 = 5.", "Now subtract."]
    assert [(r["completions"], r["labels"]) for r in prm800k_rows(row)] == [
        (["2 + 3 = 5.", "Hmm."], [True, False]),  # the neutral 0 is False
        (["2 + 3 = 5.", "5 - 2 = 4."], [True, False]),
        (prefix + ["5 - 2 = 7."], [True, True, False]),
        (prefix + ["5 - 2 = 1."], [True, True, False]),  # an unrated candidate is False too
        (prefix + ["5 - 2 = 3.", "So 3."], [True, True, True, True]),  # the human step counts as True
        (prefix + ["5 - 2 = 3.", "So 4."], [True, True, True, False]),
        (prefix + ["5 - 2 = 3."], [True, True, True]),  # the chosen path ends the source row
    ]


def test_prm800k_row_with_nothing_chosen_first_gives_an_empty_row_as_trl_does():
    row = prm800k([{"completions": None, "human_completion": None, "chosen_completion": None}])
    assert prm800k_rows(row) == [{"prompt": "What is 2 + 3 - 2?", "completions": [], "labels": []}]
    records, report = build("prm800k", [row, prm800k([{"completions": None, "chosen_completion": None,
                                                       "human_completion": {"text": "3", "rating": None}}])], "fx")
    assert len(records) == 1 and list(report.skipped) == [
        "step 0 has a human completion but no completions list (TRL's script stops here)"]


def stepwise(prefix: list[str], text: str, preferred: bool, rating, human: bool = False, answer=None) -> dict:
    return {"instruction": "What is 2 + 3 - 2?", "responses": prefix, "next_response": text, "answer": answer,
            "is_human_response": human, "is_solution": False, "is_preferred_response": preferred, "rating": rating}


def test_stepwise_layout_gives_the_rows_the_raw_layout_gives():
    """The same labelling written both ways: raw (one row, candidates per step) and flattened (one row per
    candidate); the recipe makes the same rows of both, the order aside."""
    raw = prm800k([
        {"completions": [completion("2 + 3 = 5.", 1), completion("2 + 3 = 6.", -1)], "human_completion": None,
         "chosen_completion": 0},
        {"completions": [completion("5 - 2 = 4.", -1)], "human_completion": {"text": "5 - 2 = 3.", "rating": None},
         "chosen_completion": None},
        {"completions": [completion("So 3.\n\n# Answer\n\n3", 1)], "human_completion": None,
         "chosen_completion": 0},
    ])
    flat = [stepwise([], "2 + 3 = 5.", True, 1.0), stepwise([], "2 + 3 = 6.", False, -1.0),
            stepwise(["2 + 3 = 5."], "5 - 2 = 4.", False, -1.0),
            stepwise(["2 + 3 = 5."], "5 - 2 = 3.", True, None, human=True),
            stepwise(["2 + 3 = 5.", "5 - 2 = 3."], "So 3.", True, 1.0, answer="3")]
    from_raw, _ = build("prm800k", [raw], "raw")
    from_flat, report = build("prm800k", flat, "flat")
    assert sorted(map(json.dumps, from_raw)) == sorted(map(json.dumps, from_flat))
    assert report.rows_read == report.rows_converted == 5


def test_stepwise_walk_after_unrated_steps_is_skipped_and_counted():
    rows = [stepwise(["Earlier step."], "Next.", True, 1.0), stepwise(["Earlier step."], "Other.", False, -1.0)]
    records, report = build("prm800k", rows, "fx")
    assert records == [] and sum(report.skipped.values()) == 2


def test_fixture_files_build_and_every_row_has_bool_labels():
    for recipe, name in (("math-shepherd", "math_shepherd.jsonl"), ("prm800k", "prm800k.jsonl"),
                         ("prm800k", "prm800k_stepwise.jsonl")):
        records, report = build(recipe, read_rows(FIXTURES / name), name)
        assert records and report.rows_read == report.rows_converted + report.rows_skipped
        assert all(isinstance(label, bool) for r in records for label in r["labels"])
        assert all(len(r["completions"]) == len(r["labels"]) for r in records)


def test_wrong_layout_and_unknown_recipe_are_refused_with_the_fix():
    with pytest.raises(PRMError, match="build it with the math-shepherd recipe"):
        build("prm800k", read_rows(FIXTURES / "math_shepherd.jsonl"), "ms.jsonl")
    with pytest.raises(PRMError, match="use one of math-shepherd, prm800k"):
        parse_inputs("shepherd", [])
    with pytest.raises(PRMError, match="phase1_train.jsonl"):
        parse_inputs("prm800k", [])
    assert parse_inputs("math-shepherd", []) == {None: "peiyi9979/Math-Shepherd"}
    with pytest.raises(PRMError, match="row 1: not in the prm800k layout"):
        build("prm800k", [prm800k([{"completions": [{"rating": 1}], "chosen_completion": 0}])], "x.jsonl")


def test_split_is_datasets_train_test_split_with_trls_seed():
    from datasets import Dataset

    rows = [{"prompt": str(i), "completions": ["a"], "labels": [i % 2 == 0]} for i in range(40)]
    split = trl_train_test_split(rows, 0.05, 42)
    direct = Dataset.from_list(rows).train_test_split(test_size=0.05, seed=42)
    assert [r["prompt"] for r in split["test"]] == direct["test"]["prompt"] and len(split["test"]) == 2
    assert [r["prompt"] for r in split["train"]] == direct["train"]["prompt"]


def test_recipe_folder_reads_back_through_datasets_and_prmkit(tmp_path, monkeypatch, capsys):
    import datasets

    # A cache of its own: datasets keys a local folder's cache by the folder's name and card, not its files, so
    # another folder named alike (an earlier run's) would be read instead of this one.
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")

    source = tmp_path / "raw.jsonl"
    source.write_text((FIXTURES / "math_shepherd.jsonl").read_text() * 4)
    out = tmp_path / "ms"
    assert main(["data", "recipe", "math-shepherd", str(out), "--input", str(source), "--test-size", "0.25",
                 "--json", str(tmp_path / "report.json")]) == 0
    assert "hf upload OWNER/NAME" in capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    trl = datasets.load_dataset(str(out))
    assert trl["train"].features["labels"].feature.dtype == "bool"
    assert len(trl["train"]) + len(trl["test"]) == sum(report["rows"].values()) and len(trl["test"]) >= 1
    prmkit_rows = read_rows(f"{out}:prmkit#train")
    assert [r["completions"] for r in prmkit_rows] == [r["completions"] for r in trl["train"] if r["completions"]]
    assert all(isinstance(v, float) for r in prmkit_rows for v in r["labels"])
    card = (out / "README.md").read_text()
    assert "config_name: prmkit" in card and "path: data/test.parquet" in card


def test_recipe_layout_trl_only_and_named_splits(tmp_path):
    result = run_recipe("prm800k", [f"train={FIXTURES / 'prm800k.jsonl'}",
                                    f"test={FIXTURES / 'prm800k_stepwise.jsonl'}"], tmp_path / "p", layouts=["trl"])
    assert sorted(result.splits) == ["test", "train"] and not (tmp_path / "p" / "prmkit").exists()
    with pytest.raises(PRMError, match="drop them"):
        run_recipe("prm800k", [str(FIXTURES / "prm800k.jsonl")], tmp_path / "q", test_size=0.1)


# ---------------------------------------------------------------- the real files in ../shared/data

@needs_shared
def test_real_math_shepherd_rows_agree_with_prmkits_own_converter():
    """TRL's recipe and prmkit's math-shepherd converter are written apart; on the real rows both keep the
    'Step k:' prefixes and split at 'Step 1:', so they must give the same prompts, steps and labels."""
    rows = read_rows(SAMPLES / "samples_math-shepherd.jsonl")
    ours, report = build("math-shepherd", rows, "samples")
    theirs, _ = convert_rows("math-shepherd", rows, "samples")
    assert report.rows_converted == len(rows) == len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert (a["prompt"], a["completions"]) == (b["prompt"], b["completions"])
        assert [float(label) for label in a["labels"]] == b["labels"]


@needs_shared
def test_real_prm800k_chosen_paths_agree_with_prmkits_converter():
    """Each source row's last TRL row is its chosen path; prmkit's prm800k converter (neutral rated negative, as
    TRL's rating == 1 does) follows the same path and may add the phase-2 final step, so TRL's is its prefix."""
    rows = read_rows(SAMPLES / "samples_prm800k.jsonl")
    theirs, _ = convert_rows("prm800k", rows, "samples", neutral="negative")
    for row, converted in zip(rows, theirs):
        chain = prm800k_rows(row)[-1]
        assert chain["completions"] == converted["completions"][:len(chain["completions"])]
        assert [float(label) for label in chain["labels"]] == converted["labels"][:len(chain["labels"])]


@needs_shared
def test_real_stepwise_phase1_test_rows():
    """Every rated non-preferred candidate is one TRL row ending in it, labelled rating == 1; every walk ends with
    its preferred path, which is prmkit's stepwise converter's chain record (neutral negative)."""
    rows = read_rows(STEPWISE / "phase1_test.stepwise-critic.parquet")
    ours, report = build("prm800k", rows, "phase1_test")
    candidates = [r for r in rows if not r["is_preferred_response"] and not r["is_human_response"]]
    theirs, _ = convert_rows("prm800k-stepwise", rows, "phase1_test", neutral="negative")
    chains = [r for r in theirs if r["kind"] == "chain"]
    assert report.rows_skipped == 0
    # a walk with no preferred step has no chain record in prmkit's converter; TRL's recipe writes it empty
    assert len(ours) == len(candidates) + len(chains) + sum(1 for r in ours if not r["completions"])
    ends = {}
    for record in ours:
        if record["completions"]:
            ends.setdefault((record["prompt"], record["completions"][-1]), []).append(record["labels"][-1])
    for row in candidates[:500]:
        text = row["next_response"] + (f"\n\n# Answer\n\n{row['answer']}" if row.get("answer") else "")
        assert (row["rating"] == 1) in ends[(row["instruction"], text)]
    paths = [(r["prompt"], r["completions"], [float(v) for v in r["labels"]]) for r in ours if r["completions"]]
    for chain in chains:
        assert (chain["prompt"], chain["completions"], chain["labels"]) in paths
