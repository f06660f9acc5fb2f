"""The positive control for RL with prmkit: GRPO rewarded by the answer's correctness alone must make the lifecycle
benchmark's policy more accurate on problems it never trained on. Until it does, no process reward can be judged
against it (bench/process_grpo.py compares the rules at the settings chosen here).

1. Problems, disjoint by prompt: the GRPO pool (a seed of its own), the validation problems the settings are chosen
   on (a seed of their own), and bench/loop.py's held-out problems; the pool also leaves out the policy's SFT chains
   and every problem a PRM of the benchmark trains on (loop's labelled problems, bench/lifecycle/onpolicy.py's).
2. Prompts worth training on: k samples of each pool problem at the GRPO temperature; the problems whose pass rate
   lies in the band (`prmkit.rl.prompt_filter`, PRIME's 0.2-0.8) are the GRPO problems. A group whose samples are
   all right or all wrong has no reward spread, so GRPO learns nothing from it.
3. One GRPO run per learning rate (TRL's GRPOTrainer, the correctness reward, equal steps, prompts per step, group,
   KL beta and seed), each judged by greedy accuracy on the validation problems after its last step and after each
   of the `--snapshots` steps (the policy saved on the way), so the run length is chosen on validation too.
4. The (learning rate, steps) with the best validation accuracy (the smaller, then the shorter, on a tie) is read
   once on the held-out problems: greedy accuracy before and after, with the paired bootstrap interval. No other
   run touches the held-out file, and none does when no run beats the starting policy on validation: the choice
   then is not to train, and the held-out problems stay unread for a sweep that has a candidate. A run of settings
   chosen before, on another seed (`--replicate`), is read there whatever its validation says: were it read only
   when it did well, a mean over seeds would keep the lucky ones.

    python bench/rl_control.py --work rl-work     # run it again after a kill to continue: every stage resumes
    python bench/rl_control.py --work rl-work --validation-only   # the sweep alone; the held-out problems unread
    python bench/rl_control.py --work rl-work --lrs 1e-5 --steps 32 --snapshots 16   # judged at 16 and 32 steps
    python bench/rl_control.py --work rl-work --lrs 1e-5 --seed 1 --replicate       # the control again, another seed

The process rules run at the control's settings, on the same problems, from the same policy, with one flag changed:
`--reward min` or `--reward sum` (a PRM's step rewards as per-token advantages, `prmkit.rl.ProcessGRPOTrainer`,
scaled to the control's unit RMS), `--outcome-weight 0.1` to mix answer correctness in:

    python bench/rl_control.py --work rl-work --lrs 1e-5 --reward min --prm runs/prm --out rl_min.json

`--prm exact` gives the rules the exact judge's step labels instead of a PRM's scores (bench/lifecycle/exact_reward.py):
the process rules' positive control, a step reward that is right by construction, so a rule that loses with a PRM
and holds with the judge lost to the PRM.

Where the control of the same seed has been judged in the same work folder, a process run is also paired against it
problem by problem ("after - control", on validation at each judged step and on the held-out problems when both
runs were read there at the same step); a process run finished before its control gets the pairing on a second call,
which only reads the finished files.

Writes bench/results/rl_control.json and bench/results/rl_control.png (per-step reward, training accuracy, share of
groups with no reward spread, KL, completion length and steps per completion of each run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from lifecycle import analysis  # noqa: E402
from lifecycle.exact_reward import EXACT  # noqa: E402
from lifecycle.onpolicy import BENCHMARK_SPLIT_CAP, evaluation_problems, onpolicy_problems  # noqa: E402
from lifecycle.policy import PolicyRecipe, build_policy  # noqa: E402
from lifecycle.problems import disjoint_splits, problem_rows  # noqa: E402
from prmkit.answers import AnswerChecker, sample_answer  # noqa: E402
from prmkit.data.problems import batches  # noqa: E402
from prmkit.files import read_jsonl, write_json_atomic, write_jsonl  # noqa: E402
from prmkit.generation import GenerationOptions, load_generator  # noqa: E402
from prmkit.rl.prompt_filter import FilterOptions, filter_prompts, parse_band  # noqa: E402

PROBLEMS_PER_BATCH = 16
ONPOLICY_TRAINING_PROBLEMS = 1000  # the largest onpolicy.py draw a PRM here trains on: left out of the pool
FLAT = "process/zero_advantage_group_share"  # prmkit.rl.ProcessGRPOTrainer's count of groups with no signal
# What a run's per-step log keeps, in bench/results and in the first/last-steps drift.
STEP_KEYS = ("step", "reward", "answer_accuracy", "frac_reward_zero_std", "flat_group_share", "kl",
             "completions/mean_length", "entropy", "steps_per_completion")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="rl-work")
    parser.add_argument("--policy", default=None, help="the starting policy (default: the cached benchmark policy)")
    parser.add_argument("--pool", type=int, default=240, help="GRPO candidate problems sampled for their pass rate")
    parser.add_argument("--k", type=int, default=4, help="samples per candidate problem for its pass rate")
    parser.add_argument("--band", default="0.2,0.8", help="pass rates kept, both ends included")
    parser.add_argument("--validation", type=int, default=150, help="problems the learning rate is chosen on")
    parser.add_argument("--held-out", type=int, default=200, help="bench/loop.py's held-out problems, read once")
    parser.add_argument("--lrs", default="1e-6,3e-6,1e-5")
    parser.add_argument("--reward", choices=("outcome", "sum", "min"), default="outcome",
                        help="outcome: the answer's correctness (the control); sum, min: the PRM's step rewards")
    parser.add_argument("--prm", default=None, help="the PRM run folder the sum and min rewards score with, or "
                        f"{EXACT!r}: the exact judge's step labels (the process rules' positive control)")
    parser.add_argument("--outcome-weight", type=float, default=0.0,
                        help="with sum or min: this weight times the group-normalised correctness is added")
    parser.add_argument("--seed", type=int, default=0, help="the GRPO run's seed (sampling and initial order)")
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient against the starting policy")
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps per run")
    parser.add_argument("--snapshots", default="", help="earlier steps at which each run is judged on validation "
                        "too, comma-separated (e.g. 16 with --steps 32)")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (num_generations)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--validation-only", action="store_true",
                        help="stop after the validation runs: the held-out problems stay unread for a later call")
    parser.add_argument("--replicate", action="store_true",
                        help="the settings were chosen before, on another seed's validation: read the held-out "
                             "problems at --steps whatever this seed does on validation, so that a mean over seeds "
                             "is not made of the seeds that did well (one --lrs value)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "rl_control.json"))
    args = parser.parse_args(argv)
    if args.replicate and (len(args.lrs.split(",")) != 1 or args.validation_only):
        parser.error("--replicate reads the held-out problems for settings already chosen: give one --lrs value "
                     "and leave out --validation-only")
    if args.reward == "outcome" and (args.prm or args.outcome_weight):
        parser.error("--prm and --outcome-weight go with --reward sum or min; the outcome reward is correctness alone")
    if args.reward != "outcome" and not (args.prm == EXACT or args.prm and Path(args.prm).is_dir()):
        parser.error(f"--reward {args.reward} scores with a PRM: give --prm, a run folder of prmkit train or "
                     f"{EXACT!r} (got {args.prm!r})")
    if args.outcome_weight < 0:
        parser.error(f"--outcome-weight {args.outcome_weight}: give 0 or more")
    args.band = parse_band(args.band)
    args.lrs = [float(x) for x in args.lrs.split(",")]
    args.snapshots = sorted({int(x) for x in args.snapshots.split(",") if x.strip()})
    if any(not 0 < step < args.steps for step in args.snapshots):
        parser.error(f"--snapshots {args.snapshots}: each must lie between 1 and --steps - 1 ({args.steps - 1}); "
                     "the last step is always judged")
    return args


def splits(args, sft_chains: int) -> dict[str, list[dict]]:
    """The GRPO pool, the validation problems and the held-out problems, disjoint by prompt."""
    held_out = evaluation_problems("held_out", args.held_out, sft_chains)
    others = {"sft": sft_chains, **{name: BENCHMARK_SPLIT_CAP for name in ("label", "held_out", "validation",
                                                                           "scale", "onpolicy")}}
    drawn = disjoint_splits({**others, "rl_validation": args.validation, "rl": 2 * args.pool})
    taken = {p["prompt"] for p in held_out} | \
        {p["prompt"] for split in ("held_out", "validation") for p in evaluation_problems(split, 64, sft_chains)} | \
        {p["prompt"] for p in onpolicy_problems(ONPOLICY_TRAINING_PROBLEMS, sft_chains)}
    validation = [p for p in problem_rows(drawn["rl_validation"]) if p["prompt"] not in taken][:args.validation]
    taken |= {p["prompt"] for p in validation}
    pool = [p for p in problem_rows(drawn["rl"]) if p["prompt"] not in taken][:args.pool]
    return {"pool": pool, "validation": validation, "held_out": held_out}


def pass_rates(args, policy: str, pool: list[dict], work: Path) -> dict:
    """`prmkit rl-filter` on the pool: k samples per problem, per-problem counts in pass_rates.jsonl (continued after
    a kill), the problems in the band in pass_rates.kept.jsonl; its summary of the policy's sharpness."""
    write_jsonl(pool, work / "pool.jsonl")
    generator = load_generator(policy, GenerationOptions(temperature=args.temperature,
                                                         max_new_tokens=args.max_completion_length))
    try:
        result = filter_prompts(generator, work / "pool.jsonl", work / "pass_rates.jsonl",
                                FilterOptions(k=args.k, band=args.band, problems_per_batch=PROBLEMS_PER_BATCH),
                                progress=sys.stderr.isatty())
    finally:
        generator.close()
    return {**result.summary, "tokens_this_call": result.tokens, "seconds_this_call": result.seconds}


