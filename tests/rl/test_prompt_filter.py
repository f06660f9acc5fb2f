"""The prompt filter: pass rates, the band and the summary by hand; the sampling loop with a scripted policy (counts
known exactly, a kill and a resume, settings checks, bad rows); `prmkit rl-filter` end to end on a tiny model."""

from __future__ import annotations

import json

import pytest
from tiny_models import build_tiny_model

from prmkit.cli import main
from prmkit.errors import PRMError
from prmkit.files import read_jsonl, write_jsonl
from prmkit.generation.base import Sample
from prmkit.generation.options import GenerationOptions
from prmkit.rl.prompt_filter import (
    FilterOptions,
    filter_prompts,
    in_band,
    kept_path_for,
    parse_band,
    pass_rate,
    prompt_stats,
    summarize,
)

# --- pass rate and band ---


def test_pass_rate_is_the_share_of_right_samples():
    assert pass_rate([True, False, True, True]) == 0.75
    assert pass_rate([1, 0, 0, 0, 0]) == 0.2
    with pytest.raises(ValueError, match="at least one sample"):
        pass_rate([])


def test_k_of_one_gives_a_rate_of_zero_or_one():
    assert pass_rate([True]) == 1.0 and pass_rate([False]) == 0.0
    # neither lies in the default band; only a band that reaches an end keeps them
    assert not in_band(1.0) and not in_band(0.0)
    assert in_band(1.0, (0.5, 1.0)) and in_band(0.0, (0.0, 0.0))


def test_both_band_edges_are_kept_and_a_rate_just_outside_is_not():
    assert in_band(pass_rate([True] + [False] * 4), (0.2, 0.8))  # 1/5 on the low edge
    assert in_band(pass_rate([True] * 4 + [False]), (0.2, 0.8))  # 4/5 on the high edge
    assert in_band(pass_rate([True] * 3 + [False] * 7), (0.3, 0.7))  # 3/10: a rounding away from 0.3
    assert in_band(pass_rate([True] * 7 + [False] * 3), (0.3, 0.7))
    assert not in_band(1 / 8, (0.2, 0.8)) and not in_band(7 / 8, (0.2, 0.8))
    assert not in_band(0.199999, (0.2, 0.8)) and not in_band(0.800001, (0.2, 0.8))


def test_all_right_and_all_wrong_prompts_are_dropped_by_the_default_band():
    assert pass_rate([True] * 8) == 1.0 and not in_band(1.0)
    assert pass_rate([False] * 8) == 0.0 and not in_band(0.0)
    assert in_band(0.5) and in_band(0.25)


def test_a_band_is_two_ordered_numbers_in_0_1():
    assert parse_band("0.2,0.8") == (0.2, 0.8) and parse_band("0,1") == (0.0, 1.0)
    assert parse_band("0.5,0.5") == (0.5, 0.5)
    for text, message in [("0.8,0.2", "0 <= LOW <= HIGH <= 1"), ("0.2", "two numbers"), ("a,b", "two numbers"),
                          ("-0.1,0.5", "0 <= LOW"), ("0.2,0.5,0.8", "two numbers")]:
        with pytest.raises(PRMError, match=message):
            parse_band(text)
    with pytest.raises(PRMError, match="band=0.9,0.1.*k=0.*problems_per_batch=0"):
        FilterOptions(k=0, band=(0.9, 0.1), problems_per_batch=0)


# --- per-prompt counts and the summary ---


def test_prompt_stats_count_right_samples_distinct_answers_and_distinct_samples():
    stats = prompt_stats([True, True, False, False], ["1,000", "1000", "7", None],
                         ["so 1,000", "so 1000", "so 7", "so 1000 "])
    # "1,000" and "1000" are one answer; a sample without an answer is counted apart; texts compare stripped
    assert stats == {"k": 4, "correct_samples": 2, "pass_rate": 0.5, "distinct_answers": 2, "distinct_samples": 3,
                     "no_answer": 1}


