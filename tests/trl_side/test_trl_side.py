"""prmkit against TRL 1.13's own PRM code, run in .venv-trl (scripts/setup_trl.sh); skipped, with the reason, where
that environment is absent (TRL 1.14 removed the PRMTrainer, so the default environment cannot hold it).

1. Tokenization: the rows of cases.py tokenized by TRL's PRMTrainer.tokenize_row and by prmkit's tokenize_chain,
   compared row by row. prmkit's output must equal what TRL's untruncated layout becomes under the differences the
   case names (cases.py), and each named difference must show; anything else is a failure.
2. A tiny PRM trained for a few steps by TRL's real PRMTrainer, read by prmkit's `trl` scorer format: its scores
   must equal P(label 1) that transformers alone computes at TRL's label positions, to 1e-5.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from cases import (  # noqa: E402
    COMPLETION_BUDGET,
    CUT_STEP_SHOWN,
    EMPTY_SPAN,
    EMPTY_STEP,
    EVAL_LAST_STEP,
    PROMPT_CUT,
    SEPARATOR_SHIFT,
    SOFT_LABEL,
    UNLABELLED_STEP,
    Case,
    cases,
    real_cases,
)
from side_envs import run_side_script  # noqa: E402
from tiny_models import build_tokenizer  # noqa: E402

from prmkit.tokenize import IGNORE_INDEX, TokenizedChain, encode, prompt_prefix, tokenize_chain  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRL_PYTHON = REPO / ".venv-trl" / "bin" / "python"
SCRIPTS = Path(__file__).parent
NO_LIMIT = 100_000  # prmkit's max_length where TRL's is None
TOL = 1e-5

pytestmark = pytest.mark.skipif(not TRL_PYTHON.is_file(),
                                reason="no TRL 1.13 environment (.venv-trl); create it with scripts/setup_trl.sh")


def _knows_trl_format() -> bool:
    from prmkit.scoring.formats import FORMATS

    return "trl" in FORMATS


def _has_trl_reader() -> bool:
    from prmkit.scoring import formats

    return hasattr(formats, "trl_tokenize_row")


def run_in_trl(script: str, payload, timeout: float = 240) -> dict:
    """tests/trl_side/SCRIPT in .venv-trl with `payload` as JSON on stdin; the JSON object it prints last."""
    return run_side_script(TRL_PYTHON, SCRIPTS / script, payload, timeout)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("trl-tokenizers")
    with_bos, without_bos = build_tokenizer(), build_tokenizer()
    without_bos.bos_token = None
    for name, tokenizer in (("bos", with_bos), ("nobos", without_bos)):
        tokenizer.save_pretrained(root / name)
    assert with_bos.bos_token_id is not None and without_bos.bos_token_id is None
    return {"bos": with_bos, "nobos": without_bos, "folders": {"bos": str(root / "bos"),
                                                               "nobos": str(root / "nobos")}}


@pytest.fixture(scope="module")
def trl_side(tokenizers) -> dict:
    """One run of TRL's code: "cases", each case with TRL's output for its settings and for its whole layout
    (untruncated, every step labelled), and "config_fields", the fields of TRL's PRMConfig."""
    folders = tokenizers["folders"]
    ready = [_with_fitted_length(case, tokenizers[case.tokenizer]) for case in cases() + real_cases()]
    payload = [case.trl_payload(folders) for case in ready] + [case.trl_payload(folders, whole=True)
                                                                 for case in ready]
    got = run_in_trl("trl_tokenize.py", payload)
    assert got["trl_version"] == "1.13.0"
    results = got["results"]
    return {"cases": [(case, results[i], results[len(ready) + i]) for i, case in enumerate(ready)],
            "config_fields": got["config_fields"]}


def _with_fitted_length(case: Case, tokenizer) -> Case:
    """A case whose max_length must end exactly at its fit_steps-th step of TRL's layout gets it here."""
    if case.fit_steps is None:
        return case
    sep = encode(tokenizer, case.separator)
    length = len(prompt_prefix(tokenizer)) + len(encode(tokenizer, case.row["prompt"]))
    length += sum(len(encode(tokenizer, step) + sep) for step in case.row["completions"][:case.fit_steps])
    return dataclasses.replace(case, max_length=length)


