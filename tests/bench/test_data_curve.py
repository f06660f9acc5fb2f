"""bench/data_curve.py: sizes take whole problems (siblings together, smaller sizes prefixes of larger), every label
source labels the same solutions, rollout labels keep the solution's own grade and problem and are not paid for
twice after a stop, and each point reports its rows, steps and rollouts beside the validation figures."""

import json

import pytest

import data_curve
import ranking


def rows_of(problems: int, samples: int, pairs: int = 1) -> list[dict]:
    rows = []
    for p in range(problems):
        prompt = f"What is {p} + 1?"
        for s in range(samples):
            right = s % 2 == 0
            rows.append({"prompt": prompt, "completions": [f"{p} + 1 = {p + 1 if right else p + 2}.",
                                                            f"The answer is {p + 1 if right else p + 2}."],
                         "labels": [int(right), int(right)], "correct": right, "answer": str(p + 1 + (not right)),
                         "gold_answer": str(p + 1), "group": prompt, "source": "policy", "problem": p, "sample": s})
        rows += [{**rows[-samples], "source": "minimal-pair", "labels": [1, 0], "correct": False}] * pairs
    return rows


def test_a_size_takes_whole_problems_in_order_and_smaller_sizes_are_prefixes():
    rows = rows_of(problems=5, samples=3)
    small, large = data_curve.subset(rows, 4), data_curve.subset(rows, 7)
    policy = [r for r in small if r["source"] == "policy"]
    assert len(policy) == 6 and {r["problem"] for r in small} == {0, 1}  # a problem is never cut
    assert sum(r["source"] == "minimal-pair" for r in small) == 2
    assert small == [r for r in large if r["problem"] in (0, 1)]
    assert {r["problem"] for r in large} == {0, 1, 2}


def test_exact_sources_take_the_files_labels_with_the_minimal_pairs_or_arithmetic_rows(tmp_path):
    rows = rows_of(problems=2, samples=2)
    args = data_curve.parse_args(["--work", str(tmp_path), "--labels", "exact,exact-pairs,exact-arith,arith",
                                  "--arithmetic-per-solution", "3"])
    # 2 problems x 2 samples, one right each: 2 minimal pairs, 3 arithmetic rows from each right solution
    for label, expected in (("exact", 4), ("exact-pairs", 6), ("exact-arith", 4 + 2 * 3), ("arith", 2 * 3)):
        folder = tmp_path / label
        folder.mkdir()
        train_file, cost = data_curve.labelled(args, tmp_path, label, rows, folder)
        assert cost == {"rows": expected, "rollouts": 0, "tokens": 0}
        assert len(train_file.read_text().splitlines()) == expected
    arith = [json.loads(line) for line in (tmp_path / "arith" / "train.jsonl").read_text().splitlines()]
    assert {r["source"] for r in arith} == {"arithmetic"} and all(len(r["completions"]) == 1 for r in arith)


