"""`label_file` with a scripted policy: rollout counts, batching, labels against the synthetic truth, resuming,
provenance, the budget and bad input."""

from __future__ import annotations

import json
import math

import pytest
from fake_policy import MARK, FakePolicy

from prmkit.data.problems import derive_seed
from prmkit.data.records import validate_records
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.generation.base import Sample
from prmkit.generation.options import GenerationOptions
from prmkit.labeling import LabelOptions, label_file

K = 4


@pytest.fixture(scope="module")
def records():
    rows = generate_records(9, seed=11)
    assert {r["first_error"] == -1 for r in rows} == {True, False}  # both kinds occur
    return rows


@pytest.fixture
def data(tmp_path, records):
    path = tmp_path / "problems.jsonl"
    write_jsonl(records, path)
    return path


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_mc_rollouts_batching_and_labels(data, records, tmp_path):
    policy = FakePolicy(records, good=1)
    result = label_file(policy, data, tmp_path / "out.jsonl", LabelOptions(k=K, problems_per_batch=4))
    out = read(tmp_path / "out.jsonl")
    assert [r["row"] for r in out] == list(range(1, 10))
    expected_rollouts = sum((len(r["completions"]) - 1) * K for r in records)
    assert result.rollouts == expected_rollouts == sum(r["label"]["rollouts"] for r in out)
    assert len(policy.calls) == 3  # one generate call per batch of 4, 4, 1 problems: mc needs one round
    for call, batch in zip(policy.calls, (records[0:4], records[4:8], records[8:9])):
        assert call["n"] == K and call["stop"] == () and call["max_new_tokens"] == 32
        assert len(call["prompts"]) == sum(len(r["completions"]) - 1 for r in batch)
    for record, truth in zip(out, records):
        e, n = truth["first_error"], len(truth["completions"])
        clean = [1 / K if (e == -1 or i + 1 <= e) else 0.0 for i in range(n - 1)]
        assert record["values"] == clean + [float(e == -1)]
        assert record["labels"] == record["values"]  # mc's labels are soft by default
        assert record["hard"] == [int(v > 0) for v in record["values"]]
        assert record["correct"] == (e == -1) and record["gold_answer"] == truth["gold_answer"]
        assert record["label"]["tokens"] == sum(len("Going on from here. The answer is \\boxed{0}.".split())
                                                for _ in range((n - 1) * K))
    validate_records(out, "out.jsonl")  # the output is training data as it stands


def test_mc_prefix_ends_with_the_delimiter_and_seeds_follow_batch_and_round(data, records, tmp_path):
    policy = FakePolicy(records)
    label_file(policy, data, tmp_path / "out.jsonl", LabelOptions(k=K, problems_per_batch=4))
    first = records[0]
    assert policy.calls[0]["prompts"][0] == policy.prompt(first["prompt"], first["completions"][0] + "\n\n")
    assert [c["seed"] for c in policy.calls] == [derive_seed(5, "rollouts", b, 0) for b in range(3)]


def test_omega_labels_equal_the_synthetic_truth_at_log2_cost(data, records, tmp_path):
    policy = FakePolicy(records, good=1)
    result = label_file(policy, data, tmp_path / "out.jsonl", LabelOptions(method="omega", k=K))
    out = read(tmp_path / "out.jsonl")
    for record, truth in zip(out, records):
        assert record["labels"] == truth["labels"]
        assert record["first_error"] == truth["first_error"]
        bound = 0 if truth["first_error"] == -1 else math.ceil(math.log2(len(truth["completions"]))) * K
        assert 0 < record["label"]["rollouts"] <= bound or record["label"]["rollouts"] == bound == 0
    assert result.rollouts < sum((len(r["completions"]) - 1) * K for r in records)
    assert all(call["n"] == K for call in policy.calls)
    null = label_file(FakePolicy(records), data, tmp_path / "null.jsonl",
                      LabelOptions(method="omega", k=K, after_error="null"))
    assert null.rollouts == result.rollouts
    for record, truth in zip(read(tmp_path / "null.jsonl"), records):
        e = truth["first_error"]
        if e != -1:
            assert record["labels"][e] == 0 and record["labels"][e + 1:] == [None] * (len(record["labels"]) - e - 1)


