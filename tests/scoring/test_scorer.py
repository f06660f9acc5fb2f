"""PRMScorer and `prmkit score`: the scorer reads chains exactly as training did, batching changes nothing, and the
file command keeps every row, in order."""

import json
import math
import re

import pytest
import torch

from prmkit.cli import main
from prmkit.data.synthetic import generate_records
from prmkit.device import resolve_device, resolve_dtype
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.scoring.aggregate import aggregate, chain_reward, rank_candidates
from prmkit.scoring.inputs import completion_text, prompt_text, split_steps
from prmkit.scoring.options import ScoreFileOptions
from prmkit.scoring.scorer import PRMScorer
from prmkit.tokenize import tokenize_records


@pytest.fixture(scope="module")
def run(tiny_run):
    return tiny_run


@pytest.fixture(scope="module")
def scorer(run):
    return PRMScorer.from_pretrained(run, device="cpu", batch_size=3)


def test_scorer_reads_chains_exactly_as_training_did(scorer):
    records = generate_records(6, seed=11)
    records.append({"prompt": " leading space", "completions": [" 5", "5 ", "ки", "x" * 400], "labels": [1, 0, 1, 1]})
    chains, _ = tokenize_records(scorer.tokenizer, records, separator=scorer.metadata.separator,
                                 max_length=scorer.metadata.max_length)
    assert len(chains) == len(records)
    for record, expected in zip(records, chains):
        got = scorer.tokenize(record["prompt"], record["completions"])
        assert got.input_ids == expected.input_ids
        assert got.step_positions == expected.step_positions
        assert got.steps_dropped == expected.steps_dropped
    assert chains[-1].steps_dropped == 1  # the long last step was cut in both pipelines


def test_batched_scores_equal_one_by_one(scorer):
    chains = [(r["prompt"], r["completions"]) for r in generate_records(7, seed=5)]
    chains.insert(2, ("What is 1 + 1?", ["1 + 1 = 2."]))  # short: padded inside a batch of long ones
    chains.append(("q?", []))  # no steps
    chains.append(("q?", ["1 + 1 = 2."] * 60))  # longer than max_length: later steps unscored
    assert len({len(scorer.tokenize(p, s).input_ids) for p, s in chains}) > 5
    batched = scorer.score_many(chains)
    for (prompt, steps), scores in zip(chains, batched):
        single = scorer.score(prompt, steps)
        assert len(scores) == len(steps)
        assert [s is None for s in scores] == [s is None for s in single]
        assert [s for s in scores if s is not None] == pytest.approx([s for s in single if s is not None], abs=1e-5)
    assert batched[-2] == [] and batched[-1][-1] is None and batched[-1][0] is not None


def test_adapter_merged_at_load_scores_like_the_adapter(run, scorer):
    unmerged = PRMScorer.from_pretrained(run, device="cpu", merge_adapter=False)
    assert hasattr(unmerged.model, "peft_config") and not hasattr(scorer.model, "peft_config")
    chain = ("Tom has 3 bags of 4 apples. How many apples?", ["3 * 4 = 12.", "He has 12 apples."])
    assert scorer.score(*chain) == pytest.approx(unmerged.score(*chain), abs=1e-5)


# The most a step score moves from fp32 to a bf16 backbone with the head in fp32: 0.0007 measured on the tiny run,
# against chain scores 0.53-0.58 apart by 0.0003-0.016 from their neighbours.
BF16_STEP_ERROR = 0.002