def test_summary_by_hand():
    # three prompts of 4 samples: half right, all right, all wrong
    stats = [prompt_stats(v, a, t) for v, a, t in [
        ([True, True, False, False], ["5", "5", "6", "7"], ["a", "b", "c", "d"]),
        ([True] * 4, ["5"] * 4, ["a"] * 4),
        ([False] * 4, ["1", "2", None, None], ["a", "b", "c", "c"])]]
    summary = summarize(stats, (0.2, 0.8))
    assert summary["prompts"] == 3 and summary["k"] == 4 and summary["samples"] == 12
    assert summary["per_sample_accuracy"] == 6 / 12
    assert summary["pass_at_k"] == pytest.approx(2 / 3)  # two prompts have a right sample among their four
    assert summary["all_right_share"] == pytest.approx(1 / 3) and summary["all_wrong_share"] == pytest.approx(1 / 3)
    assert summary["zero_spread_share"] == pytest.approx(2 / 3)
    assert summary["mean_distinct_answers"] == pytest.approx((3 + 1 + 2) / 3)
    assert summary["mean_distinct_samples"] == pytest.approx((4 + 1 + 3) / 3)
    assert summary["kept"] == 1 and summary["kept_share"] == pytest.approx(1 / 3)
    assert summary["pass_rates"] == {"0.000": 1, "0.500": 1, "1.000": 1}
    assert summarize(stats, (0.0, 1.0))["kept"] == 3


def test_with_k_of_one_pass_at_k_is_the_per_sample_accuracy():
    stats = [prompt_stats([ok], ["3"], ["x"]) for ok in (True, False, False, True)]
    summary = summarize(stats)
    assert summary["pass_at_k"] == summary["per_sample_accuracy"] == 0.5
    assert summary["zero_spread_share"] == 1.0 and summary["kept"] == 0  # one sample has no spread to learn from


# --- the sampling loop, with a scripted policy ---


class ScriptedPolicy:
    """The Generator protocol, with a known pass rate: sample j of prompt "q<i>" is right when j < right[i]. Calls
    after `fail_after` raise, as a kill would."""

    def __init__(self, right: dict[str, int], fail_after: int | None = None, **options):
        self.name = "scripted"
        self.options = GenerationOptions(**{"temperature": 0.7, "max_new_tokens": 16, "seed": 3, **options})
        self.right, self.fail_after, self.calls = right, fail_after, []

    def prompt(self, problem: str, prefix: str = "") -> str:
        return problem

    def generate(self, prompts, n=1, *, stop=(), max_new_tokens=None, temperature=None, seed=None):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("killed")
        self.calls.append({"prompts": list(prompts), "n": n, "seed": seed})
        return [[Sample(text=f"step\n\nThe answer is \\boxed{{{4 if j < self.right[p] else 9}}}.", tokens=5,
                        finish_reason="eos") for j in range(n)] for p in prompts]

    def close(self) -> None:
        pass


RIGHT = {"q1": 0, "q2": 1, "q3": 2, "q4": 4, "q5": 3}  # of k = 4: rates 0, 0.25, 0.5, 1, 0.75


def rows_file(tmp_path):
    rows = [{"prompt": q, "answer": "4", "id": i, "extra": [i]} for i, q in enumerate(RIGHT)]
    write_jsonl(rows, tmp_path / "rows.jsonl")
    return tmp_path / "rows.jsonl", rows


def test_filter_writes_each_prompts_counts_and_keeps_the_rows_in_the_band(tmp_path):
    data, rows = rows_file(tmp_path)
    options = FilterOptions(k=4, band=(0.25, 0.75), problems_per_batch=2, checker_workers=1)
    result = filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", options)
    lines = read_jsonl(tmp_path / "rates.jsonl")
    assert [(r["row"], r["prompt"], r["correct_samples"], r["pass_rate"]) for r in lines] == [
        (1, "q1", 0, 0.0), (2, "q2", 1, 0.25), (3, "q3", 2, 0.5), (4, "q4", 4, 1.0), (5, "q5", 3, 0.75)]
    assert lines[2]["answers"] == ["4", "4", "9", "9"] and lines[2]["verdicts"] == [True, True, False, False]
    assert lines[2]["distinct_answers"] == 2 and lines[2]["distinct_samples"] == 2 and lines[2]["k"] == 4
    assert lines[0]["settings"]["k"] == 4 and lines[0]["settings"]["temperature"] == 0.7
    # the kept file holds the input rows as they were, edges of the band included
    assert result.kept_path == str(kept_path_for(tmp_path / "rates.jsonl")) == str(tmp_path / "rates.kept.jsonl")
    assert read_jsonl(result.kept_path) == [rows[1], rows[2], rows[4]]
    assert result.sampled == 5 and result.resumed == 0 and result.tokens == 5 * 4 * 5
    assert result.summary["kept"] == 3 and result.summary["per_sample_accuracy"] == 10 / 20


