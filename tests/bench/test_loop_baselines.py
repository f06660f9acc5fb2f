"""The baselines a PRM must beat on the lifecycle benchmark's tables: the policy's own confidence (mean log-prob per
token, as `prmkit search` writes it) choosing among the same samples, on hand-made rows whose figures are worked
out by hand, absent where the samples do not carry it; and the outcome-only recipe (labels on the last step)."""

import math

import pytest

import loop
import loop_recipes
import render_quality
from lifecycle import analysis
from lifecycle.tables import markdown_tables
from prmkit.config import Config
from prmkit.files import write_jsonl


def sample(answer: str, correct: bool, mean_logprob: float | None) -> dict:
    """A sampled solution as `prmkit search` writes it; the search's PRM scores right samples 0.9, wrong ones 0.1."""
    prm = 0.9 if correct else 0.1
    text = f"Step 1: work.\nThe answer is \\boxed{{{answer}}}"
    return {"solution": text, "steps": ["Step 1: work.", f"The answer is \\boxed{{{answer}}}"],
            "step_scores": [prm, prm], "score": prm, "truncated": False, "answer": answer, "finish_reason": "eos",
            "tokens": 10, "correct": correct, "logprob": None if mean_logprob is None else 10 * mean_logprob,
            "mean_logprob": mean_logprob}


def rows() -> list[dict]:
    """Three problems of four samples. A: the most confident sample is wrong, the two right ones share the answer.
    B: a wrong and a right sample tie at the top (best-of-N takes the first: wrong). C: every sample right."""
    a = [sample("5", False, -0.1), sample("4", True, -0.5), sample("4", True, -0.6), sample("6", False, -2.0)]
    b = [sample("3", False, -0.3), sample("7", True, -0.3), sample("7", True, -0.9), sample("8", False, -3.0)]
    c = [sample("2", True, -0.05)] * 4
    return [{"prompt": prompt, "samples": samples, "greedy": {"correct": True}}
            for prompt, samples in (("A", a), ("B", b), ("C", c))]


def without_confidence(rows: list[dict]) -> list[dict]:
    return [{**row, "samples": [{k: v for k, v in s.items() if k not in ("logprob", "mean_logprob")}
                                for s in row["samples"]]} for row in rows]


def test_confidence_rows_score_each_sample_by_its_geometric_mean_token_probability():
    scored = analysis.confidence_rows(rows())
    assert scored[0]["samples"][1]["score"] == pytest.approx(math.exp(-0.5))
    assert all(s["step_scores"] == [] for row in scored for s in row["samples"])  # no PRM cut demotes a sample
    # best-of-4: A's most confident sample is wrong, B's tie goes to the first (wrong), C is right
    assert analysis.outcomes(scored, "best-of-n", 4) == [0, 0, 1]
    # weighted: A's answer 4 sums e^-0.5 + e^-0.6 = 1.155 > e^-0.1 = 0.905; B's 7 sums 1.147 > 3's 0.741
    assert analysis.outcomes(scored, "weighted-best-of-n", 4) == [1, 1, 1]
    assert analysis.outcomes(scored, "best-of-n", 2) == [0, 0, 1]  # B's first two tie: the first, wrong
    # a sample with no token has no confidence: it is unscored, ranked last
    zero = [{**rows()[0], "samples": [sample("5", False, None), sample("4", True, -3.0)]}]
    assert analysis.outcomes(analysis.confidence_rows(zero), "best-of-n", 2) == [1]


def test_confidence_rows_need_mean_logprob_on_every_sample_in_reach():
    assert analysis.confidence_rows(without_confidence(rows())) is None
    partial = rows()
    partial[1]["samples"][3] = without_confidence([partial[1]])[0]["samples"][3]
    assert analysis.confidence_rows(partial) is None
    assert analysis.confidence_rows(partial, 3) is not None  # the fourth sample is past n


def test_recipe_table_gets_the_policy_confidence_row_with_a_recipes_columns():
    result = loop_recipes.confidence_metrics(rows(), 4)
    assert result["step_auroc"] is None and result["majority"] == pytest.approx(1.0)
    cell = result["aggregates"][analysis.CONFIDENCE_SCORE]
    # A: right {-0.5, -0.6} against wrong {-0.1, -2.0}: 2 of 4 pairs; B: right {-0.3, -0.9} against wrong
    # {-0.3, -3.0}: a tie (half), 2 wins, a loss: 2.5 of 4; C has no wrong sample
    assert cell["within_problem"]["auroc"] == pytest.approx((0.5 + 0.625) / 2)
    assert cell["within_problem"]["pairs"] == 8 and cell["within_problem"]["one_sided"] == 1
    # pooled over all 12 samples: 8 right x 4 wrong pairs, won 2 + 2 + 2.5 + 2 + 4 x 4 = 24.5
    assert cell["chain_auroc"] == pytest.approx(24.5 / 32)
    assert cell["best-of-n"] == pytest.approx(1 / 3) and cell["weighted-best-of-n"] == pytest.approx(1.0)
    assert cell["best-of-n - majority"]["difference"] == pytest.approx(-2 / 3)
    assert cell["weighted-best-of-n - majority"]["difference"] == pytest.approx(0.0)
    assert loop_recipes.confidence_metrics(without_confidence(rows()), 4) is None

    report = {"n": 4, "recipes": {}, "baselines": {loop_recipes.CONFIDENCE: result}}
    line = loop_recipes.recipe_table(report).splitlines()[-1]
    assert line.startswith(f"| {loop_recipes.CONFIDENCE} | - | {analysis.CONFIDENCE_SCORE} | 0.766 | 0.562 | 0.333 "
                           "| 1.000 | 1.000 | +0.000 [")


