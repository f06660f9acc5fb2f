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


def test_no_probe_says_which_command_draws_it(tmp_path):
    with pytest.raises(SystemExit, match="data_curve.py"):
        arithmetic_knowledge.main(["--work", str(tmp_path), "--out", str(tmp_path / "k.json")])


@pytest.mark.slow
def test_a_real_causal_lm_scores_each_rows_result(tiny_llama, tmp_path):
    rows = probe(tmp_path)
    scores = arithmetic_knowledge.model_logprobs(str(tiny_llama))(rows)
    assert len(scores) == len(rows) and all(s < 0 for s in scores)