def test_a_broken_run_resumes_to_the_same_file(data, records, tmp_path):
    whole = tmp_path / "whole.jsonl"
    label_file(FakePolicy(records), data, whole, LabelOptions(method="omega", k=K, problems_per_batch=2))
    broken = tmp_path / "broken.jsonl"
    with pytest.raises(RuntimeError, match="killed"):
        label_file(FakePolicy(records, fail_after=3), data, broken,
                   LabelOptions(method="omega", k=K, problems_per_batch=2))
    kept = read(broken)
    assert 0 < len(kept) < len(records)
    with broken.open("a", encoding="utf-8") as handle:  # a kill in the middle of a line
        handle.write(json.dumps(read(whole)[len(kept)])[:40])
    again = FakePolicy(records)
    result = label_file(again, data, broken, LabelOptions(method="omega", k=K, problems_per_batch=2))
    assert broken.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")
    assert result.kept == len(kept) and result.solutions == len(records) - len(kept)
    done = label_file(FakePolicy(records), data, broken, LabelOptions(method="omega", k=K, problems_per_batch=2))
    assert done.solutions == 0 and done.rollouts == 0  # nothing left to do: no generate call at all


def test_a_partly_written_batch_is_redone_and_only_its_missing_records_written(data, records, tmp_path):
    whole = tmp_path / "whole.jsonl"
    label_file(FakePolicy(records), data, whole, LabelOptions(k=K, problems_per_batch=4))
    part = tmp_path / "part.jsonl"
    lines = whole.read_text(encoding="utf-8").splitlines(keepends=True)
    part.write_text("".join(lines[:6]), encoding="utf-8")  # batch 0 whole, batch 1 half written
    policy = FakePolicy(records)
    label_file(policy, data, part, LabelOptions(k=K, problems_per_batch=4))
    assert part.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")
    assert [c["seed"] for c in policy.calls] == [derive_seed(5, "rollouts", b, 0) for b in (1, 2)]


def test_resuming_with_other_settings_is_refused_with_the_fix(data, records, tmp_path):
    out = tmp_path / "out.jsonl"
    label_file(FakePolicy(records), data, out, LabelOptions(k=K, limit=2))
    with pytest.raises(PRMError, match=r"k: 4 there, 8 now.*--overwrite"):
        label_file(FakePolicy(records), data, out, LabelOptions(k=8))
    other = GenerationOptions(max_new_tokens=32, temperature=1.0, seed=5)
    with pytest.raises(PRMError, match="temperature"):
        label_file(FakePolicy(records, options=other), data, out, LabelOptions(k=K))
    fresh = label_file(FakePolicy(records), data, out, LabelOptions(k=8, overwrite=True))
    assert fresh.kept == 0 and len(read(out)) == len(records)


def test_resuming_from_another_input_is_refused(data, records, tmp_path):
    out = tmp_path / "out.jsonl"
    label_file(FakePolicy(records), data, out, LabelOptions(k=K, limit=2))
    shuffled = tmp_path / "shuffled.jsonl"
    write_jsonl(records[::-1], shuffled)
    with pytest.raises(PRMError, match="another problem than row 1"):
        label_file(FakePolicy(records), shuffled, out, LabelOptions(k=K))


def test_budget_is_reported_before_any_generation(data, records, tmp_path):
    seen = []
    policy = FakePolicy(records)

    def on_start(budget):
        seen.append((budget, len(policy.calls)))

    label_file(policy, data, tmp_path / "mc.jsonl", LabelOptions(k=K), on_start=on_start)
    budget, calls = seen[0]
    steps = sum(len(r["completions"]) for r in records)
    assert calls == 0
    assert (budget.problems, budget.solutions, budget.steps) == (9, 9, steps)
    assert budget.rollouts == (steps - 9) * K and budget.tokens == budget.rollouts * 32
    assert f"{budget.rollouts:,} rollouts" in "\n".join(budget.lines())
    label_file(policy, data, tmp_path / "omega.jsonl", LabelOptions(method="omega", k=K), on_start=on_start)
    assert seen[1][0].rollouts == sum(math.ceil(math.log2(len(r["completions"]))) * K for r in records)


