"""bench/ranking.py: the choice is made on validation and written down before the held-out file is read, and the
figures it reports are prmkit eval's within-problem metrics over the scored samples (no model: scores are given)."""

import json

import pytest

import ranking


def chain(prompt: str, correct: bool, scores: list[float], answer: str) -> dict:
    return {"prompt": prompt, "correct": correct, "answer": answer, "scores": scores}


def problem(prompt: str, right_score: float, wrong_score: float) -> list[dict]:
    """Two right samples and two wrong ones; the PRM scores the right ones `right_score` at their weakest step."""
    return [chain(prompt, True, [0.9, right_score], "4"), chain(prompt, False, [0.9, wrong_score], "5"),
            chain(prompt, True, [right_score, 0.9], "4"), chain(prompt, False, [wrong_score], "5")]


def test_within_problem_figures_of_scored_samples():
    chains = problem("p1", 0.8, 0.2) + problem("p2", 0.3, 0.6) + [chain("p3", True, [0.5], "1")] * 2
    report, groups = ranking.evaluate(chains)
    # p1 ranks right above wrong (1.0), p2 the reverse (0.0); p3 has one outcome only
    assert report["auroc"]["min"] == pytest.approx(0.5) and report["problems_with_both"] == 2
    assert report["pairs"] == 8
    assert ranking.per_problem_auroc(groups) == {"p1": 1.0, "p2": 0.0}
    assert ranking.best_of_correct(groups) == {"p1": 1.0, "p2": 0.0, "p3": 1.0}


def test_the_choice_is_written_before_the_held_out_file_is_read(tmp_path, monkeypatch):
    for folder in ("train", "val", "held-out"):
        (tmp_path / folder).mkdir()
    row = {"prompt": "p", "completions": ["a"], "labels": [1], "correct": True}
    (tmp_path / "train" / "prm-train.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "val" / "prm-eval.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "held-out" / "prm-eval.jsonl").write_text(json.dumps(row) + "\n")
    out = tmp_path / "ranking.json"
    seen = []
    validation = {"A-step-loss": problem("v", 0.5, 0.5), "B-ranking-0.5": problem("v", 0.9, 0.1),
                  "C-ranking-2.0": problem("v", 0.6, 0.4)}

    def fake_scored(run, data, cache):
        name = run.name
        if "held-out" in str(data):
            seen.append(("held-out", json.loads(out.read_text()).get("chosen")))
            return problem("h1", 0.9, 0.1) + problem("h2", 0.9, 0.1) if name == "B-ranking-0.5" \
                else problem("h1", 0.1, 0.9) + problem("h2", 0.5, 0.5)
        seen.append(("validation", name))
        return validation[name]

    monkeypatch.setattr(ranking, "train", lambda work, name, loss, steps, backbone: work / "runs" / name)
    monkeypatch.setattr(ranking, "scored", fake_scored)
    monkeypatch.setattr(ranking, "training_log", lambda run: [])
    result = ranking.main(["--work", str(tmp_path), "--out", str(out)])
    assert result["chosen"] == "B-ranking-0.5"
    assert [s for s in seen if s[0] == "held-out"] == [("held-out", "B-ranking-0.5")] * 2
    assert seen.index(("held-out", "B-ranking-0.5")) > max(i for i, s in enumerate(seen) if s[0] == "validation")
    paired = result["held_out_paired"]["within_problem_auroc"]
    assert paired["difference"] == pytest.approx(0.75) and paired["problems"] == 2
    assert set(result["held_out"]) == {"A-step-loss", "B-ranking-0.5"}


def test_validation_only_never_opens_the_held_out_file(tmp_path, monkeypatch):
    for folder in ("train", "val"):
        (tmp_path / folder).mkdir()
    row = {"prompt": "p", "completions": ["a"], "labels": [1], "correct": True}
    (tmp_path / "train" / "prm-train.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "val" / "prm-eval.jsonl").write_text(json.dumps(row) + "\n")
    read = []

    def fake_scored(run, data, cache):
        read.append(str(data))
        return problem("v", 0.9, 0.1) if run.name == "B-ranking-0.5" else problem("v", 0.5, 0.5)

    monkeypatch.setattr(ranking, "build_policy", lambda recipe: tmp_path / "policy")
    monkeypatch.setattr(ranking, "train", lambda work, name, loss, steps, backbone: work / "runs" / name)
    monkeypatch.setattr(ranking, "scored", fake_scored)
    monkeypatch.setattr(ranking, "training_log", lambda run: [])
    result = ranking.main(["--work", str(tmp_path), "--out", str(tmp_path / "r.json"), "--backbone", "policy",
                           "--conditions", "A-step-loss,B-ranking-0.5", "--validation-only"])
    assert result["chosen"] == "B-ranking-0.5" and "held_out" not in result
    assert read and all("held-out" not in path for path in read)


def test_the_policy_backbone_keeps_every_layer_and_runs_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(ranking, "build_policy", lambda recipe: tmp_path / "policy")
    policy = ranking.prm_config(tmp_path, "A", {}, 10, "policy")
    default = ranking.prm_config(tmp_path, "A", {}, 10)
    assert policy["model"] == {"base": str(tmp_path / "policy"), "num_layers": None, "finetune": "lora"}
    assert policy["lora"]["top_layers"] is None and default["lora"]["top_layers"] == 8
    assert default["model"]["base"] == "smollm2-135m" and default["model"]["num_layers"] == 16
    assert policy["output_dir"] != default["output_dir"]
    assert policy["data"] == default["data"]  # the same training file: only the backbone differs