def prmkit_budget(case: Case, prompt_end: int, sep_length: int) -> int:
    """prmkit's one budget for TRL's two: max_length, or the prompt (with its separator) plus
    max_completion_length, whichever is smaller (COMPLETION_BUDGET)."""
    budgets = [NO_LIMIT]
    if case.max_length is not None:
        budgets.append(case.max_length)
    if case.max_completion_length is not None:
        budgets.append(prompt_end + sep_length + case.max_completion_length)
    return min(budgets)


def expected_from_trl(case: Case, whole: dict, tokenizer, budget: int) -> tuple[list[int], list[int], int]:
    """prmkit's ids, step positions and dropped prompt tokens as TRL's whole layout becomes under prmkit's rules:
    the separator after the prompt (PROMPT_SEPARATOR), whole steps only within `budget` (CUT_STEP_SHOWN,
    SEPARATOR_SHIFT), the prompt's start dropped when not even the first step fits (PROMPT_CUT)."""
    sep = encode(tokenizer, case.separator) if case.separator else []
    prefix = len(prompt_prefix(tokenizer))
    prompt_end = prefix + len(encode(tokenizer, case.row["prompt"]))
    ids = whole["input_ids"][:prompt_end] + sep + whole["input_ids"][prompt_end:]
    ends = [i + len(sep) for i, label in enumerate(whole["labels"]) if label != -100]
    drop = max(0, ends[0] + 1 - budget) if ends else 0
    kept = [end - drop for end in ends if end - drop < budget]
    ids = ids[:prefix] + ids[prefix + drop:]
    return ids[:kept[-1] + 1] if kept else ids[:prefix], kept, drop


def trl_positions(result: dict) -> list[int]:
    return [i for i, label in enumerate(result["labels"]) if label != -100]


@pytest.mark.parametrize("name", [case.name for case in cases() + real_cases()])
def test_same_ids_and_label_positions_as_trl_but_for_the_named_differences(name, trl_side, tokenizers):
    case, trl, whole = next(item for item in trl_side["cases"] if item[0].name == name)
    tokenizer = tokenizers[case.tokenizer]
    sep = encode(tokenizer, case.separator) if case.separator else []
    prefix = prompt_prefix(tokenizer)
    prompt_end = len(prefix) + len(encode(tokenizer, case.row["prompt"]))
    budget = prmkit_budget(case, prompt_end, len(sep))
    labels = case.row["labels"]
    ours = tokenize_chain(tokenizer, case.row["prompt"], case.row["completions"], labels, separator=case.separator,
                          max_length=budget, train_on_last_step_only=case.last_step_only)

    # BOS: both put the tokenizer's BOS first where it has one, and nothing where it has none.
    assert ours.input_ids[:len(prefix)] == prefix and (not prefix or ours.input_ids[0] == tokenizer.bos_token_id)

    if EMPTY_SPAN in case.differences:
        _empty_span(case, trl, ours, tokenizer)
        return
    assert whole["input_ids"][:len(prefix)] == prefix

    ids, positions, drop = expected_from_trl(case, whole, tokenizer, budget)
    assert ours.input_ids == ids, f"{name}: prmkit's ids are not TRL's layout with the separator after the prompt"
    assert ours.step_positions == positions
    assert ours.prompt_tokens_dropped == drop

    if UNLABELLED_STEP in case.differences:  # TRL: int(None) fails the row; prmkit: no label on that step
        assert trl["error"].startswith("TypeError"), trl
        unlabelled = [i for i, label in enumerate(labels) if label is None]
        assert all(ours.labels[ours.step_positions[i]] == IGNORE_INDEX for i in unlabelled)
        return

    # TRL truncates tokens: the completion to max_completion_length, then everything to max_length.
    cut = whole["input_ids"][:prompt_end] + whole["input_ids"][prompt_end:][:case.max_completion_length]
    assert trl["input_ids"] == cut[:case.max_length]
    theirs, shift = trl_positions(trl), len(sep)
    _check_named_differences(case, trl, theirs, ours, whole, prompt_end, shift)

    # Every step both label carries the same label in both (the same int for bools and 0/1)
    both = [(i, p) for i, p in enumerate(ours.step_positions) if ours.labels[p] != IGNORE_INDEX
            and p + drop - shift in theirs]
    for step, position in both:
        ours_value, theirs_value = ours.labels[position], trl["labels"][position + drop - shift]
        if SOFT_LABEL in case.differences:
            assert theirs_value == int(labels[step]) and ours_value == float(labels[step])
        else:
            assert theirs_value == ours_value, f"{name}: step {step}"
    if not ({PROMPT_CUT, EVAL_LAST_STEP, SEPARATOR_SHIFT} & set(case.differences)):
        labelled = [p for p in ours.step_positions if ours.labels[p] != IGNORE_INDEX]
        assert [p - shift for p in labelled] == theirs, f"{name}: not the same steps labelled"