def test_sampled_solutions(data, records, tmp_path):
    policy = FakePolicy(records)
    budgets = []
    result = label_file(policy, data, tmp_path / "out.jsonl", LabelOptions(k=K, solutions=2, limit=3),
                        on_start=budgets.append)
    assert (budgets[0].solutions, budgets[0].steps, budgets[0].rollouts) == (6, None, None)
    assert "3 problems x 2 sampled solutions" in budgets[0].lines()[0]
    assert "at most 192 tokens" in budgets[0].lines()[1]  # 6 solutions of at most 32 tokens
    out = read(tmp_path / "out.jsonl")
    assert [(r["row"], r["solution_index"]) for r in out] == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    assert policy.calls[0]["n"] == 2 and policy.calls[0]["seed"] == derive_seed(5, "solutions", 0)
    assert [r["completions"] for r in out[::2]] == [r["completions"] for r in records[:3]]
    assert all(r["label"]["solution_tokens"] > 0 and r["label"]["solutions"] == 2 for r in out)
    assert result.tokens == sum(r["label"]["tokens"] + r["label"]["solution_tokens"] for r in out)


def test_gsm8k_and_math_rows(tmp_path):
    rows = [{"question": "What is 2 + 2?", "answer": "2 + 2 = <<2+2=4>>4\n#### 4", "solution": "2 + 2 = 4.\n\n4"},
            {"problem": "Half of one?", "answer": "\\frac{1}{2}", "solution": "Half is $0.5$.\n\nSo $\\boxed{0.5}$."}]
    path = tmp_path / "rows.jsonl"
    write_jsonl(rows, path)
    truth = [{"prompt": "What is 2 + 2?", "first_error": -1, "gold_answer": "4", "completions": []},
             {"prompt": "Half of one?", "first_error": -1, "gold_answer": "0", "completions": []}]
    label_file(FakePolicy(truth), path, tmp_path / "out.jsonl", LabelOptions(method="omega", k=K))
    out = read(tmp_path / "out.jsonl")
    assert [r["gold_answer"] for r in out] == ["4", "\\frac{1}{2}"]
    assert [r["answer"] for r in out] == ["4", "0.5"]
    assert [r["correct"] for r in out] == [True, True]  # 0.5 = 1/2 went through math-verify
    assert out[1]["completions"] == ["Half is $0.5$.", "So $\\boxed{0.5}$."]