def finished_rows(path: Path, problems: list[dict]) -> list[dict] | None:
    """The rows of a judged file when it was judged on exactly `problems`, in order; None when there is no file. A
    file judged on other problems stops the run rather than be reused or written over."""
    if not path.is_file():
        return None
    rows = read_jsonl(path)
    if [r["prompt"] for r in rows] != [p["prompt"] for p in problems]:
        raise SystemExit(f"{path}: judged on other problems than this run's; use a work folder of its own for another "
                         "--pool, --validation or --held-out")
    return rows


def greedy_correct(policy: str, problems: list[dict], path: Path, max_new_tokens: int) -> list[int]:
    """Per problem, 1 if the policy's greedy answer is right (the rows are kept: a finished file is read again)."""
    rows = finished_rows(path, problems)
    if rows is not None:
        return [int(r["correct"]) for r in rows]
    generator = load_generator(policy, GenerationOptions(temperature=0.0, max_new_tokens=max_new_tokens,
                                                         generation_batch_size=32))
    checker = AnswerChecker()
    try:
        rows = []
        for _, batch in batches(problems, 50):
            outputs = generator.generate([generator.prompt(p["prompt"]) for p in batch], n=1)
            answers = [sample_answer(o[0].text, o[0].finish_reason) for o in outputs]
            correct = checker.check_many(answers, [str(p["gold_answer"]) for p in batch])
            rows += [{"prompt": p["prompt"], "answer": a, "correct": bool(c), "tokens": o[0].tokens}
                     for p, a, c, o in zip(batch, answers, correct, outputs)]
    finally:
        checker.close()
        generator.close()
    write_jsonl(rows, path)
    return [int(r["correct"]) for r in rows]