def _check_named_differences(case: Case, trl: dict, theirs: list[int], ours: TokenizedChain, whole: dict,
                             prompt_end: int, sep_length: int) -> None:
    """Each difference the case names shows, exactly as cases.py describes it."""
    named = set(case.differences)
    whole_ends = trl_positions(whole)
    if CUT_STEP_SHOWN in named or COMPLETION_BUDGET in named:
        # TRL ends mid-step: tokens after its last label, the start of the next step, with no label;
        # prmkit's chain ends on its last step's label position.
        assert len(trl["input_ids"]) > theirs[-1] + 1
        assert trl["input_ids"] == whole["input_ids"][:len(trl["input_ids"])]
        assert len(trl["input_ids"]) < whole_ends[len(theirs)] + 1
        assert len(ours.input_ids) == ours.step_positions[-1] + 1 and ours.steps_dropped > 0
    if COMPLETION_BUDGET in named:
        # TRL: the steps' tokens cut at max_completion_length (then at max_length); prmkit: the whole steps that
        # fit in that many tokens after the prompt and its separator.
        assert len(trl["input_ids"]) - prompt_end == min(case.max_completion_length,
                                                         (case.max_length or NO_LIMIT) - prompt_end)
        assert len(ours.input_ids) - prompt_end - sep_length <= case.max_completion_length
    if SEPARATOR_SHIFT in named:
        # TRL's layout fits fit_steps steps exactly; prmkit's is one separator longer, so its last step is cut.
        assert len(theirs) == case.fit_steps and ours.steps_kept == case.fit_steps - 1
    if PROMPT_CUT in named:
        # TRL: the prompt's start fills max_length, no step, no label (a row with nothing to learn);
        # prmkit: the prompt's start dropped, BOS kept, steps that fit labelled.
        assert theirs == [] and len(trl["input_ids"]) == case.max_length
        assert ours.prompt_tokens_dropped > 0 and ours.steps_kept >= 1
    if EVAL_LAST_STEP in named:
        assert len(theirs) == len(case.row["completions"])
        assert [p for p in ours.step_positions if ours.labels[p] != IGNORE_INDEX] == ours.step_positions[-1:]
    if SOFT_LABEL in named:
        assert any(trl["labels"][p] != label for p, label in zip(theirs, case.row["labels"]))


def _empty_span(case: Case, trl: dict, ours: TokenizedChain, tokenizer) -> None:
    """An empty step with an empty separator has no token to carry its label. TRL still emits the label, so its
    labels list is longer than its ids and every later label sits one token early; prmkit stops at that step."""
    empty = case.row["completions"].index("")
    assert len(trl["labels"]) == len(trl["input_ids"]) + 1
    assert ours.steps_kept == empty and ours.steps_dropped == len(case.row["completions"]) - empty
    assert len(ours.labels) == len(ours.input_ids)


