"""bench/arithmetic_knowledge.py: a probe row splits at its last equation's result, and the LM's log-prob of that
result is compared between true and false rows of the same words."""

import json

import pytest

import arithmetic_knowledge


def test_a_step_splits_at_its_last_equations_result():
    head, result = arithmetic_knowledge.split_at_result(
        "Each friend gets 156 / 6 = 26 pencils, so 2 + 26 = 28. The answer is \\boxed{28}.")
    assert head == "Each friend gets 156 / 6 = 26 pencils, so 2 + 26 = " and result == "28"
    with pytest.raises(ValueError, match="no `a op b = c`"):
        arithmetic_knowledge.split_at_result("The answer is 4.")


def probe(tmp_path):
    rows = [{"prompt": "p", "completions": [step], "labels": [int(ok)], "correct": ok}
            for step, ok in (("Tom has 2 + 3 = 5 apples.", True), ("Tom has 4 + 4 = 9 apples.", False),
                             ("Ann pays 6 * 2 = 12 dollars.", True), ("Ann pays 3 * 3 = 10 dollars.", False))]
    (tmp_path / "val").mkdir()
    (tmp_path / "val" / "arithmetic-probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_a_model_that_knows_the_sums_orders_every_pair_of_the_same_words(tmp_path):
    probe(tmp_path)

    def knows_sums(folder):  # mass on the true result, whatever the words
        def score(rows):
            out = []
            for row in rows:
                head, result = arithmetic_knowledge.split_at_result(row["completions"][0])
                a, op, b = head.split("= ")[0].split()[-3:]
                out.append(-0.1 if eval(f"{a} {op} {b}") == int(result) else -5.0)
            return out
        return score

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    result = arithmetic_knowledge.main(["--work", str(tmp_path), "--models", str(folder),
                                        "--out", str(tmp_path / "k.json")], result_logprobs_for=knows_sums)
    model = result["models"][str(folder)]
    assert model["within_phrasing"] == {"auroc": 1.0, "auroc_pooled": 1.0, "phrasings": 2, "pairs": 2}
    assert model["step_auroc"] == 1.0 and model["rows"] == 4 and model["true"] == 2
    assert json.loads((tmp_path / "k.json").read_text()) == result


def test_each_stated_result_is_read_after_the_steps_before_it():
    row = {"prompt": "p", "completions": ["Tom has 2 + 3 = 5 apples.", "Then 5 * 2 = 10, and 10 - 1 = 9."]}
    assert arithmetic_knowledge.stated_results(row) == [
        ("Tom has 2 + 3 = ", "5"),
        ("Tom has 2 + 3 = 5 apples.\n\nThen 5 * 2 = ", "10"),
        ("Tom has 2 + 3 = 5 apples.\n\nThen 5 * 2 = 10, and 10 - 1 = ", "9")]


def test_samples_are_ordered_by_their_least_likely_result_within_a_problem():
    def sample(problem, steps, right):
        return {"prompt": problem, "completions": steps, "correct": right}

    rows = [sample("p", ["2 + 3 = 5.", "5 * 2 = 10."], True), sample("p", ["2 + 3 = 5.", "5 * 2 = 11."], False),
            sample("q", ["4 - 1 = 3."], True), sample("q", ["4 - 1 = 2."], False),
            sample("q", ["No sums here."], False)]

    def knows_sums(problems, heads, results):  # a confident 0 on a true result, -3 per token on a slip
        out = []
        for head, result in zip(heads, results):
            a, op, b = head.rsplit("= ", 1)[0].split()[-3:]
            out.append((0.0 if eval(f"{a} {op} {b}") == int(result) else -3.0 * len(result), len(result)))
        return out

    assert arithmetic_knowledge.least_likely_results(rows, knows_sums) == [0.0, -3.0, 0.0, -3.0, None]
    found = arithmetic_knowledge.on_samples(rows, knows_sums)
    assert found["auroc"] == 1.0 and found["problems"] == 2 and found["pairs"] == 2  # the unscored one is left out
    assert found["samples"] == 5 and found["scored"] == 4


def test_no_probe_says_which_command_draws_it(tmp_path):
    with pytest.raises(SystemExit, match="data_curve.py"):
        arithmetic_knowledge.main(["--work", str(tmp_path), "--out", str(tmp_path / "k.json")])


@pytest.mark.slow
def test_a_real_causal_lm_scores_each_rows_result(tiny_llama, tmp_path):
    rows = probe(tmp_path)
    scores = arithmetic_knowledge.model_logprobs(str(tiny_llama))(rows)
    assert len(scores) == len(rows) and all(s < 0 for s in scores)