def run_name(args, lr: float, *, reward: str | None = None) -> str:
    """A run's folder and file stem: the learning rate, then whatever differs from the control's seed 0 (`reward`
    names another reward's run at the same settings)."""
    reward = reward or args.reward
    name = f"lr-{lr:g}"
    if reward != "outcome":
        name += f"-{reward}" + (f"-{EXACT}" if args.prm == EXACT else "") + \
            (f"-outcome-{args.outcome_weight:g}" if args.outcome_weight else "")
    return name + seed_suffix(args.seed)


def seed_suffix(seed: int) -> str:
    """What a run's name adds for its seed: nothing for seed 0, the control's."""
    return f"-seed-{seed}" if seed else ""


def judged_file(work: Path, split: str, stem: str | None = None, step: int | None = None) -> Path:
    """Where greedy answers on a split are kept: the starting policy's (no stem), or run STEM's at STEP."""
    return work / (f"{split}-before.jsonl" if stem is None else f"{split}-{stem}-step-{step}.jsonl")


def against_control(args, lr: float, after: list[int], path: Path, problems: list[dict]) -> dict | None:
    """A process rule's accuracy minus the control's, problem by problem, where the control (the correctness reward,
    same learning rate, step and seed) has been judged on `problems` in this work folder: `path` is this run's file
    (it names the step), the control's is the same name under the control's stem. None for the control itself or
    when its file is not there (run the control first, or again: every finished file is read, nothing retrains)."""
    if args.reward == "outcome":
        return None
    control = path.with_name(path.name.replace(run_name(args, lr), run_name(args, lr, reward="outcome"), 1))
    rows = finished_rows(control, problems)
    if rows is None:
        return None
    correct = [int(r["correct"]) for r in rows]
    return {"control": analysis.bootstrap_accuracy(correct),
            "after - control": analysis.paired_bootstrap(after, correct)}


