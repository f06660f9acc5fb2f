"""bench/rl_control.py's stages on a tiny random policy: the pool filtered by prmkit rl-filter, one GRPO run per
learning rate judged on the validation problems after its last step and a snapshot on the way, the held-out problems
unread under --validation-only or when no run beats the starting policy on validation, and read once for the run
that does; a later call continues from the finished files instead of training again."""

import json
import shutil

import pytest

import rl_control

pytestmark = pytest.mark.slow


CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


@pytest.fixture(scope="module")
def chat_policy(tiny_llama, tmp_path_factory):
    """The tiny policy with a chat template: TRL's GRPO sends the benchmark's prompts as chat messages."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("chat-policy") / "policy"
    shutil.copytree(tiny_llama, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def tiny_control(tiny_llama, work, out, *extra):
    return rl_control.main(["--work", str(work), "--policy", str(tiny_llama), "--pool", "2", "--k", "2",
                            "--band", "0,1", "--validation", "3", "--held-out", "3", "--lrs", "1e-6", "--steps", "2",
                            "--prompts-per-step", "1", "--group", "2", "--max-completion-length", "8",
                            "--out", str(out), *extra])


def test_the_sweep_leaves_the_held_out_problems_unread_until_asked_and_resumes(chat_policy, tmp_path, monkeypatch):
    work, out = tmp_path / "work", tmp_path / "rl_control.json"
    first = tiny_control(chat_policy, work, out, "--validation-only", "--snapshots", "1")
    assert first["pool"]["prompts"] == 2 and first["pool"]["kept"] == 2  # the band 0-1 keeps every problem
    assert first["held_out"].startswith("not read") and not list(work.glob("held-out-*"))
    run = first["validation"]["runs"]["1e-06"]
    assert {"after", "after - before", "drift", "steps", "snapshots"} <= set(run) and len(run["steps"]) == 2
    assert set(run["snapshots"]) == {"1"} and set(run["snapshots"]["1"]) == {"after", "after - before"}
    assert (work / "lr-1e-06" / "outcome" / "step-1" / "config.json").is_file()
    assert sorted(p.name for p in work.glob("validation-lr-*")) == ["validation-lr-1e-06-step-1.jsonl",
                                                                    "validation-lr-1e-06-step-2.jsonl"]
    final = work / "lr-1e-06" / "outcome" / "final"
    trained_at = (final / "config.json").stat().st_mtime_ns
    assert out.with_suffix(".png").is_file()

    # the tiny policy gets nothing right before or after: no run beats the start, so the held-out stays unread
    second = tiny_control(chat_policy, work, out, "--snapshots", "1")
    assert (final / "config.json").stat().st_mtime_ns == trained_at  # finished run and evaluations are read again
    assert second["held_out"].startswith("not read: no run beat the starting policy") and "chosen_lr" not in second
    assert not list(work.glob("held-out-*"))

    # a replication of settings chosen before reads the held-out problems whatever validation says
    replicated = tiny_control(chat_policy, work, out, "--snapshots", "1", "--replicate")
    assert replicated["chosen_lr"] == "1e-06" and replicated["chosen_steps"] == 2 and "replicate" in replicated
    assert set(replicated["held_out"]) == {"before", "after", "after - before"}
    for held_out in work.glob("held-out-*"):
        held_out.unlink()

    # a run that beats it on validation (scripted: the 2-step policy answers every validation problem) is read once
    real = rl_control.greedy_correct

    def scripted(policy, problems, path, max_new_tokens):
        correct = real(policy, problems, path, max_new_tokens)
        return [1] * len(correct) if path.name == "validation-lr-1e-06-step-2.jsonl" else correct

    monkeypatch.setattr(rl_control, "greedy_correct", scripted)
    third = tiny_control(chat_policy, work, out, "--snapshots", "1")
    assert third["chosen_lr"] == "1e-06" and third["chosen_steps"] == 2
    assert set(third["held_out"]) == {"before", "after", "after - before"}
    assert sorted(p.name for p in work.glob("held-out-*")) == ["held-out-before.jsonl",
                                                               "held-out-lr-1e-06-step-2.jsonl"]
    assert json.loads(out.read_text())["held_out"]["before"]["accuracy"] == third["held_out"]["before"]["accuracy"]


@pytest.mark.parametrize("flags", [["--replicate"], ["--replicate", "--lrs", "1e-5", "--validation-only"]])
def test_a_replication_names_one_learning_rate_and_reads_the_held_out_problems(flags, capsys):
    with pytest.raises(SystemExit):
        rl_control.parse_args(flags)
    assert "--replicate" in capsys.readouterr().err


def test_a_snapshot_must_come_before_the_last_step():
    with pytest.raises(SystemExit):
        rl_control.parse_args(["--steps", "4", "--snapshots", "4"])


def test_a_process_rule_runs_at_the_control_settings_in_a_run_of_its_own(chat_policy, tiny_run, tmp_path):
    work, out = tmp_path / "work", tmp_path / "rl_min.json"
    result = tiny_control(chat_policy, work, out, "--validation-only", "--reward", "min", "--prm", str(tiny_run),
                          "--outcome-weight", "0.1", "--seed", "1")
    assert result["settings"]["reward"] == "min" and result["held_out"].startswith("not read")
    # its own folder and files, named apart from the control's (lr-1e-06, seed 0), so neither is taken for the other
    assert (work / "lr-1e-06-min-outcome-0.1-seed-1" / "min" / "final" / "config.json").is_file()
    assert [p.name for p in work.glob("validation-lr-*")] == ["validation-lr-1e-06-min-outcome-0.1-seed-1-step-2.jsonl"]
    steps = result["validation"]["runs"]["1e-06"]["steps"]
    # the training samples' correctness is watched, though this reward does not train on it alone
    assert len(steps) == 2 and all(0 <= s["answer_accuracy"] <= 1 and s["steps_per_completion"] > 0 for s in steps)
    assert "after - control" not in result["validation"]["runs"]["1e-06"]  # no control of seed 1 judged yet


def test_the_exact_judge_stands_in_for_the_prm_in_a_run_named_for_it(chat_policy, tmp_path):
    work, out = tmp_path / "work", tmp_path / "rl_exact.json"
    result = tiny_control(chat_policy, work, out, "--validation-only", "--reward", "min", "--prm", "exact",
                          "--outcome-weight", "0.1")
    assert result["settings"]["prm"] == "exact"
    # apart from a learned PRM's run of the same rule and weight, which would otherwise be taken for this one
    assert (work / "lr-1e-06-min-exact-outcome-0.1" / "min" / "final" / "config.json").is_file()
    steps = result["validation"]["runs"]["1e-06"]["steps"]
    # the tiny policy writes nothing right, so the judge's reward (every step right) is 0 throughout
    assert len(steps) == 2 and all(s["reward"] == 0 for s in steps)


def test_a_process_rule_is_paired_against_the_control_of_its_seed(chat_policy, tiny_run, tmp_path):
    work = tmp_path / "work"
    process = ["--validation-only", "--reward", "min", "--prm", str(tiny_run), "--outcome-weight", "0.1"]
    tiny_control(chat_policy, work, tmp_path / "rl_min.json", *process)
    tiny_control(chat_policy, work, tmp_path / "rl_control.json", "--validation-only")
    # the control answers the first validation problem, the process run the other two: their finished files say so
    for name, answers in (("validation-lr-1e-06-step-2.jsonl", [1, 0, 0]),
                          ("validation-lr-1e-06-min-outcome-0.1-step-2.jsonl", [0, 1, 1])):
        rows = rl_control.read_jsonl(work / name)
        rl_control.write_jsonl([{**r, "correct": bool(c)} for r, c in zip(rows, answers)], work / name)
    again = tiny_control(chat_policy, work, tmp_path / "rl_min.json", *process)  # reads the finished files only
    run = again["validation"]["runs"]["1e-06"]
    assert run["control"]["accuracy"] == pytest.approx(1 / 3) and run["after"]["accuracy"] == pytest.approx(2 / 3)
    assert run["after - control"]["difference"] == pytest.approx(1 / 3)
    assert run["after - control"]["low"] <= 1 / 3 <= run["after - control"]["high"]


@pytest.mark.parametrize("flags, message", [
    (["--reward", "min"], "scores with a PRM"),
    (["--prm", "runs/prm"], "go with --reward sum or min"),
    (["--outcome-weight", "0.1"], "go with --reward sum or min"),
])
def test_a_reward_and_its_prm_go_together(flags, message, capsys):
    with pytest.raises(SystemExit):
        rl_control.parse_args(flags)
    assert message in capsys.readouterr().err


def test_a_judged_file_is_reused_only_for_the_problems_it_was_judged_on(tmp_path):
    problems = [{"prompt": "1 + 1?", "gold_answer": "2"}, {"prompt": "2 + 2?", "gold_answer": "4"}]
    path = tmp_path / "validation-before.jsonl"
    rl_control.write_jsonl([{"prompt": p["prompt"], "answer": "2", "correct": c}
                            for p, c in zip(problems, (True, False))], path)
    # a finished file for these problems is read back: the policy (no such folder) is never loaded
    assert rl_control.greedy_correct(str(tmp_path / "no-policy"), problems, path, 8) == [1, 0]
    # as many rows for other problems (a work folder reused with another draw) stop the run instead of passing
    other = [problems[1], problems[0]]
    with pytest.raises(SystemExit, match="judged on other problems"):
        rl_control.greedy_correct(str(tmp_path / "no-policy"), other, path, 8)


def test_a_process_run_counts_groups_without_signal_by_its_own_advantages(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    history = [{"step": 1, "reward": 0.5, "frac_reward_zero_std": 0.5, rl_control.FLAT: 0.0},
               {"step": 2, "reward": 0.25, "frac_reward_zero_std": 0.75, rl_control.FLAT: 0.25},
               {"step": 2, "train_runtime": 9.0}]
    (run / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (run / "steps.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [
        {"step": 1, "answer_accuracy": 0.1, "steps_per_completion": 3.0},
        {"step": 1, "answer_accuracy": 0.2, "steps_per_completion": 4.0},  # a resumed run logs its step again
        {"step": 2, "answer_accuracy": 0.3, "steps_per_completion": 2.0}]))
    log = rl_control.trainer_log(run)
    assert [e["flat_group_share"] for e in log] == [0.0, 0.25]  # the loss's count, not TRL's per-completion one
    assert [e["answer_accuracy"] for e in log] == [0.2, 0.3]
    assert rl_control.drift(log, window=1)["flat_group_share"] == {"first": 0.0, "last": 0.25}

    # a run of TRL's own trainer has no count of its own: TRL's is the loss's there
    history = [{k: v for k, v in e.items() if k != rl_control.FLAT} for e in history]
    (run / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert [e["flat_group_share"] for e in rl_control.trainer_log(run)] == [0.5, 0.75]
