"""bench/loop.py's stages on tiny random models: the mechanics (labels written, PRMs trained, search rows graded,
the tables made), and a loop killed in the middle of its search continues to the same files."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import loop  # noqa: E402
import loop_recipes  # noqa: E402
from prmkit.files import read_jsonl  # noqa: E402

pytestmark = pytest.mark.slow


def tiny_loop(work: Path, policy: Path, out: Path, *extra: str) -> dict:
    return loop.main([*extra,
        "--work", str(work), "--policy", str(policy), "--prm-base", str(policy), "--prm-layers", "0",
        "--prm-top-layers", "0", "--label-problems", "2", "--solutions", "2", "--k", "2", "--held-out", "3", "--validation", "3",
        "--budgets", "1,2", "--tree-problems", "2", "--tree-budgets", "4", "--max-new-tokens", "12",
        "--max-rounds", "2", "--train-steps", "2", "--backend", "transformers", "--out", str(out)])


def test_the_loop_runs_every_stage_and_continues_after_a_kill(tiny_llama, tmp_path):
    work, out = tmp_path / "work", tmp_path / "loop.json"
    stopped = tiny_loop(work, tiny_llama, out, "--stop-after", "exact-labels")
    assert list(stopped["stages"]) == list(loop.STAGES[:loop.STAGES.index("exact-labels") + 1])
    assert not (work / "runs").exists() and not out.exists()
    problems = {split: [r["prompt"] for r in read_jsonl(work / f"{split}.jsonl")]
                for split in ("label", "held_out", "validation")}
    assert len({p for prompts in problems.values() for p in prompts}) == sum(map(len, problems.values()))

    result = tiny_loop(work, tiny_llama, out)
    mc, omega, exact = (read_jsonl(work / f"labels-{m}.jsonl") for m in ("mc", "omega", "exact"))
    assert mc and [r["completions"] for r in mc] == [r["completions"] for r in exact]
    assert all(r["label"]["method"] == "mc" for r in mc) and all(r["label"]["method"] == "omega" for r in omega)
    assert all(set(r["labels"]) <= {0, 1} and len(r["labels"]) == len(r["completions"]) for r in exact)
    for source in loop.LABEL_SOURCES:
        assert (work / "runs" / source / "prmkit.json").is_file()
    rows = read_jsonl(work / "search.jsonl")
    assert len(rows) == 3 and all(len(r["samples"]) == 2 and r["greedy"]["correct"] is not None for r in rows)
    tree = read_jsonl(work / "search-tree.jsonl")
    assert len(tree) == 2 and all("4" in r["beam"] and "4" in r["dvts"] for r in tree)
    rescored = read_jsonl(work / "search-exact-prm.jsonl")
    assert [[s["solution"] for s in r["samples"]] for r in rescored] == [[s["solution"] for s in r["samples"]]
                                                                        for r in rows]
    report = result["stages"]["report"]
    assert set(report["table"]["majority"]) == {"1", "2"}
    assert "weighted-best-of-n (exact PRM) - majority @ 2" in report["comparisons"]
    # prmkit search wrote the policy's mean log-prob on every sample: its confidence is a chooser beside the PRMs
    assert set(report["table"]["best-of-n (policy confidence)"]) == {"1", "2"}
    assert "best-of-n (mc PRM) - best-of-n (policy confidence) @ 2" in report["versus_confidence"]
    assert [row["prm"] for row in result["stages"]["eval"]["rows"]] == list(loop.LABEL_SOURCES)
    assert out.with_suffix(".png").is_file() and json.loads(out.read_text())["loop_seconds"] > 0

    # a kill in the middle of the search: the stages from there on are undone and half the rows are gone
    searched = (work / "search.jsonl").read_bytes()
    state = json.loads((work / "state.json").read_text())
    for name in ("search", "search-tree", "eval", "rescore", "report"):
        del state["stages"][name]
    (work / "state.json").write_text(json.dumps(state))
    (work / "search.jsonl").write_bytes(searched[:len(searched) // 2])
    again = tiny_loop(work, tiny_llama, out)
    assert (work / "search.jsonl").read_bytes() == searched
    assert again["stages"]["report"]["table"] == report["table"]
    assert again["stages"]["train-mc"]["seconds"] == result["stages"]["train-mc"]["seconds"]  # not run again


def test_the_recipe_choice_trains_each_recipe_and_scores_the_same_validation_samples(tiny_llama, tmp_path,
                                                                                       monkeypatch):
    work = tmp_path / "work"
    tiny_loop(work, tiny_llama, tmp_path / "loop.json", "--stop-after", "exact-labels")
    monkeypatch.setattr(loop_recipes, "RECIPES", [loop_recipes.Recipe("mc", "policy", 0, 0),
                                                  loop_recipes.Recipe("exact", "policy", 0, 0, chains=4, steps=1)])
    report = loop_recipes.main(["--work", str(work), "--n", "2", "--out", str(tmp_path / "recipes.json"),
                                "--max-new-tokens", "12", "--backend", "transformers"])
    names = ["mc-policy-alllayers-topall", "exact-policy-alllayers-topall-4chains-1steps"]
    assert list(report["recipes"]) == names
    baseline = report["baselines"][loop_recipes.CONFIDENCE]  # the policy's confidence on the same samples
    assert baseline["step_auroc"] is None and 0 <= baseline["aggregates"]["exp(mean_logprob)"]["best-of-n"] <= 1
    for name in names:
        assert (work / "runs" / f"recipe-{name}" / "prmkit.json").is_file()
        cells = report["recipes"][name]["aggregates"]
        assert set(cells) == set(loop_recipes.AGGREGATES)
        assert all(0 <= c["best-of-n"] <= 1 and "weighted-best-of-n - majority" in c for c in cells.values())
    rows = [read_jsonl(work / f"validation-{name}.jsonl") for name in names]
    assert [[s["solution"] for s in r["samples"]] for r in rows[0]] == \
        [[s["solution"] for s in r["samples"]] for r in rows[1]]
    assert len(rows[0]) == 3 and all(len(r["samples"]) == 2 for r in rows[0])
    # the larger set: the policy's solutions of problems no other split holds, exactly labelled
    more = read_jsonl(work / "labels-exact-4.jsonl")
    seen = {r["prompt"] for split in ("label", "held_out", "validation") for r in read_jsonl(work / f"{split}.jsonl")}
    assert more and not {r["prompt"] for r in more} & seen
    assert all(set(r["labels"]) <= {0, 1} and len(r["labels"]) == len(r["completions"]) for r in more)

