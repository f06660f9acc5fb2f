"""bench/loop.py --held-out-seed: a held-out set drawn with another seed, after the other splits and disjoint from
them, leaving every problem a choice was made on as it was; a work folder keeps the seed it drew with."""

import json

import pytest

import loop
from lifecycle.problems import SEEDS, disjoint_splits, redrawn_split

SIZES = {"sft": 40, "label": 8, "held_out": 12, "validation": 10}


def prompts(records) -> set[str]:
    return {r["prompt"] for r in records}


def test_a_redrawn_held_out_split_is_new_disjoint_and_leaves_the_others_alone():
    standard = disjoint_splits(SIZES)
    redrawn = redrawn_split("held_out", 12, 4242, standard)
    assert len(redrawn["held_out"]) == 12
    assert prompts(redrawn["held_out"]) != prompts(standard["held_out"])
    for name in ("sft", "label", "validation"):
        assert redrawn[name] == standard[name]
        assert not prompts(redrawn["held_out"]) & prompts(redrawn[name])
    assert redrawn_split("held_out", 12, 4242, standard) == redrawn  # the same seed draws the same problems


def test_the_loop_writes_the_redrawn_held_out_problems_and_refuses_another_seed_in_the_same_work(tmp_path):
    args = loop.parse_args(["--work", str(tmp_path), "--policy", str(tmp_path), "--held-out", "12",
                            "--validation", "10", "--label-problems", "8", "--held-out-seed", "4242"])
    runner = loop.Loop(args)
    runner.state["stages"]["policy"] = {"done": True, "recipe": {"chains": 40}}
    result = runner.stage("problems", runner.problems)
    assert result["held_out_seed"] == 4242
    held_out = [json.loads(line) for line in (tmp_path / "held_out.jsonl").read_text().splitlines()]
    expected = redrawn_split("held_out", 12, 4242, disjoint_splits(SIZES))["held_out"]
    assert [r["prompt"] for r in held_out] == [r["prompt"] for r in expected]

    other = loop.parse_args(["--work", str(tmp_path), "--held-out-seed", str(SEEDS["held_out"])])
    with pytest.raises(SystemExit, match="drawn with seed 4242"):
        loop.Loop(other)