def grpo(args, lr: float, policy: Path, rows: list[dict], work: Path) -> dict[int, Path]:
    """bench/process_grpo.py's run of `args.reward` at this learning rate; the policy folder after each judged
    step."""
    from process_grpo import train

    settings = argparse.Namespace(steps=args.steps, prompts_per_step=args.prompts_per_step, group=args.group,
                                  lr=lr, beta=args.beta, temperature=args.temperature, seed=args.seed,
                                  max_completion_length=args.max_completion_length, aggregate="min",
                                  outcome_weight=args.outcome_weight)
    prm = Path(args.prm or "-")  # "exact" passes through as itself
    final = train(args.reward, settings, work / run_name(args, lr), policy, prm, rows, set(args.snapshots))
    return {**{step: final.parent / f"step-{step}" for step in args.snapshots}, args.steps: final}


def trainer_log(run: Path) -> list[dict]:
    """TRL's own per-step log of a run (reward, KL, the share of groups with no reward spread, lengths), with the
    training samples' answer accuracy and steps per completion from bench/process_grpo.py's step log: a PRM-rewarded
    run is watched for what it does to correctness, which it does not train on.

    `flat_group_share` is the share of groups the loss learned nothing from (every advantage 0). For a process rule
    that is the trainer's own count: TRL's `frac_reward_zero_std` reads one scalar per completion, and a group whose
    completions tie on it can still differ step by step."""
    states = sorted(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        return []
    answers = {}  # a resumed run appends its steps again: the last line of a step is the one kept
    if (run / "steps.jsonl").is_file():
        answers = {row["step"]: {key: row[key] for key in ("answer_accuracy", "steps_per_completion")}
                   for row in read_jsonl(run / "steps.jsonl")}
    return [{**e, **answers.get(e["step"], {}), "flat_group_share": e.get(FLAT, e.get("frac_reward_zero_std"))}
            for e in json.loads(states[-1].read_text())["log_history"] if "reward" in e]


def drift(steps: list[dict], window: int = 4) -> dict:
    """The first and last `window` steps of a run, averaged, for each logged quantity: what moved while it trained
    (per step the values swing with the prompts drawn)."""
    out = {}
    for key in STEP_KEYS[1:]:
        values = [e[key] for e in steps if key in e]
        if values:
            out[key] = {"first": round(sum(values[:window]) / len(values[:window]), 4),
                        "last": round(sum(values[-window:]) / len(values[-window:]), 4)}
    return out


def plot(result: dict, logs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reward = "reward (answer right)" if result["settings"]["reward"] == "outcome" else \
        "reward (every step right)" if result["settings"]["prm"] == EXACT else "reward (PRM)"
    keys = [("reward", reward), ("answer_accuracy", "answer right (training samples)"),
            ("flat_group_share", "groups with no learning signal (advantages all 0)"),
            ("kl", "KL to the starting policy"), ("completions/mean_length", "completion tokens"),
            ("steps_per_completion", "steps per completion")]
    figure, axes = plt.subplots(2, 3, figsize=(12, 6.4))
    axes = axes.flatten()
    for axis, (key, title) in zip(axes, keys):
        for name, entries in logs.items():
            points = [(e["step"], e[key]) for e in entries if key in e]
            if points:
                axis.plot(*zip(*points), label=name, marker=".")
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("optimizer step")
    axes[0].legend(fontsize=8)
    chosen = f"lr {result['chosen_lr']}, {result['chosen_steps']} steps" if "chosen_lr" in result else ""
    source = "the exact judge's" if result["settings"]["prm"] == EXACT else "the PRM's"
    reward = {"outcome": "the correctness reward", "sum": f"{source} step rewards (sum)",
              "min": f"{source} step rewards (min)"}[result["settings"]["reward"]]
    weight = result["settings"]["outcome_weight"]
    figure.suptitle(f"GRPO with {reward}" + (f" + {weight:g} x correctness" if weight else "") + ", per learning rate"
                    + (f" (chosen on validation: {chosen})" if chosen else ""), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    policy = Path(args.policy) if args.policy else build_policy(PolicyRecipe())
    problems = splits(args, PolicyRecipe().chains)
    filtered = pass_rates(args, str(policy), problems["pool"], work)
    kept = read_jsonl(work / "pass_rates.kept.jsonl")
    result = {"command": "python bench/rl_control.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "policy": str(policy),
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "pool": filtered,
              "validation_problems": len(problems["validation"]), "held_out_problems": len(problems["held_out"])}
    base_validation = greedy_correct(str(policy), problems["validation"], judged_file(work, "validation"),
                                     args.max_completion_length)
    result["validation"] = {"before": analysis.bootstrap_accuracy(base_validation), "runs": {}}
    logs, policies, accuracy = {}, {}, {}
    for lr in args.lrs:
        policies[lr] = grpo(args, lr, policy, kept, work)
        logs[f"lr {lr:g}"] = trainer_log(policies[lr][args.steps].parent)
        name = run_name(args, lr)
        judged = {}
        for step, folder in policies[lr].items():
            path = judged_file(work, "validation", name, step)
            after = greedy_correct(str(folder), problems["validation"], path, args.max_completion_length)
            accuracy[lr, step] = sum(after) / len(after)
            judged[step] = {"after": analysis.bootstrap_accuracy(after),
                            "after - before": analysis.paired_bootstrap(after, base_validation),
                            **(against_control(args, lr, after, path, problems["validation"]) or {})}
        steps = [{k: e[k] for k in STEP_KEYS if e.get(k) is not None} for e in logs[f"lr {lr:g}"]]
        result["validation"]["runs"][f"{lr:g}"] = {
            **judged[args.steps], "snapshots": {str(step): judged[step] for step in args.snapshots},
            "drift": drift(steps), "steps": steps}
        write_json_atomic(Path(args.out), result)
        plot(result, logs, Path(args.out).with_suffix(".png"))
    if args.validation_only:
        result["held_out"] = "not read (--validation-only)"
        result["seconds_this_call"] = round(time.perf_counter() - started, 1)
        write_json_atomic(Path(args.out), result)
        return result
    if args.replicate:
        chosen, chosen_step = args.lrs[0], args.steps
    else:
        chosen, chosen_step = min(accuracy, key=lambda run: (-accuracy[run], *run))
    start = sum(base_validation) / len(base_validation)
    if not args.replicate and accuracy[chosen, chosen_step] <= start:
        result["held_out"] = (f"not read: no run beat the starting policy on validation (best: lr {chosen:g}, "
                              f"{chosen_step} steps, {accuracy[chosen, chosen_step]:.3f} against {start:.3f})")
        result["seconds_this_call"] = round(time.perf_counter() - started, 1)
        write_json_atomic(Path(args.out), result)
        print(result["held_out"])
        return result
    result["chosen_lr"], result["chosen_steps"] = f"{chosen:g}", chosen_step
    if args.replicate:
        result["replicate"] = ("held out read whatever this seed does on validation: the settings were chosen "
                               "before, on another seed")
    # The held-out problems are read here, once, for the starting policy and the chosen run only.
    before = greedy_correct(str(policy), problems["held_out"], judged_file(work, "held-out"),
                            args.max_completion_length)
    path = judged_file(work, "held-out", run_name(args, chosen), chosen_step)
    after = greedy_correct(str(policies[chosen][chosen_step]), problems["held_out"], path, args.max_completion_length)
    result["held_out"] = {"before": analysis.bootstrap_accuracy(before), "after": analysis.bootstrap_accuracy(after),
                          "after - before": analysis.paired_bootstrap(after, before),
                          **(against_control(args, chosen, after, path, problems["held_out"]) or {})}
    result["seconds_this_call"] = round(time.perf_counter() - started, 1)
    write_json_atomic(Path(args.out), result)
    plot(result, logs, Path(args.out).with_suffix(".png"))
    print(json.dumps({"chosen_lr": result["chosen_lr"], "chosen_steps": chosen_step, "held_out": result["held_out"]},
                     indent=1))
    return result


if __name__ == "__main__":
    main()