@pytest.mark.parametrize("row, message", [
    ({"prompt": "p", "completions": ["a"]}, r"row 1, field 'gold_answer/answer': missing.*--gold-field"),
    ({"prompt": "p", "answer": "3", "completions": ["a", " "]}, r"row 1, field 'completions\[1\]': the step is empty"),
    ({"prompt": "p", "answer": "3", "solution": "\n\n"}, r"row 1, field 'solution': the solution has no steps"),
    ({"prompt": "p", "answer": "3"}, r"row 1, field 'completions'/'solution': missing.*--solutions N"),
    ({"answer": "3", "completions": ["a"]}, r"row 1, field 'prompt/problem/question': missing.*--problem-field"),
    ({"prompt": "p", "answer": {"x": 1}, "completions": ["a"]}, r"row 1, field 'answer': a gold answer is a string"),
])
def test_bad_rows_are_named_with_file_row_field_and_fix(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    write_jsonl([row], path)
    with pytest.raises(PRMError, match=message) as info:
        label_file(FakePolicy([]), path, tmp_path / "out.jsonl", LabelOptions(k=K))
    assert str(path) in str(info.value)


def test_unreadable_input_and_output(tmp_path, data, records):
    with pytest.raises(PRMError, match="no such file"):
        label_file(FakePolicy([]), tmp_path / "missing.jsonl", tmp_path / "out.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "p", "answer": "1", "completions": ["a"]}\n{oops\n', encoding="utf-8")
    with pytest.raises(PRMError, match=r"row 2 is not valid JSON"):
        label_file(FakePolicy([]), broken, tmp_path / "out.jsonl")
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"prompt": "p"}\n', encoding="utf-8")
    with pytest.raises(PRMError, match="line 1 is not a record written by prmkit label.*--overwrite"):
        label_file(FakePolicy(records), data, foreign, LabelOptions(k=K))
    with pytest.raises(PRMError, match="give a .jsonl path"):
        label_file(FakePolicy(records), data, tmp_path / "out.parquet", LabelOptions(k=K))


def test_option_errors():
    with pytest.raises(PRMError, match="label=soft needs method=mc"):
        LabelOptions(method="omega", label="soft")
    with pytest.raises(PRMError, match="after_error is omega's"):
        LabelOptions(method="mc", after_error="null")
    with pytest.raises(PRMError, match="k=0"):
        LabelOptions(k=0)


class CutPolicy(FakePolicy):
    """Every rollout reaches the gold answer only as an intermediate number, then runs out of tokens."""

    def _sample(self, prompt, j):
        problem, prefix = prompt.split(MARK)
        if not prefix:
            return super()._sample(prompt, j)
        text = f"Going on, {self.truth[problem]['gold_answer']} and then we add"
        return Sample(text=text, tokens=32, finish_reason="length")


def test_rollouts_cut_at_max_new_tokens_are_not_graded_by_their_last_number(data, records, tmp_path):
    result = label_file(CutPolicy(records), data, tmp_path / "out.jsonl", LabelOptions(k=K, limit=4))
    out = read(tmp_path / "out.jsonl")
    for record, truth in zip(out, records):
        steps = len(truth["completions"])
        assert record["values"][:-1] == [0.0] * (steps - 1)  # the gold number in unfinished working is no hit
        assert record["label"]["finish_reasons"] == ({"length": (steps - 1) * K} if steps > 1 else {})
    assert result.finish_reasons == {"length": result.rollouts}


def test_the_command_says_how_many_rollouts_ran_out_of_tokens(data, records, tmp_path, monkeypatch, capsys):
    import prmkit.generation
    from prmkit.cli import main

    monkeypatch.setattr(prmkit.generation, "load_generator", lambda policy, options: CutPolicy(records))
    assert main(["label", str(data), str(tmp_path / "out.jsonl"), "--policy", "fake", "--k", "2", "--limit", "2",
                 "--max-new-tokens", "32"]) == 0
    steps = sum(len(r["completions"]) - 1 for r in records[:2])
    assert f"{steps * 2} of {steps * 2} rollouts ran out of tokens (--max-new-tokens 32)" in capsys.readouterr().out


def test_sampled_solutions_record_their_finish_reason(data, records, tmp_path):
    label_file(FakePolicy(records), data, tmp_path / "out.jsonl", LabelOptions(k=K, solutions=1, limit=2))
    out = read(tmp_path / "out.jsonl")
    assert [r["label"]["solution_finish_reason"] for r in out] == ["eos", "eos"]
    assert all(r["label"]["finish_reasons"] == {"eos": r["label"]["rollouts"]} for r in out if r["label"]["rollouts"])


def test_a_rollout_without_an_answer_is_not_credited_with_a_number_of_its_prefix():
    from prmkit.labeling.runner import rollout_answer

    prefix = "20 cups at 3 dollars make 20 * 3 = 60 dollars.\n\n"
    assert rollout_answer(prefix, "and then the cookies") is None  # 60 is an intermediate result, not an answer
    assert rollout_answer(prefix, "6 more make 66. The answer is \\boxed{66}.") == "66"
    assert rollout_answer(prefix, "so the profit is 58 dollars") == "58"
    assert rollout_answer("So the answer is \\boxed{60}.\n\n", "") == "60"  # the prefix had already answered
    assert rollout_answer(prefix, "so the profit is 58 dollars", "length") is None  # cut off mid-working
    assert rollout_answer("So the answer is \\boxed{60}.\n\n", "and 60 + 2 = 62", "length") == "60"