def test_intermediate_checkpoint_and_bf16_inference(run, scorer):
    chain = ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."])
    final = scorer.score(*chain)
    # checkpoint-2 is the last step: the same weights as the run folder
    assert PRMScorer.from_pretrained(run / "checkpoint-2", device="cpu").score(*chain) == pytest.approx(final, abs=1e-5)
    low = PRMScorer.from_pretrained(run, device="cpu", dtype="bf16")
    assert low.dtype == torch.bfloat16

    # best-of-N: 16 candidate solutions to one problem, ranked in fp32 and on the bf16 backbone
    candidates = [("What is 2 + 3?", [f"2 + 3 = {a}.", f"The answer is {a}."]) for a in range(16)]
    exact, rounded = scorer.score_many(candidates), low.score_many(candidates)
    assert all(s is not None for chain in exact + rounded for s in chain)
    errors = [abs(a - b) for x, y in zip(exact, rounded) for a, b in zip(x, y)]
    exact_chain = [aggregate(s, "min") for s in exact]
    rounded_chain = [aggregate(s, "min") for s in rounded]
    assert max(errors) <= BF16_STEP_ERROR
    # Every pair the fp32 scores set further apart than twice that error keeps its order in bf16. Most pairs (101
    # of 120 measured) are that far apart, so a bf16 that collapsed the ranking (ties, a shuffled order) fails here.
    apart = [(i, j) for i in range(16) for j in range(16) if exact_chain[i] - exact_chain[j] > 2 * BF16_STEP_ERROR]
    assert len(apart) >= 16 * 15 // 4
    assert all(rounded_chain[i] > rounded_chain[j] for i, j in apart)


def test_device_and_dtype_choice():
    cpu = torch.device("cpu")
    assert resolve_dtype(None, cpu) == torch.float32 and resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bf16", cpu) == torch.bfloat16 and resolve_dtype(torch.float16, cpu) == torch.float16
    with pytest.raises(PRMError, match="dtype='int8'.*auto, fp32, bf16 or fp16"):
        resolve_dtype("int8", cpu)
    if not torch.cuda.is_available():
        with pytest.raises(PRMError, match="no CUDA GPU"):
            resolve_device("cuda")
        assert resolve_dtype(None, torch.device("cuda")) in (torch.bfloat16, torch.float16)


def test_split_steps():
    assert split_steps("a\n\nb\n\n\nc\n\n", "\n\n") == ["a", "b", "c"]
    assert split_steps("Step 1: x. Step 2: y.", re.compile(r"(?=Step \d+:)")) == ["Step 1: x.", "Step 2: y."]
    assert split_steps("   \n\n ", "\n\n") == [] and split_steps("one", "") == ["one"]


def test_score_text_splits_at_the_run_separator(scorer):
    prompt = "What is 2 + 3?"
    assert scorer.split_steps("2 + 3 = 5.\n\nThe answer is 5.") == ["2 + 3 = 5.", "The answer is 5."]
    assert scorer.score_text(prompt, "2 + 3 = 5.\n\nThe answer is 5.\n\n") == \
        pytest.approx(scorer.score(prompt, ["2 + 3 = 5.", "The answer is 5."]), abs=1e-6)
    assert scorer.score_text(prompt, "2 + 3 = 5. | 5", separator=re.compile(r"\s*\|\s*")) == \
        pytest.approx(scorer.score(prompt, ["2 + 3 = 5.", "5"]), abs=1e-6)


def test_aggregations():
    scores = [0.5, None, 0.25, 1.0]
    expected = {"min": 0.25, "max": 1.0, "mean": 1.75 / 3, "last": 1.0, "prod": 0.125, "geometric_mean": 0.5}
    for how, value in expected.items():
        assert aggregate(scores, how) == pytest.approx(value)
    assert aggregate([None], "min") is None and aggregate([], "mean") is None
    with pytest.raises(PRMError, match="unknown aggregation 'median'"):
        aggregate([0.5], "median")


def test_rank_candidates_ties_and_unscored():
    ranked = rank_candidates([[0.9, 0.2], [None], [0.3, 0.8], [0.7, 0.3], []], "min")
    # min scores: 0.2, None, 0.3, 0.3, None -> the 0.3 tie keeps input order, unscored last
    assert [c.index for c in ranked] == [2, 3, 0, 1, 4]
    assert [c.rank for c in ranked] == [0, 1, 2, 3, 4]
    assert ranked[0].score == 0.3 and ranked[-1].score is None and ranked[0].step_scores == [0.3, 0.8]