def test_a_killed_run_resumes_and_writes_what_an_unbroken_run_writes(tmp_path):
    data, _ = rows_file(tmp_path)
    options = FilterOptions(k=4, problems_per_batch=2, checker_workers=1)
    filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "whole.jsonl", options)
    with pytest.raises(RuntimeError, match="killed"):
        filter_prompts(ScriptedPolicy(RIGHT, fail_after=1), data, tmp_path / "cut.jsonl", options)
    assert len(read_jsonl(tmp_path / "cut.jsonl")) == 2  # the first batch, synced before the kill
    with open(tmp_path / "cut.jsonl", "a") as handle:
        handle.write('{"row": 3, "prom')  # a line torn by the kill
    policy = ScriptedPolicy(RIGHT)
    result = filter_prompts(policy, data, tmp_path / "cut.jsonl", options)
    assert result.resumed == 2 and result.sampled == 3
    assert [c["prompts"] for c in policy.calls] == [["q3", "q4"], ["q5"]]  # the done batch is not sampled again
    assert (tmp_path / "cut.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


def test_a_rerun_with_another_band_samples_nothing_and_chooses_again(tmp_path):
    data, rows = rows_file(tmp_path)
    filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", FilterOptions(k=4, checker_workers=1))
    policy = ScriptedPolicy(RIGHT)
    result = filter_prompts(policy, data, tmp_path / "rates.jsonl",
                            FilterOptions(k=4, band=(0.0, 0.0), checker_workers=1), kept_path=tmp_path / "hard.jsonl")
    assert policy.calls == [] and result.sampled == 0
    assert read_jsonl(tmp_path / "hard.jsonl") == [rows[0]]


def test_other_settings_or_other_rows_do_not_continue_an_output(tmp_path):
    data, rows = rows_file(tmp_path)
    filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", FilterOptions(k=4, checker_workers=1))
    with pytest.raises(PRMError, match=r"line 1 was sampled with other settings \(k: 4 there, 2 now\).*--overwrite"):
        filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", FilterOptions(k=2, checker_workers=1))
    with pytest.raises(PRMError, match="temperature: 0.7 there, 1.0 now"):
        filter_prompts(ScriptedPolicy(RIGHT, temperature=1.0), data, tmp_path / "rates.jsonl",
                       FilterOptions(k=4, checker_workers=1))
    write_jsonl([{**rows[0], "answer": "5"}, *rows[1:]], tmp_path / "changed.jsonl")
    with pytest.raises(PRMError, match="line 1 holds another prompt or gold answer than row 1 of the input"):
        filter_prompts(ScriptedPolicy(RIGHT), tmp_path / "changed.jsonl", tmp_path / "rates.jsonl",
                       FilterOptions(k=4, checker_workers=1))
    result = filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl",
                            FilterOptions(k=2, checker_workers=1, overwrite=True))
    assert result.sampled == 5 and read_jsonl(result.output)[0]["k"] == 2


def test_bad_rows_are_all_reported_with_file_row_field_and_fix(tmp_path):
    data = tmp_path / "rows.jsonl"
    write_jsonl([{"prompt": "q1", "answer": "4"}, {"prompt": "q2"}, {"question": "", "answer": "1"}, "q4"], data)
    with pytest.raises(PRMError) as error:
        filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", FilterOptions(k=2, checker_workers=1))
    message = str(error.value)
    assert f"{data}: 3 of 4 rows cannot be filtered" in message
    assert "row 2, field 'gold_answer/answer': missing or empty; a pass rate is measured against a gold" in message
    assert "--gold-field" in message and "row 3, field 'question': the problem must be a non-empty string" in message
    assert "row 4, field '-': expected an object" in message
    with pytest.raises(PRMError, match="row 1, field 'final': missing or empty.*give it there$"):
        filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl",
                       FilterOptions(k=2, gold_field="final", limit=1))


def test_greedy_sampling_with_several_samples_is_refused(tmp_path):
    data, _ = rows_file(tmp_path)
    with pytest.raises(PRMError, match="temperature=0 draws one greedy solution 4 times.*--temperature 0.8"):
        filter_prompts(ScriptedPolicy(RIGHT, temperature=0.0), data, tmp_path / "rates.jsonl",
                       FilterOptions(k=4, checker_workers=1))
    with pytest.raises(PRMError, match="give --kept a .jsonl path"):
        filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", FilterOptions(k=4),
                       kept_path=tmp_path / "kept.csv")
    with pytest.raises(PRMError, match="one file"):
        filter_prompts(ScriptedPolicy(RIGHT), data, tmp_path / "rates.jsonl", FilterOptions(k=4),
                       kept_path=tmp_path / "rates.jsonl")


