"""Property-based tests over records and tokenization (hypothesis).

Every generated file of rows either validates, and then each record tokenizes within the contract (positions in
range and increasing, one per kept step, labels exactly there, length <= max_length, kept + dropped == steps),
or raises PRMError naming exactly the invalid rows. Generated rows are valid records, or valid records broken
in one known way, so the test knows which rows must be reported.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis, a dev dependency: pip install hypothesis")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_models import build_tokenizer

from prmkit.data.io import load_records
from prmkit.data.records import validate_records
from prmkit.errors import PRMError
from prmkit.tokenize import IGNORE_INDEX, encode, prompt_prefix, tokenize_chain, tokenize_records

TOKENIZER = build_tokenizer()  # module level: hypothesis forbids function-scoped fixtures in @given tests
SETTINGS = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

# Text the tokenizer must cope with: the corpus alphabet, newlines, separators, and any other Unicode.
WORDS = st.sampled_from(["What", "is", "3", "+", "4", "=", "7.", "ки", "\n", "\n\n", " ", "\t", "Step", "42", "<s>",
                         "</s>", "é", "数", "😀", "\x00", "\u200b"])
TEXT = st.one_of(st.lists(WORDS, min_size=1, max_size=12).map("".join), st.text(min_size=1, max_size=40))
VISIBLE_TEXT = TEXT.filter(lambda s: s.strip())
SEPARATORS = st.sampled_from(["\n\n", "\n", " ки\n", "", "<sep>", " ", "ки"])
BINARY_LABEL = st.one_of(st.booleans(), st.sampled_from([0, 1]), st.floats(0.0, 1.0), st.none())
TERNARY_LABEL = st.sampled_from([-1, 0, 1, None])
# Labels invalid under either scheme (never -1: that switches the whole file to ternary).
BAD_LABELS = st.sampled_from(["yes", "1", 2, -2, 1.5, -0.5, math.nan, math.inf, -math.inf, [1], {"a": 1}, 10 ** 400])
MUTATIONS = ["not_object", "missing_key", "prompt_type", "prompt_blank", "completions_type", "completions_empty",
             "blank_step", "length_mismatch", "bad_label", "labels_type", "surrogate"]


@st.composite
def valid_row(draw, ternary: bool):
    steps = draw(st.lists(VISIBLE_TEXT, min_size=1, max_size=6))
    labels = draw(st.lists(TERNARY_LABEL if ternary else BINARY_LABEL, min_size=len(steps), max_size=len(steps)))
    return {"prompt": draw(VISIBLE_TEXT), "completions": steps, "labels": labels}


@st.composite
def broken_row(draw, ternary: bool):
    row = draw(valid_row(ternary))
    kind = draw(st.sampled_from(MUTATIONS))
    steps = row["completions"]
    if kind == "not_object":
        return draw(st.sampled_from([[1, 2], "text", 3, None, True]))
    if kind == "missing_key":
        del row[draw(st.sampled_from(["prompt", "completions", "labels"]))]
    elif kind == "prompt_type":
        row["prompt"] = draw(st.sampled_from([None, 7, ["a"], {"text": "q"}]))
    elif kind == "prompt_blank":
        row["prompt"] = draw(st.sampled_from(["", " ", "\n\t "]))
    elif kind == "completions_type":
        row["completions"] = draw(st.sampled_from(["one step", [1, 2], ["ok", None], {"0": "a"}]))
    elif kind == "completions_empty":
        row["completions"], row["labels"] = [], []
    elif kind == "blank_step":
        steps[draw(st.integers(0, len(steps) - 1))] = draw(st.sampled_from(["", "  ", "\n\n"]))
    elif kind == "length_mismatch":
        row["labels"] = row["labels"] + [1] if draw(st.booleans()) or len(steps) == 1 else row["labels"][:-1]
    elif kind == "bad_label":
        row["labels"][draw(st.integers(0, len(steps) - 1))] = draw(BAD_LABELS)
    elif kind == "labels_type":
        row["labels"] = draw(st.sampled_from(["1,0", 1, {"0": 1}]))
    elif kind == "surrogate":  # half of a UTF-16 pair, as a JSON "\ud83d" escape decodes
        target = draw(st.sampled_from(["prompt", "step"]))
        if target == "prompt":
            row["prompt"] += "\ud83d"
        else:
            steps[draw(st.integers(0, len(steps) - 1))] += "\udc00"
    return row


@st.composite
def row_files(draw):
    """(rows, 1-based numbers of the rows that must be reported)."""
    ternary = draw(st.booleans())
    broken = draw(st.lists(st.booleans(), min_size=1, max_size=8))
    rows = [draw(broken_row(ternary) if bad else valid_row(ternary)) for bad in broken]
    return rows, {i + 1 for i, bad in enumerate(broken) if bad}


def write_rows(rows, folder: str) -> Path:
    path = Path(folder) / "rows.jsonl"
    # allow_nan: NaN/Infinity are what other tools write for a missing float; the reader must cope
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@SETTINGS
@given(row_files())
def test_rows_validate_or_prmerror_names_exactly_the_bad_rows(generated):
    rows, bad = generated
    with tempfile.TemporaryDirectory() as folder:
        path = write_rows(rows, folder)
        if not bad:
            records, report = load_records(path)
            assert report.rows_kept == len(rows) == len(records)
            for record in records:
                assert len(record["labels"]) == len(record["completions"]) >= 1
                assert all(x is None or 0.0 <= x <= 1.0 for x in record["labels"])
            return
        with pytest.raises(PRMError) as caught:
            load_records(path)
        message = str(caught.value)
        assert f"{len(bad)} of {len(rows)} rows are invalid" in message
        reported = {int(line.split("row ")[1].split(",")[0]) for line in message.splitlines() if ": row " in line}
        assert reported == bad
        # the same rows are the ones dropped (and counted) with skip_invalid
        records, report = load_records(path, skip_invalid=True)
        assert len(records) == report.rows_kept == len(rows) - len(bad)
        assert {p.row for p in report.problems} == bad


def check_chain(chain, prompt, steps, labels, separator, max_length, last_only):
    ids = chain.input_ids
    assert len(ids) <= max_length
    assert chain.steps_kept + chain.steps_dropped == len(steps)
    assert len(chain.step_positions) == chain.steps_kept and len(chain.labels) == len(ids)
    assert all(0 <= p < len(ids) for p in chain.step_positions)
    assert all(a < b for a, b in zip(chain.step_positions, chain.step_positions[1:]))
    prefix = prompt_prefix(TOKENIZER)
    assert ids[:len(prefix)] == prefix
    sep = encode(TOKENIZER, separator)
    spans = [encode(TOKENIZER, s) + sep for s in steps]
    # the kept steps are the first ones, each span ends exactly at its position
    previous = chain.step_positions[0] - len(spans[0]) if spans and chain.step_positions else None
    for index, position in enumerate(chain.step_positions):
        assert ids[position - len(spans[index]) + 1: position + 1] == spans[index]
        assert position - len(spans[index]) == previous
        previous = position
    if chain.steps_dropped:  # a step is dropped only when it does not fit
        assert len(ids) + len(spans[chain.steps_kept]) > max_length
    expected = [IGNORE_INDEX] * len(ids)
    for index, position in enumerate(chain.step_positions):
        if labels[index] is not None and (not last_only or index == len(steps) - 1):
            expected[position] = float(labels[index])
    assert chain.labels == expected
    if chain.prompt_tokens_dropped == 0 and chain.steps_kept:
        assert ids[len(prefix):len(prefix) + len(encode(TOKENIZER, prompt))] == encode(TOKENIZER, prompt)


@SETTINGS
@given(st.booleans().flatmap(lambda ternary: st.lists(valid_row(ternary), min_size=1, max_size=5)), SEPARATORS,
       st.integers(9, 160), st.booleans())
def test_valid_records_tokenize_within_the_contract(rows, separator, max_length, last_only):
    records, _ = validate_records(rows, "generated")
    for record in records:
        chain = tokenize_chain(TOKENIZER, record["prompt"], record["completions"], record["labels"],
                               separator=separator, max_length=max_length, train_on_last_step_only=last_only)
        check_chain(chain, record["prompt"], record["completions"], record["labels"], separator, max_length,
                    last_only)
    chains, stats = tokenize_records(TOKENIZER, records, separator=separator, max_length=max_length,
                                     train_on_last_step_only=last_only)
    assert stats.rows == len(records) and len(chains) + stats.rows_dropped == len(records)
    assert stats.steps == sum(len(r["completions"]) for r in records)
    assert stats.labelled_steps == sum(sum(x != IGNORE_INDEX for x in c.labels) for c in chains)
    assert sum(stats.drop_reasons.values()) == stats.rows_dropped
    assert all(any(x != IGNORE_INDEX for x in c.labels) for c in chains)


@SETTINGS
@given(VISIBLE_TEXT, st.lists(VISIBLE_TEXT, min_size=1, max_size=4), SEPARATORS, st.integers(-2, 8))
def test_max_length_too_small_for_any_step_is_a_clear_error_or_within_bounds(prompt, steps, separator, max_length):
    try:
        chain = tokenize_chain(TOKENIZER, prompt, steps, None, separator=separator, max_length=max_length)
    except ValueError as err:
        assert "max_length" in str(err)
        return
    check_chain(chain, prompt, steps, [None] * len(steps), separator, max_length, False)