def test_a_cut_or_nan_candidate_never_wins():
    # under "last" the cut chain would be judged by a middle step (0.9) and beat the whole one (0.7)
    assert rank_candidates([[0.9, 0.8, 0.7], [0.95, 0.9, None]], "last")[0].index == 0
    ranked = rank_candidates([[0.95, None], [0.2, 0.3], [float("nan"), 0.9], [0.5, None], [None]], "min")
    assert [c.index for c in ranked] == [1, 0, 3, 2, 4] and [c.truncated for c in ranked] == [
        False, True, True, False, True]
    assert [c.index for c in rank_candidates([[0.95, None], [0.2, 0.3]], "min", truncated="kept")] == [0, 1]
    for order in ([0.5, float("nan")], [float("nan"), 0.5]):  # min/max alone would depend on the order
        assert math.isnan(aggregate(order, "min")) and math.isnan(aggregate(order, "max"))
    assert chain_reward([0.9, float("nan")], "mean", floor=-1.0) == -1.0
    assert chain_reward([0.9, float("inf")], "mean", floor=-1.0) == -1.0  # an infinity is a numeric failure too
    assert chain_reward([0.9, float("-inf")], "min", floor=-1.0) == -1.0
    with pytest.raises(PRMError, match="truncated='drop'"):
        rank_candidates([[0.5]], "min", truncated="drop")


def test_bf16_backbone_keeps_distinct_scores_distinct(run, scorer):
    """The head runs in fp32 whatever the backbone's dtype: candidates whose fp32 scores differ must not tie."""
    low = PRMScorer.from_pretrained(run, device="cpu", dtype="bf16")
    assert next(low.model.model.parameters()).dtype == torch.bfloat16 and low.model.score.weight.dtype == torch.float32
    chains = [("What is 2 + 3?", ["2 + 3 = 5.", f"The answer is {n}."]) for n in range(40)]
    full, half = scorer.score_many(chains), low.score_many(chains)
    assert len({round(s[-1], 9) for s in half}) == len({round(s[-1], 9) for s in full}) == 40
    assert [s[-1] for s in half] == pytest.approx([s[-1] for s in full], abs=0.03)


def test_best_of_n_on_a_run(scorer):
    prompt = "Tom has 3 bags of 4 apples. How many apples?"
    candidates = ["3 * 4 = 12.\n\nHe has 12 apples.", ["3 * 4 = 13.", "He has 13 apples."], "   "]
    ranked = scorer.best_of_n(prompt, candidates, aggregate="mean")
    assert sorted(c.index for c in ranked) == [0, 1, 2] and ranked[-1].index == 2 and ranked[-1].score is None
    first = next(c for c in ranked if c.index == 0)
    assert first.text == candidates[0] and first.steps == ["3 * 4 = 12.", "He has 12 apples."]
    assert first.step_scores == pytest.approx(scorer.score(prompt, first.steps), abs=1e-5)
    assert first.score == pytest.approx(sum(first.step_scores) / 2)
    assert ranked[0].score >= ranked[1].score


def test_chat_messages_to_text():
    assert prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]) == "2+2?"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "4."}]}]) == "4."
    assert completion_text([]) == "" and prompt_text("plain") == "plain"
    with pytest.raises(PRMError, match="messages"):
        prompt_text(42)