# --- the command, on a tiny model ---


def test_the_command_end_to_end_on_a_tiny_policy_and_its_resume(tmp_path, capsys):
    policy = build_tiny_model(tmp_path / "policy")
    write_jsonl([{"prompt": f"Tom has {n} apples and buys 2 more. How many?", "answer": str(n + 2)}
                 for n in (3, 4, 5)], tmp_path / "rows.jsonl")
    out, report = tmp_path / "rates.jsonl", tmp_path / "summary.json"
    argv = ["rl-filter", str(tmp_path / "rows.jsonl"), str(out), "--policy", str(policy), "--k", "3",
            "--band", "0,1", "--max-new-tokens", "6", "--problems-per-batch", "2", "--device", "cpu",
            "--checker-workers", "1", "--json", str(report)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "kept 3 of 3 prompts" in printed and "pass@3" in printed and "distinct samples per prompt" in printed
    lines = read_jsonl(out)
    assert [r["row"] for r in lines] == [1, 2, 3] and all(r["k"] == 3 and len(r["verdicts"]) == 3 for r in lines)
    assert all(r["correct_samples"] == sum(r["verdicts"]) for r in lines)
    assert len(read_jsonl(tmp_path / "rates.kept.jsonl")) == 3
    summary = json.loads(report.read_text())
    assert summary["prompts"] == 3 and summary["k"] == 3 and summary["band"] == [0.0, 1.0]
    whole = out.read_bytes()
    # a kill after the first line, in the middle of the second: the rerun samples the first batch again whole
    # (its seed is its place's) and writes what the unbroken run wrote
    first, second = whole.split(b"\n")[:2]
    out.write_bytes(first + b"\n" + second[:10])
    assert main(argv) == 0
    assert "1 are already in" in capsys.readouterr().out
    assert out.read_bytes() == whole


def test_the_command_samples_without_logprobs_and_continues_a_file_written_with_them(tmp_path, request):
    """A pass rate never reads a sample's log-prob: `prmkit rl-filter` samples with logprobs off (no extra
    forward), and a file written with them (as every one was before the option) is continued to the same bytes."""
    from prmkit.cli import build_parser
    from prmkit.cli.common import generation_options
    from prmkit.cli.rl import filter_options
    from prmkit.generation import load_generator

    policy = build_tiny_model(tmp_path / "policy")
    write_jsonl([{"prompt": f"Tom has {n} apples and buys 2 more. How many?", "answer": str(n + 2)}
                 for n in (3, 4, 5)], tmp_path / "rows.jsonl")
    out = tmp_path / "rates.jsonl"
    argv = ["rl-filter", str(tmp_path / "rows.jsonl"), str(out), "--policy", str(policy), "--k", "3",
            "--band", "0,1", "--max-new-tokens", "6", "--problems-per-batch", "2", "--device", "cpu",
            "--checker-workers", "1"]
    args = build_parser().parse_args(argv)
    assert generation_options(args).logprobs is False
    before = load_generator(str(policy), generation_options(args).replace(logprobs=True))
    filter_prompts(before, tmp_path / "rows.jsonl", out, filter_options(args))
    whole = out.read_bytes()
    out.write_bytes(whole.split(b"\n")[0] + b"\n")  # prompt 1 of the first batch (2 prompts) is there

    drawn = request.getfixturevalue("samples_drawn_without_logprobs")  # from here on
    assert main(argv) == 0
    assert len(drawn) == 3 * 3 and all(s.logprob is None for s in drawn)  # both batches, sampled whole
    assert out.read_bytes() == whole


def test_the_command_reports_bad_input_before_loading_a_model(tmp_path, capsys):
    write_jsonl([{"prompt": "q1"}], tmp_path / "rows.jsonl")
    code = main(["rl-filter", str(tmp_path / "rows.jsonl"), str(tmp_path / "out.jsonl"), "--policy",
                 str(tmp_path / "no-model")])
    err = capsys.readouterr().err
    assert code == 2 and "row 1, field 'gold_answer/answer': missing" in err
    assert main(["rl-filter", "rows.jsonl", "out.jsonl", "--policy", "x", "--band", "0.9,0.1"]) == 2
    assert "--band 0.9,0.1: give 0 <= LOW <= HIGH <= 1" in capsys.readouterr().err