def test_points_report_rows_steps_and_rollouts_on_the_same_solutions(tmp_path, monkeypatch):
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    rows = rows_of(problems=6, samples=4)
    (tmp_path / "train" / "prm-train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "val" / "prm-eval.jsonl").write_text(json.dumps(rows[0]) + "\n")
    trained = {}

    def fake_train(run, config_file, config):
        trained[run.name] = (config["data"]["train"], config["training"]["max_steps"])
        return run

    def chains(right, wrong):
        return [{"prompt": "v", "correct": True, "answer": "1", "scores": [right]},
                {"prompt": "v", "correct": False, "answer": "2", "scores": [wrong]}]

    monkeypatch.setattr(ranking, "train_config", fake_train)
    monkeypatch.setattr(ranking, "training_log", lambda run: [{"step": 10, "loss": 0.69}, {"step": 20, "loss": 0.5}])
    monkeypatch.setattr(ranking, "scored", lambda run, data, cache: chains(0.9, 0.1) if "exact" in run.name
                        else chains(0.1, 0.9))
    monkeypatch.setattr(data_curve, "labelled", lambda args, work, label, rows, folder: (
        folder / "train.jsonl", {"rows": len(rows), "rollouts": 0 if label == "exact" else 3 * len(rows),
                                 "tokens": 0}))
    result = data_curve.main(["--work", str(tmp_path), "--sizes", "8,20", "--labels", "exact,omega",
                              "--min-steps", "2", "--out", str(tmp_path / "curve.json")])
    points = {(p["label"], p["solutions"]): p for p in result["points"]}
    assert set(points) == {("exact", 8), ("omega", 8), ("exact", 20), ("omega", 20)}
    assert points[("exact", 8)]["auroc"]["min"] == 1.0 and points[("omega", 8)]["auroc"]["min"] == 0.0
    # each later source is paired, problem by problem, against the first one at the same size
    assert "against" not in points[("exact", 8)]
    against = points[("omega", 8)]["against"]
    assert against["label"] == "exact"
    assert against["within_problem_auroc"]["difference"] == -1.0
    assert against["best_of_8"]["difference"] == -1.0
    assert points[("exact", 8)]["arithmetic_probe"]["step_auroc"] == 1.0
    assert points[("exact", 8)]["training_loss"] == {"first": 0.595, "last": 0.595}
    assert points[("omega", 20)]["rollouts"] == 3 * 25 and points[("exact", 20)]["problems"] == 5
    assert trained["exact-8-2-steps"][1] == 2 and trained["exact-20-4-steps"][1] == 4  # ceil(25 rows / batch 8)
    # more steps on the same rows is another run, never the shorter one taken as done
    data_curve.main(["--work", str(tmp_path), "--sizes", "8", "--labels", "exact", "--min-steps", "5",
                     "--out", str(tmp_path / "longer.json")])
    assert trained["exact-8-5-steps"][1] == 5 and trained["exact-8-2-steps"][1] == 2
    assert json.loads((tmp_path / "curve.json").read_text())["points"] == result["points"]


def recorded_configs(work, monkeypatch) -> dict:
    """A work folder of 2 problems x 2 samples drawn by /policies/room, with training and scoring faked: the
    returned dict collects each run's config under its name."""
    (work / "train").mkdir()
    (work / "val").mkdir()
    rows = rows_of(problems=2, samples=2)
    (work / "train" / "prm-train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "train" / "samples.jsonl").write_text(json.dumps({"settings": {"policy": "/policies/room"}}) + "\n")
    (work / "val" / "prm-eval.jsonl").write_text(json.dumps(rows[0]) + "\n")
    configs = {}

    def fake_train(run, config_file, config):
        configs[run.name] = config
        return run

    monkeypatch.setattr(ranking, "train_config", fake_train)
    monkeypatch.setattr(ranking, "training_log", lambda run: [{"step": 10, "loss": 0.69}, {"step": 20, "loss": 0.5}])
    monkeypatch.setattr(ranking, "scored", lambda run, data, cache: [
        {"prompt": "v", "correct": True, "answer": "1", "scores": [0.9]},
        {"prompt": "v", "correct": False, "answer": "2", "scores": [0.1]}])
    return configs


def test_the_policy_backbone_is_the_policy_that_drew_the_samples_and_its_runs_are_apart(tmp_path, monkeypatch):
    configs = recorded_configs(tmp_path, monkeypatch)
    for backbone in ("smollm2", "policy"):
        data_curve.main(["--work", str(tmp_path), "--sizes", "4", "--labels", "exact", "--min-steps", "2",
                         "--backbone", backbone, "--out", str(tmp_path / f"{backbone}.json")])
    assert set(configs) == {"exact-4-2-steps", "exact-4-2-steps-policy"}
    assert configs["exact-4-2-steps-policy"]["model"]["base"] == "/policies/room"
    assert configs["exact-4-2-steps-policy"]["lora"]["top_layers"] is None
    assert configs["exact-4-2-steps"]["model"]["base"] == "smollm2-135m"
    assert json.loads((tmp_path / "policy.json").read_text())["settings"]["backbone"] == "policy"


def test_a_full_fine_tune_trains_every_weight_at_its_own_lr_in_a_run_of_its_own(tmp_path, monkeypatch):
    configs = recorded_configs(tmp_path, monkeypatch)
    base = ["--work", str(tmp_path), "--sizes", "4", "--labels", "exact", "--min-steps", "8"]
    data_curve.main([*base, "--out", str(tmp_path / "lora.json")])
    result = data_curve.main([*base, "--finetune", "full", "--out", str(tmp_path / "full.json")])
    data_curve.main([*base, "--finetune", "full", "--lr", "1e-4", "--probe-checkpoints",
                     "--out", str(tmp_path / "full-1e-4.json")])
    data_curve.main([*base, "--head-init", "random", "--out", str(tmp_path / "random.json")])
    assert set(configs) == {"exact-4-8-steps", "exact-4-8-steps-full-lr5e-05", "exact-4-8-steps-full-lr0.0001",
                            "exact-4-8-steps-head-random"}
    assert configs["exact-4-8-steps-head-random"]["training"]["head_init"] == "random"
    assert configs["exact-4-8-steps"]["training"]["head_init"] == "probe"
    lora, full = configs["exact-4-8-steps"], configs["exact-4-8-steps-full-lr5e-05"]
    assert lora["model"]["finetune"] == "lora" and lora["training"]["lr"] == data_curve.DEFAULT_LR["lora"]
    assert full["model"]["finetune"] == "full" and "lora" not in full  # prmkit refuses lora keys on a full run
    assert full["training"]["lr"] == data_curve.DEFAULT_LR["full"]
    assert result["settings"]["finetune"] == "full" and result["settings"]["lr"] == data_curve.DEFAULT_LR["full"]
    # the probe's curve needs every checkpoint kept, a quarter of the steps apart
    probed = configs["exact-4-8-steps-full-lr0.0001"]["training"]
    assert probed["save_total_limit"] is None and probed["save_steps"] == 2 and probed["lr"] == 1e-4
    assert "save_total_limit" not in full["training"]


def test_the_probe_curve_reads_every_checkpoint_in_step_order(tmp_path, monkeypatch):
    run = tmp_path / "run"
    for step in (100, 25, 50):
        (run / f"checkpoint-{step}").mkdir(parents=True)
    monkeypatch.setattr(data_curve, "arithmetic_probe", lambda checkpoint, probe_file, folder, name: {
        "rows": 4, "true": 2, "step_auroc": int(checkpoint.name.rsplit("-", 1)[1]) / 100})
    curve = data_curve.probe_by_step(run, tmp_path / "probe.jsonl", tmp_path)
    assert [(c["step"], c["step_auroc"]) for c in curve] == [(25, 0.25), (50, 0.5), (100, 1.0)]


def test_the_arithmetic_probe_scores_fresh_equations_from_the_validation_right_samples(tmp_path, monkeypatch):
    (tmp_path / "val").mkdir()
    val = rows_of(problems=3, samples=2, pairs=0)  # one right and one wrong sample per problem
    (tmp_path / "val" / "prm-eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val))
    seen = {}

    def checks_the_sum(run, data, cache):  # a PRM that redoes `a + b = c`
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        seen["rows"] = rows
        out = []
        for r in rows:
            a, rest = r["completions"][0].split(" + ")
            b, c = rest.rstrip(".").split(" = ")
            out.append({"correct": r["correct"], "scores": [0.9 if int(a) + int(b) == int(c) else 0.1]})
        return out

    monkeypatch.setattr(ranking, "scored", checks_the_sum)
    probe = data_curve.arithmetic_probe(tmp_path / "run", data_curve.probe_rows(tmp_path), tmp_path)
    assert probe["rows"] == len({(r["prompt"], r["completions"][0]) for r in seen["rows"]})  # no row twice
    assert probe["rows"] <= 3 * data_curve.PROBE_PER_SOLUTION  # from the right samples only
    assert probe["step_auroc"] == 1.0 and 0 < probe["true"] < probe["rows"]
    assert {r["prompt"] for r in seen["rows"]} == {r["prompt"] for r in val}
    # fresh numbers: not one probe row repeats a validation step
    assert not {r["completions"][0] for r in seen["rows"]} & {c for r in val for c in r["completions"]}


def test_the_probe_draws_once_per_distinct_right_sample(tmp_path):
    (tmp_path / "val").mkdir()
    val = rows_of(problems=2, samples=2, pairs=0)
    copies = [r for r in val if r["correct"]] * 5  # a sharp policy writes its right sample again, word for word
    (tmp_path / "val" / "prm-eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val + copies))
    once = [json.loads(line) for line in data_curve.probe_rows(tmp_path).read_text().splitlines()]
    (tmp_path / "val" / "prm-eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val))
    assert once == [json.loads(line) for line in data_curve.probe_rows(tmp_path).read_text().splitlines()]
    assert len({(r["prompt"], r["completions"][0]) for r in once}) == len(once)


def test_within_phrasing_pairs_only_rows_of_the_same_words(tmp_path, monkeypatch):
    rows = [{"prompt": "p", "completions": [step], "labels": [int(ok)], "correct": ok}
            for step, ok in (("Tom has 2 + 3 = 5 apples.", True), ("Tom has 4 + 4 = 9 apples.", False),
                             ("Ann pays 6 * 2 = 12 dollars.", True), ("Ann pays 3 * 3 = 10 dollars.", False),
                             ("Ann pays 7 * 1 = 7 dollars.", True))]
    probe_file = tmp_path / "probe.jsonl"
    probe_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a PRM that checks every sum but scores Tom's words higher than Ann's whatever the numbers: pooled, Tom's
    # false row beats Ann's true ones and the sums look half learned
    scores = [0.8, 0.7, 0.3, 0.2, 0.25]
    monkeypatch.setattr(ranking, "scored", lambda run, data, cache: [
        {"correct": r["correct"], "scores": [s]} for r, s in zip(rows, scores)])
    probe = data_curve.arithmetic_probe(tmp_path / "run", probe_file, tmp_path)
    assert probe["within_phrasing"]["phrasings"] == 2 and probe["within_phrasing"]["pairs"] == 1 + 2
    assert probe["within_phrasing"]["auroc"] == 1.0  # every true row above the false row of the same words
    assert probe["step_auroc"] == 4 / 6


def test_the_training_loss_is_summed_up_at_both_ends():
    log = [{"step": 10 * i, "loss": loss} for i, loss in enumerate([0.9, 0.7, 0.8, 0.6, 0.5, 0.4, 0.3], 1)]
    assert data_curve.loss_ends(log) == {"first": 0.8, "last": 0.4}
    assert data_curve.loss_ends(log[:1]) == {"first": 0.9, "last": 0.9}
    assert data_curve.loss_ends([]) == {"first": None, "last": None}


def test_sizes_beyond_the_sampled_solutions_say_how_to_get_more(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "prm-train.jsonl").write_text(json.dumps(rows_of(1, 2)[0]) + "\n")
    with pytest.raises(SystemExit, match="onpolicy.py"):
        data_curve.main(["--work", str(tmp_path), "--sizes", "5", "--out", str(tmp_path / "c.json")])


@pytest.mark.slow
def test_rollout_labels_keep_each_solutions_grade_and_are_not_paid_twice(tiny_llama, tmp_path, monkeypatch):
    rows = rows_of(problems=2, samples=2)
    args = data_curve.parse_args(["--work", str(tmp_path), "--policy", str(tiny_llama), "--backend", "transformers",
                                  "--k", "2", "--max-new-tokens", "6"])
    folder = tmp_path / "omega-4"
    folder.mkdir()
    train_file, cost = data_curve.labelled(args, tmp_path, "omega", rows, folder)
    out = [json.loads(line) for line in train_file.read_text().splitlines()]
    assert cost["rows"] == 4 and cost["rollouts"] > 0
    policy = [r for r in rows if r["source"] == "policy"]
    assert [(r["prompt"], r["completions"], r["correct"], r["group"]) for r in out] == \
        [(r["prompt"], r["completions"], r["correct"], r["group"]) for r in policy]
    assert all(len(r["labels"]) == len(r["completions"]) for r in out)

    def no_second_labelling(*a, **k):
        raise AssertionError("labelled again")

    monkeypatch.setattr(data_curve.subprocess, "run", no_second_labelling)
    assert data_curve.labelled(args, tmp_path, "omega", rows, folder)[1] == cost
