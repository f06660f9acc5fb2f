import torch

from prmkit.tokenize import IGNORE_INDEX, StepCollator, encode, tokenize_chain, tokenize_records

SEP = "\n\n"


def test_layout_positions_and_labels(tokenizer):
    steps = ["3 + 4 = 7.", "The answer is 7."]
    chain = tokenize_chain(tokenizer, "What is 3 + 4?", steps, [1.0, 0.0], separator=SEP, max_length=128)
    sep = encode(tokenizer, SEP)
    expected = ([tokenizer.bos_token_id] + encode(tokenizer, "What is 3 + 4?") + sep
                + encode(tokenizer, steps[0]) + sep + encode(tokenizer, steps[1]) + sep)
    assert chain.input_ids == expected
    prompt_and_sep = 1 + len(encode(tokenizer, "What is 3 + 4?")) + len(sep)
    first_end = prompt_and_sep + len(encode(tokenizer, steps[0])) + len(sep) - 1
    assert chain.step_positions == [first_end, len(expected) - 1]
    # every step position ends with the separator, and only step positions carry labels
    for position in chain.step_positions:
        assert chain.input_ids[position - len(sep) + 1: position + 1] == sep
    labelled = [i for i, x in enumerate(chain.labels) if x != IGNORE_INDEX]
    assert labelled == chain.step_positions
    assert [chain.labels[p] for p in chain.step_positions] == [1.0, 0.0]


def test_every_step_gets_a_position_even_when_text_tokenizes_oddly(tokenizer):
    # steps with leading spaces / no trailing punctuation would defeat a search for separator tokens
    steps = [" 5", "5 ", "  five\t", "ки", "x"]
    chain = tokenize_chain(tokenizer, "q", steps, [1, 0, 1, 0, 1], separator=SEP, max_length=512)
    assert chain.steps_kept == len(steps) and len(set(chain.step_positions)) == len(steps)


def test_unlabelled_steps_get_positions_but_no_labels(tokenizer):
    chain = tokenize_chain(tokenizer, "q", ["a", "b", "c"], [1.0, None, 0.0], separator=SEP, max_length=64)
    assert [chain.labels[p] for p in chain.step_positions] == [1.0, IGNORE_INDEX, 0.0]


def test_truncation_drops_whole_steps_and_never_labels_a_cut_step(tokenizer):
    steps = ["1 + 1 = 2.", "2 + 2 = 4.", "4 + 4 = 8.", "8 + 8 = 16."]
    full = tokenize_chain(tokenizer, "Add.", steps, [1, 1, 0, 0], separator=SEP, max_length=512)
    limit = full.step_positions[1] + 3  # room for two steps and part of the third
    chain = tokenize_chain(tokenizer, "Add.", steps, [1, 1, 0, 0], separator=SEP, max_length=limit)
    assert len(chain.input_ids) <= limit
    assert chain.steps_kept == 2 and chain.steps_dropped == 2
    assert chain.input_ids == full.input_ids[:full.step_positions[1] + 1]  # exactly two whole steps
    assert sum(x != IGNORE_INDEX for x in chain.labels) == 2


def test_prompt_is_left_truncated_keeping_bos(tokenizer):
    prompt = " ".join(["apples"] * 100) + " END"
    chain = tokenize_chain(tokenizer, prompt, ["1 + 1 = 2."], [1], separator=SEP, max_length=30)
    assert len(chain.input_ids) <= 30 and chain.prompt_tokens_dropped > 0
    assert chain.input_ids[0] == tokenizer.bos_token_id
    end_ids = encode(tokenizer, " END") + encode(tokenizer, SEP)
    assert end_ids[-1] in chain.input_ids  # the end of the prompt (nearest the steps) is what is kept
    assert chain.steps_kept == 1


def test_train_on_last_step_only(tokenizer):
    chain = tokenize_chain(tokenizer, "q", ["a", "b", "c"], [1, 1, 0], separator=SEP, max_length=64,
                           train_on_last_step_only=True)
    assert [chain.labels[p] for p in chain.step_positions] == [IGNORE_INDEX, IGNORE_INDEX, 0.0]
    # when the last step is truncated away there is nothing to learn from the row: it is dropped and counted
    long_last = ["a", "b", "c " * 80]
    kept, stats = tokenize_records(tokenizer, [{"prompt": "q", "completions": long_last, "labels": [1, 1, 0]}],
                                   separator=SEP, max_length=32, train_on_last_step_only=True)
    assert kept == [] and stats.rows_dropped == 1 and stats.steps_dropped == 3


def test_drop_counts_and_reasons(tokenizer):
    records = [
        {"prompt": "q", "completions": ["a", "b"], "labels": [1, 0]},
        {"prompt": "q", "completions": ["x " * 100], "labels": [1]},  # first step alone is too long
        {"prompt": "q", "completions": ["a", "b " * 100], "labels": [None, 0]},  # only labelled step is cut
    ]
    kept, stats = tokenize_records(tokenizer, records, separator=SEP, max_length=40)
    assert len(kept) == 1
    assert stats.rows == 3 and stats.rows_dropped == 2
    assert stats.steps_dropped == 1 + 2
    assert stats.drop_reasons == {"first step longer than max_length": 1, "no labelled step within max_length": 1}


def test_collator_keeps_float_labels_and_mask(tokenizer):
    records = [{"prompt": "q", "completions": ["a", "b"], "labels": [0.3, None]},
               {"prompt": "a longer question here", "completions": ["a", "b", "c"], "labels": [1, 0, 0.7]}]
    chains, _ = tokenize_records(tokenizer, records, separator=SEP, max_length=64)
    batch = StepCollator(tokenizer.pad_token_id)([{"input_ids": c.input_ids, "labels": c.labels} for c in chains])
    assert batch["labels"].dtype == torch.float32 and batch["input_ids"].dtype == torch.long
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    row0 = batch["labels"][0]
    assert torch.isclose(row0[chains[0].step_positions[0]], torch.tensor(0.3))
    assert row0[chains[0].step_positions[1]] == IGNORE_INDEX  # unlabelled stays masked, not cast to 0/True
    assert (row0[len(chains[0].input_ids):] == IGNORE_INDEX).all()  # padding is never a target
    assert batch["attention_mask"][0].sum() == len(chains[0].input_ids)
    assert torch.isclose(batch["labels"][1][chains[1].step_positions[2]], torch.tensor(0.7))
