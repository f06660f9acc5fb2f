"""Does a PRM's step reward make the lifecycle benchmark's policy more accurate under GRPO, and does it beat the
answer's correctness alone? Four runs of TRL's GRPO from the same policy, on the same training problems, for the
same number of steps, with the same seed and settings; only the reward differs:

- `outcome`: the answer's correctness (prmkit.answers against the gold answer), TRL's GRPOTrainer;
- `prm-scalar`: the PRM's chain reward (`PRMReward`, one number per completion), TRL's GRPOTrainer;
- `sum` and `min`: the PRM's step rewards as per-token advantages (`prmkit.rl.ProcessGRPOTrainer`, no outcome term).

Then greedy accuracy on the loop's held-out problems for the policy before and after each run (`prmkit search
--budget-methods greedy`, as bench/loop.py measures it), with bootstrap intervals and paired differences, the wall
time per step, and the drift over training: steps and tokens per completion, the reward, and the training samples'
answer accuracy (logged for every run, rewarded only by `outcome`).

    python bench/loop.py --stop-after train-exact        # the policy, problems and PRMs this reads
    python bench/process_grpo.py --loop-work loop-work   # then this; run it again after a kill to continue

Each run saves checkpoints and resumes from the last one; a finished run or evaluation is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle import analysis  # noqa: E402
from lifecycle.exact_reward import EXACT, ExactStepReward  # noqa: E402
from lifecycle.tables import number  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic  # noqa: E402
from prmkit.generation.options import DEFAULT_SYSTEM_PROMPT  # noqa: E402

CONDITIONS = ("outcome", "prm-scalar", "sum", "min")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop-work", default="loop-work", help="bench/loop.py's --work folder")
    parser.add_argument("--work", default=None, help="this benchmark's files (default: LOOP_WORK/grpo)")
    parser.add_argument("--prm", default="exact", help="the PRM: a run name under LOOP_WORK/runs (default: the "
                        "exact-label PRM, the best step AUROC of the loop) or a run folder")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--train-split", default="label", help="LOOP_WORK/<split>.jsonl: the GRPO problems")
    parser.add_argument("--steps", type=int, default=48, help="optimizer steps per run")
    parser.add_argument("--prompts-per-step", type=int, default=1)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (num_generations)")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient against the starting policy "
                        "(TRL's default 0: no reference model)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--aggregate", default="min", help="the PRM's chain reward (PRMReward's aggregate)")
    parser.add_argument("--held-out", type=int, default=None, help="evaluate on the first N held-out problems")
    parser.add_argument("--policy", default=None, help="the starting policy (default: the loop's)")
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "process_grpo.json"))
    return parser.parse_args(argv)


class AnswerReward:
    """1.0 when a completion's final answer equals the problem's gold answer (the `gold_answer` column)."""

    __name__ = "answer"

    def __init__(self):
        from prmkit.answers import AnswerChecker
        self.checker = AnswerChecker()

    def __call__(self, prompts, completions, gold_answer, **_) -> list[float]:
        from prmkit.answers import extract_answer
        from prmkit.scoring.inputs import completion_text
        answers = [extract_answer(completion_text(c)) for c in completions]
        return [float(ok) for ok in self.checker.check_many(answers, [str(g) for g in gold_answer])]


def step_log(path: Path, checker: AnswerReward, golds: dict[str, str]):
    """A TrainerCallback that appends, after every optimizer step, its wall time and what that step's samples
    looked like: tokens and steps per completion and the answers' accuracy (for every reward, so a PRM-rewarded
    run's accuracy is watched even though it does not train on it)."""
    from transformers import TrainerCallback

    from prmkit.data.records import split_steps
    from prmkit.scoring.inputs import completion_text, prompt_text

    class StepLog(TrainerCallback):
        trainer = None

        def on_step_begin(self, *_, **__):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, *_, **__):
            logs = self.trainer._logs
            texts = [completion_text(c) for c in logs["completion"]]
            correct = checker([], logs["completion"], [golds[prompt_text(p)] for p in logs["prompt"]])
            tokenizer = self.trainer.processing_class
            row = {"step": state.global_step, "seconds": time.perf_counter() - self.started,
                   "completions": len(texts), "answer_accuracy": sum(correct) / len(correct),
                   "steps_per_completion": sum(len(split_steps(t, "\n\n")) for t in texts) / len(texts),
                   "tokens_per_completion": sum(len(tokenizer(t)["input_ids"]) for t in texts) / len(texts),
                   "reward": {name: sum(v) / len(v) for name, v in logs["rewards"].items() if len(v)}}
            with path.open("a") as f:
                f.write(json.dumps(row) + "\n")

    return StepLog()