def test_cli_score_records_and_candidates(run, scorer, tmp_path, capsys):
    records = generate_records(5, seed=8)
    records.append({"prompt": "What is 2 + 2?", "completion": "2 + 2 = 4.\n\nThe answer is 4."})
    write_jsonl(records, tmp_path / "records.jsonl")
    assert main(["score", str(run), str(tmp_path / "records.jsonl"), str(tmp_path / "out.jsonl"),
                 "--device", "cpu", "--chunk-rows", "2", "--aggregate", "last"]) == 0
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in out] == [r["prompt"] for r in records]
    assert out[0]["labels"] == records[0]["labels"] and out[0]["first_error"] == records[0]["first_error"]
    assert out[0]["step_scores"] == pytest.approx(scorer.score(records[0]["prompt"], records[0]["completions"]),
                                                  abs=1e-5)
    assert out[0]["score"] == [s for s in out[0]["step_scores"] if s is not None][-1]
    assert out[-1]["steps"] == ["2 + 2 = 4.", "The answer is 4."] and len(out[-1]["step_scores"]) == 2

    rows = [{"prompt": "What is 2 + 2?", "candidates": ["2 + 2 = 4.", ["2 + 2 = 5.", "So 5."]], "id": 7},
            {"prompt": "What is 3 + 3?", "candidates": [["3 + 3 = 6."], ["3 + 3 = 7."], ["6"]]}]
    write_jsonl(rows, tmp_path / "cands.jsonl")
    assert main(["score", str(run), str(tmp_path / "cands.jsonl"), str(tmp_path / "cands_out.jsonl"),
                 "--device", "cpu"]) == 0
    scored = [json.loads(line) for line in (tmp_path / "cands_out.jsonl").read_text().splitlines()]
    assert len(scored) == 2 and scored[0]["id"] == 7 and scored[0]["candidate_steps"][0] == ["2 + 2 = 4."]
    assert [len(s) for s in scored[1]["step_scores"]] == [1, 1, 1] and len(scored[1]["scores"]) == 3
    assert scored[1]["best"] == max(range(3), key=lambda i: (scored[1]["scores"][i], -i))
    assert "rows" in capsys.readouterr().out
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_score_bad_row_fails_cleanly(run, tmp_path, capsys):
    write_jsonl([{"prompt": "q", "completions": ["a"]}, {"question": "q"}], tmp_path / "bad.jsonl")
    assert main(["score", str(run), str(tmp_path / "bad.jsonl"), str(tmp_path / "out.jsonl"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl: row 2: no 'prompt'" in err
    assert not (tmp_path / "out.jsonl").exists() and not list(tmp_path.glob(".*.tmp"))


def test_a_runaway_chain_gets_a_forward_pass_of_its_own(run, scorer):
    """One long chain among short ones (an RL group with a runaway sample) must not pad the others to its length."""
    short = [("What is 2 + 3?", ["2 + 3 = 5.", f"The answer is {n}."]) for n in range(7)]
    runaway = ("What is 2 + 3?", ["2 + 3 = 5."] * 40)
    wide = PRMScorer(scorer.model, scorer.tokenizer, scorer.metadata, device="cpu", batch_size=8)
    shapes = []
    hook = wide.model.register_forward_hook(
        lambda module, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    scores = wide.score_many(short + [runaway])
    hook.remove()
    longest = len(wide.tokenize(*runaway).input_ids)
    assert sorted(shapes) == sorted([(7, max(len(wide.tokenize(*c).input_ids) for c in short)), (1, longest)])
    for got, chain in zip(scores, short + [runaway]):
        assert got == pytest.approx(wide.score(*chain), abs=1e-5)


def test_max_batch_tokens_bounds_every_forward_pass(run):
    scorer = PRMScorer.from_pretrained(run, device="cpu", batch_size=8, max_batch_tokens=400)
    chains = [(r["prompt"], r["completions"]) for r in generate_records(10, seed=12)]
    shapes = []
    hook = scorer.model.register_forward_hook(
        lambda module, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    capped = scorer.score_many(chains)
    hook.remove()
    assert all(rows * length <= 400 or rows == 1 for rows, length in shapes), shapes
    assert len(shapes) > 2 and sum(rows for rows, _ in shapes) == len(chains)  # 10 chains of 8 would be 2 batches
    scorer.max_batch_tokens = None
    uncapped = scorer.score_many(chains)
    for a, b in zip(capped, uncapped):
        assert a == pytest.approx(b, abs=1e-5)
    with pytest.raises(PRMError, match="max_batch_tokens=0"):
        PRMScorer.from_pretrained(run, device="cpu", max_batch_tokens=0)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_score_file_with_a_progress_bar_counts_every_row(scorer, tmp_path, capsys, suffix):
    from prmkit.scoring.score_file import score_file

    rows = generate_records(5, seed=13)
    source = tmp_path / f"in{suffix}"
    if suffix == ".json":
        source.write_text(json.dumps(rows))
    else:
        write_jsonl(rows, source)
    result = score_file(scorer, source, tmp_path / "out.jsonl", ScoreFileOptions(chunk_rows=2), progress=True)
    assert result.rows == 5 and result.ranks == 1
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 5
    assert "5 rows" in capsys.readouterr().err  # the bar's final state names the rows scored