def test_trl_prm_config_has_no_max_prompt_length(trl_side):
    """TRL 1.13's PRMConfig takes max_length and max_completion_length; a max_prompt_length is refused there
    (a TypeError from the dataclass), and prmkit never cuts the prompt for its own sake either (PROMPT_CUT)."""
    fields = trl_side["config_fields"]
    assert {"max_length", "max_completion_length", "step_separator", "train_on_last_step_only"} <= set(fields)
    assert "max_prompt_length" not in fields


@pytest.mark.skipif(not _has_trl_reader(), reason="prmkit.scoring.formats has no trl_tokenize_row yet")
@pytest.mark.parametrize("name", [case.name for case in cases() + real_cases() if case.max_completion_length is None])
def test_trl_format_reads_chains_as_trl_tokenized_them(name, trl_side, tokenizers):
    """The `trl` scorer format's tokenization (prmkit's copy of TRL's, for PRMs TRL trained) is TRL's, with no
    difference at all: the same ids and the same label positions, cut to max_length as TRL cuts."""
    from prmkit.errors import PRMError
    from prmkit.scoring.formats import ChainReader

    case, trl, whole = next(item for item in trl_side["cases"] if item[0].name == name)
    tokenizer, reader = tokenizers[case.tokenizer], ChainReader("trl", step_separator=case.separator)
    prompt, steps = case.row["prompt"], case.row["completions"]
    if EMPTY_SPAN in case.differences:  # TRL would misplace every later label; the reader refuses the chain
        with pytest.raises(PRMError, match="no token"):
            reader.tokenize(tokenizer, prompt, steps, NO_LIMIT)
        return
    untruncated = reader.tokenize(tokenizer, prompt, steps, NO_LIMIT)
    assert (untruncated.input_ids, untruncated.step_positions) == (whole["input_ids"], trl_positions(whole))
    if case.max_length is not None and "error" not in trl:
        cut = reader.tokenize(tokenizer, prompt, steps, case.max_length)
        assert cut.input_ids == trl["input_ids"]
        assert cut.step_positions == [p for p in trl_positions(whole) if p < case.max_length]


@pytest.fixture(scope="module")
def trl_trained(tmp_path_factory, tokenizers) -> tuple[Path, list[dict], dict]:
    """A tiny PRM trained for 3 steps by TRL's PRMTrainer and saved as TRL saves it, the rows to score (a batch of
    different lengths, one chain longer than the tiny model's context) and transformers' reference scores."""
    from prmkit.data.synthetic import generate_records

    root = tmp_path_factory.mktemp("trl-trained")
    train = [_trl_row(r) for r in generate_records(16, seed=5)]
    score = [_trl_row(r) for r in generate_records(5, seed=6)]
    score.append({"prompt": "Add each number to itself.",
                  "completions": [f"Step {k}: {k} + {k} = {2 * k}." for k in range(1, 61)], "labels": [True] * 60})
    got = run_in_trl("trl_train.py", {"tokenizer": tokenizers["folders"]["bos"], "out": str(root / "prm"),
                                      "train": train, "score": score, "seed": 0, "max_steps": 3})
    return root / "prm", score, got


def _trl_row(record: dict) -> dict:
    return {"prompt": record["prompt"], "completions": record["completions"],
            "labels": [bool(label) for label in record["labels"]]}


def test_trl_trained_prm_folder_is_what_trl_saves(trl_trained):
    folder, _, got = trl_trained
    assert len(got["losses"]) == 3 and all(loss == loss for loss in got["losses"])  # trained, no NaN
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(got["saved"])
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForTokenClassification"]
    # transformers writes no id2label for the default two labels: a TRL PRM's folder says "two labels" by omission
    assert len(config.get("id2label", {0: "LABEL_0", 1: "LABEL_1"})) == 2