def test_render_quality_shows_the_baseline_row_only_where_the_results_hold_it(monkeypatch):
    cell = {"chain_auroc": 0.7, "within_problem": {"auroc": 0.6, "pairs": 8}, "best-of-n": 0.5,
            "weighted-best-of-n": 0.75, "weighted-best-of-n - majority": {"difference": 0.0, "low": -0.1, "high": 0.1}}
    recipe = {"step_auroc": 0.8, "majority": 0.75, "aggregates": {"last": cell}}
    results = {"recipes": {"exact-x": recipe}}
    monkeypatch.setattr(render_quality, "load", lambda name: results)
    before = render_quality.loop_recipes_table()
    assert "confidence" not in before and len(before.splitlines()) == 3
    results["baselines"] = {loop_recipes.CONFIDENCE: {"step_auroc": None, "majority": 0.75,
                                                      "aggregates": {analysis.CONFIDENCE_SCORE: cell}}}
    after = render_quality.loop_recipes_table().splitlines()
    assert after[:3] == before.splitlines()
    assert after[3].startswith(f"| {loop_recipes.CONFIDENCE} | - | {analysis.CONFIDENCE_SCORE} | 0.700 |")


def loop_report(tmp_path, search_rows: list[dict]) -> dict:
    work = tmp_path / "work"
    runner = loop.Loop(loop.parse_args(["--work", str(work), "--budgets", "2,4", "--tree-budgets", "4"]))
    write_jsonl(search_rows, work / "search.jsonl")
    write_jsonl(search_rows, work / "search-exact-prm.jsonl")
    write_jsonl([{"beam": {"4": {"correct": True}}, "dvts": {"4": {"correct": False}}}], work / "search-tree.jsonl")
    return runner.report()


def test_loop_report_gets_policy_confidence_rows_at_each_n(tmp_path):
    report = loop_report(tmp_path, rows())
    assert report["table"]["best-of-n (policy confidence)"]["4"]["accuracy"] == pytest.approx(1 / 3)
    assert report["table"]["weighted-best-of-n (policy confidence)"]["4"]["accuracy"] == pytest.approx(1.0)
    assert report["table"]["best-of-n (policy confidence)"]["2"]["accuracy"] == pytest.approx(1 / 3)
    assert report["comparisons"]["best-of-n (policy confidence) - majority @ 4"]["difference"] == \
        pytest.approx(-2 / 3)
    assert "weighted-best-of-n (policy confidence) - majority @ 2" in report["comparisons"]
    # the PRM (right samples above wrong ones: all three right) against confidence (one of three), paired
    versus = report["versus_confidence"]["best-of-n (mc PRM) - best-of-n (policy confidence) @ 4"]
    assert versus["difference"] == pytest.approx(2 / 3) and versus["problems"] == 3
    assert report["table"]["best-of-n (mc PRM)"]["4"]["accuracy"] == pytest.approx(1.0)
    tables = markdown_tables(report, {}, 4)
    assert "| best-of-n (policy confidence) |" in tables and "against the policy's own confidence" in tables


def test_loop_report_without_mean_logprob_is_what_it_was(tmp_path):
    report = loop_report(tmp_path, without_confidence(rows()))
    assert list(report["table"]) == ["greedy", "majority", "pass@N", "best-of-n (mc PRM)",
                                     "weighted-best-of-n (mc PRM)", "best-of-n (exact PRM)",
                                     "weighted-best-of-n (exact PRM)", "beam (mc PRM)", "dvts (mc PRM)"]
    assert not any("confidence" in name for name in report["comparisons"])
    assert set(report) == {"table", "comparisons", "sample_tokens_per_problem"}
    assert "confidence" not in markdown_tables(report, {}, 4)


def test_the_outcome_only_recipe_trains_the_exact_labels_on_the_last_step_only(tmp_path):
    orm, exact = loop_recipes.Recipe("exact", last_step_only=True), loop_recipes.Recipe("exact")
    assert orm.name == exact.name + "-orm"
    assert loop_recipes.RECIPES[loop_recipes.RECIPES.index(exact) + 1] == orm
    assert len({r.name for r in loop_recipes.RECIPES}) == len(loop_recipes.RECIPES)
    runner = loop.Loop(loop.parse_args(["--work", str(tmp_path)]))
    config = loop_recipes.recipe_config(runner, orm, "exact")
    assert config["data"]["train_on_last_step_only"] is True
    assert config["run_name"] == f"recipe-{orm.name}" and config["data"]["train"].endswith("labels-exact.jsonl")
    assert Config.model_validate(config).data.train_on_last_step_only is True
    plain = loop_recipes.recipe_config(runner, exact, "exact")
    assert not Config.model_validate(plain).data.train_on_last_step_only
    assert {k: v for k, v in config.items() if k not in ("run_name", "data")} == \
        {k: v for k, v in plain.items() if k not in ("run_name", "data")}