def snapshots(folder: Path, steps: set[int]):
    """A TrainerCallback that saves the policy (weights and tokenizer, no optimizer state) after each of `steps` to
    folder/step-N, so one run is judged at several lengths instead of one run per length."""
    import shutil

    from transformers import TrainerCallback

    class Snapshot(TrainerCallback):
        trainer = None

        def on_step_end(self, args, state, *_, **__):
            target = folder / f"step-{state.global_step}"
            if state.global_step not in steps or (target / "config.json").is_file():
                return
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)  # left by a kill mid-save
            self.trainer.save_model(str(partial))
            self.trainer.processing_class.save_pretrained(partial)
            partial.rename(target)

    return Snapshot()


def train(condition: str, args, work: Path, policy: Path, prm_run: Path, rows: list[dict],
          snapshot_steps: set[int] = frozenset()) -> Path:
    """GRPO from `policy` with `condition`'s reward; the final policy folder (skipped when it exists). The policy
    after each of `snapshot_steps` is saved beside it as step-N. `args.seed` (default 0) seeds the run;
    `args.outcome_weight` (default 0) mixes answer correctness into the `sum` and `min` rules, whose step rewards
    come from the PRM run `prm_run`, or from the exact judge where it is "exact" (`lifecycle.exact_reward`)."""
    final = work / condition / "final"
    if (final / "config.json").is_file():
        return final
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer
    from prmkit.scoring.reward import PRMReward

    seed = getattr(args, "seed", 0)
    torch.manual_seed(seed)
    folder = work / condition
    folder.mkdir(parents=True, exist_ok=True)
    prompts = [[{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": r["prompt"]}]
               for r in rows]
    dataset = Dataset.from_dict({"prompt": prompts, "gold_answer": [str(r["gold_answer"]) for r in rows]})
    settings = dict(
        output_dir=str(folder), use_cpu=not torch.cuda.is_available(), max_steps=args.steps,
        per_device_train_batch_size=args.group, gradient_accumulation_steps=args.prompts_per_step,
        num_generations=args.group, max_completion_length=args.max_completion_length,
        temperature=args.temperature, learning_rate=args.lr, beta=getattr(args, "beta", 0.0), logging_steps=1,
        report_to=[], seed=seed, bf16=False,
        save_strategy="steps", save_steps=max(args.steps // 4, 1), save_total_limit=1,
        disable_tqdm=not sys.stderr.isatty())
    tokenizer = AutoTokenizer.from_pretrained(policy)
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    answers = AnswerReward()
    log = step_log(folder / "steps.jsonl", answers, {r["prompt"]: str(r["gold_answer"]) for r in rows})
    snapshot = snapshots(folder, set(snapshot_steps))
    common = dict(model=model, args=None, train_dataset=dataset, processing_class=tokenizer,
                  callbacks=[log, snapshot])
    if condition in ("sum", "min"):
        common["args"] = ProcessGRPOConfig(**settings, advantage_rule=condition, answer_column="gold_answer",
                                           outcome_weight=getattr(args, "outcome_weight", 0.0))
        if str(prm_run) == EXACT:
            prm = ExactStepReward(rows)
        else:
            prm = PRMReward(prm_run, aggregate=args.aggregate, device="cpu", name="prm")
        trainer = ProcessGRPOTrainer(prm=prm, **common)
    else:
        common["args"] = GRPOConfig(**settings)
        reward = answers if condition == "outcome" else \
            PRMReward(prm_run, aggregate=args.aggregate, device="cpu", name="prm")
        trainer = GRPOTrainer(reward_funcs=[reward], **common)
    log.trainer = snapshot.trainer = trainer
    resume = any(folder.glob("checkpoint-*"))
    print(f"== grpo {condition}: {args.steps} steps{' (resumed)' if resume else ''}", flush=True)
    try:
        trainer.train(resume_from_checkpoint=resume or None)
    finally:
        answers.checker.close()
    partial = final.with_name("final.partial")
    trainer.save_model(str(partial))
    tokenizer.save_pretrained(partial)
    partial.rename(final)
    return final


def greedy(name: str, policy: Path, args, work: Path, prm_run: Path) -> list[int]:
    """Per held-out problem, 1 if the policy's greedy answer is right (`prmkit search`, as bench/loop.py)."""
    out = work / f"greedy-{name}.jsonl"
    report = out.with_name(f"{out.stem}.budgets.json")
    if not report.is_file():
        vllm = ROOT / ".venv-vllm" / "bin" / "python"
        use_vllm = args.backend == "vllm" or (args.backend == "auto" and vllm.is_file())
        python = str(vllm) if use_vllm else sys.executable
        flags = ["--backend", "vllm", "--gpu-memory-utilization", "0.2"] if use_vllm else \
            ["--backend", "transformers", "--generation-batch-size", "32"]
        limit = ["--limit", str(args.held_out)] if args.held_out else []
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
        if use_vllm:
            env.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
        subprocess.run([python, "-m", "prmkit", "search", str(prm_run), str(Path(args.loop_work) / "held_out.jsonl"),
                        str(out), "--policy", str(policy), "--budgets", "1", "--budget-methods", "greedy",
                        "--max-new-tokens", str(args.max_completion_length), "--problems-per-batch", "50",
                        "--overwrite", *limit, *flags], check=True, env=env)
    return analysis.outcomes(read_jsonl(out), "greedy", 1)


def drift(rows: list[dict]) -> dict:
    """The first and last fifth of training, averaged: what moved while the policy trained."""
    by_step = {r["step"]: r for r in rows}  # a resumed run logs its replayed steps again; the last entry counts
    ordered = [by_step[s] for s in sorted(by_step)]
    k = max(len(ordered) // 5, 1)

    def mean(part, key):
        values = [r[key] for r in part]
        return sum(values) / len(values)

    keys = ("answer_accuracy", "steps_per_completion", "tokens_per_completion")
    return {"steps_logged": len(ordered),
            **{key: {"first": mean(ordered[:k], key), "last": mean(ordered[-k:], key)} for key in keys},
            "reward": {"first": sum(next(iter(r["reward"].values())) for r in ordered[:k]) / k,
                       "last": sum(next(iter(r["reward"].values())) for r in ordered[-k:]) / k},
            "seconds_per_step": sorted(r["seconds"] for r in ordered)[len(ordered) // 2]}


def main(argv=None) -> dict:
    args = parse_args(argv)
    loop_work = Path(args.loop_work)
    work = Path(args.work) if args.work else loop_work / "grpo"
    work.mkdir(parents=True, exist_ok=True)
    state = json.loads((loop_work / "state.json").read_text())
    policy = Path(args.policy or state["stages"]["policy"]["folder"])
    prm_run = Path(args.prm) if Path(args.prm).is_dir() else loop_work / "runs" / args.prm
    rows = read_jsonl(loop_work / f"{args.train_split}.jsonl")
    conditions = args.conditions.split(",")
    unknown = set(conditions) - set(CONDITIONS)
    assert not unknown, f"unknown conditions {sorted(unknown)}; use {', '.join(CONDITIONS)}"

    before = greedy("before", policy, args, work, prm_run)
    result = {"command": "python bench/process_grpo.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "policy": str(policy),
              "prm": str(prm_run), "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
              "train_problems": len(rows), "held_out": len(before),
              "before": analysis.bootstrap_accuracy(before), "runs": {}}
    for condition in conditions:
        started = time.perf_counter()
        final = train(condition, args, work, policy, prm_run, rows)
        after = greedy(condition, final, args, work, prm_run)
        result["runs"][condition] = {
            "after": analysis.bootstrap_accuracy(after),
            "after - before": analysis.paired_bootstrap(after, before),
            "drift": drift(read_jsonl(work / condition / "steps.jsonl")),
            "seconds_this_call": round(time.perf_counter() - started, 1)}
        write_json_atomic(Path(args.out), result)
    for condition in conditions:
        for other in conditions:
            if condition < other:
                a = analysis.outcomes(read_jsonl(work / f"greedy-{condition}.jsonl"), "greedy", 1)
                b = analysis.outcomes(read_jsonl(work / f"greedy-{other}.jsonl"), "greedy", 1)
                result.setdefault("pairs", {})[f"{condition} - {other}"] = analysis.paired_bootstrap(a, b)
    write_json_atomic(Path(args.out), result)
    print_table(result)
    return result


def print_table(result: dict) -> None:
    b = result["before"]
    print(f"held-out greedy before: {number(b['accuracy'])} [{number(b['low'])}, {number(b['high'])}]")
    print("| reward | after | after - before | answer acc. (train) first -> last | steps/compl. | tokens/compl. | "
          "s/step |")
    for name, run in result["runs"].items():
        a, d, drift_ = run["after"], run["after - before"], run["drift"]
        moved = {k: f"{drift_[k]['first']:.2f} -> {drift_[k]['last']:.2f}"
                 for k in ("answer_accuracy", "steps_per_completion", "tokens_per_completion")}
        print(f"| {name} | {number(a['accuracy'])} [{number(a['low'])}, {number(a['high'])}] | "
              f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | {moved['answer_accuracy']} | "
              f"{moved['steps_per_completion']} | {moved['tokens_per_completion']} | "
              f"{drift_['seconds_per_step']:.1f} |")


if __name__ == "__main__":
    main()