@pytest.mark.skipif(not _knows_trl_format(), reason="prmkit.scoring.formats has no 'trl' format yet")
def test_trl_format_scores_equal_transformers_at_trl_label_positions(trl_trained):
    from prmkit.scoring.scorer import PRMScorer

    folder, rows, got = trl_trained
    scorer = PRMScorer.from_pretrained(folder, prm_format="trl", device="cpu", batch_size=4)
    scores = scorer.score_many([(row["prompt"], row["completions"]) for row in rows])
    for index, (ours, reference, positions) in enumerate(zip(scores, got["scores"], got["positions"])):
        assert len(positions) == len(rows[index]["completions"])
        assert len(ours) == len(reference), f"row {index}: {len(ours)} scores for {len(reference)} steps"
        # A causal model's score at a position reads no later token, so a chain cut by max_length keeps the
        # scores of the steps it reads; the cut steps are None, and only at the end.
        read = [score for score in ours if score is not None]
        assert ours[:len(read)] == read, f"row {index}: a step without a score before a scored one"
        assert read, f"row {index}: no step scored"
        for step, (score, want) in enumerate(zip(read, reference)):
            assert abs(score - want) <= TOL, f"row {index}, step {step}: prmkit {score} vs transformers {want}"
    assert None in scores[-1], "the 60-step chain should be cut by the tiny model's context"


@pytest.mark.skipif(not _knows_trl_format(), reason="prmkit.scoring.formats has no 'trl' format yet")
def test_trl_trained_prm_is_detected_as_trl(trl_trained):
    from prmkit.scoring.formats import detect_format

    folder, _, _ = trl_trained
    assert detect_format(folder)[0] == "trl"


def _has_drop_in() -> bool:
    from importlib.util import find_spec

    return find_spec("prmkit.trl") is not None and find_spec("prmkit.trl.datasets") is not None


@pytest.mark.skipif(not _has_drop_in(), reason="prmkit.trl (the drop-in PRMTrainer) is not here yet")
@pytest.mark.parametrize("name", [case.name for case in cases() + real_cases()])
def test_drop_in_trainer_tokenizes_as_prmkit_with_trls_arguments(name, trl_side, tokenizers):
    """prmkit.trl's PRMTrainer takes TRL's arguments (max_completion_length cuts whole steps, then prmkit's
    tokenization with max_length); what it trains on must be what the comparison above expects of prmkit, and
    a row it drops must be one where TRL trains on no step."""
    from prmkit.trl.datasets import cut_completions, dataset_rows

    from prmkit.errors import PRMError

    case, trl, _ = next(item for item in trl_side["cases"] if item[0].name == name)
    blank = [i for i, step in enumerate(case.row["completions"]) if not step.strip()]
    assert bool(blank) == (EMPTY_STEP in case.differences)
    if blank:  # prmkit's record contract refuses a step with no text, naming it; TRL trains on it
        assert "error" not in trl and len(trl_positions(trl)) == len(case.row["completions"])
        with pytest.raises(PRMError, match=rf"row 1, field 'completions\[{blank[0]}\]': is an empty step"):
            dataset_rows([case.row], "train_dataset")
        return
    tokenizer = tokenizers[case.tokenizer]
    sep = encode(tokenizer, case.separator) if case.separator else []
    prompt_end = len(prompt_prefix(tokenizer)) + len(encode(tokenizer, case.row["prompt"]))
    rows, cut = cut_completions(dataset_rows([case.row], "train_dataset"), tokenizer, separator=case.separator,
                                limit=case.max_completion_length, last_step_only=case.last_step_only)
    expected = tokenize_chain(tokenizer, case.row["prompt"], case.row["completions"], case.row["labels"],
                              separator=case.separator, max_length=prmkit_budget(case, prompt_end, len(sep)),
                              train_on_last_step_only=case.last_step_only)
    if not rows:
        assert cut.rows_dropped == 1 and "error" not in trl and trl_positions(trl) == []
        return
    row = rows[0]
    got = tokenize_chain(tokenizer, row["prompt"], row["completions"], row["labels"], separator=case.separator,
                         max_length=case.max_length or NO_LIMIT, train_on_last_step_only=case.last_step_only)
    assert (got.input_ids, got.step_positions) == (expected.input_ids, expected.step_positions)
    assert [got.labels[p] for p in got.step_positions] == [expected.labels[p] for p in expected.step_positions]
