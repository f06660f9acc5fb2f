"""`prmkit label`: step labels from rollouts of a policy model (Math-Shepherd's mc, OmegaPRM's binary search); a
thin call into prmkit.labeling."""

from __future__ import annotations

import argparse
import sys

from prmkit import display
from prmkit.cli.common import (
    add_generation_flags,
    add_problem_flags,
    add_shard_flag,
    generation_options,
    launch_device,
    quiet_transformers,
    shard_lines,
    unescape,
)
from prmkit.labeling.options import AFTER_ERROR, LABEL_KINDS, METHODS, LabelOptions

LABEL = LabelOptions()


def register(commands) -> None:
    label = commands.add_parser(
        "label", help="label the steps of solutions by rollouts from a policy model (no annotators)",
        description="For every problem of INPUT (with its gold answer) label its solution, or --solutions N sampled "
                    "ones, step by step: mc (Math-Shepherd) measures each step by k rollouts that continue the "
                    "solution from it; omega (OmegaPRM) binary-searches the first step after which no rollout "
                    "reaches the answer. Writes records (prompt, completions, labels, values, provenance) to "
                    "OUTPUT, one JSON line per solution, continuing OUTPUT if a run was stopped.")
    label.add_argument("input", help="problems: .jsonl, .json or .parquet rows, or a dataset id "
                                     "(owner/name:config#split), with prompt/problem/question, gold_answer/answer, "
                                     "and completions (steps) or solution unless --solutions")
    label.add_argument("output", help=".jsonl file of labelled records")
    label.add_argument("--policy", required=True, metavar="MODEL",
                       help="the policy that rolls out: a model folder, a .gguf file, an alias (smollm2-135m) or a "
                            "hub id")
    label.add_argument("--method", default=LABEL.method, choices=METHODS, help="default: %(default)s")
    label.add_argument("--k", type=int, default=LABEL.k, help="rollouts per measured step (default: %(default)s)")
    label.add_argument("--label", default=LABEL.label, choices=LABEL_KINDS,
                       help="what goes in labels: soft (share of rollouts that reach the answer) or hard (any "
                            "does); default: soft for mc, hard for omega")
    label.add_argument("--after-error", default=LABEL.after_error, choices=AFTER_ERROR,
                       help="omega: steps after the first failing one (default: negative)")
    label.add_argument("--solutions", type=int, default=LABEL.solutions, metavar="N",
                       help="sample N solutions per problem and label those (default: label the rows' own)")
    label.add_argument("--delimiter", default=LABEL.delimiter,
                       help="cuts a solution into steps, \\n written as \\n (default: '\\n\\n')")
    add_problem_flags(label, LABEL, "problems")
    add_shard_flag(label, "OUTPUT")
    add_generation_flags(label)
    label.set_defaults(func=cmd_label)


def label_options(args: argparse.Namespace) -> LabelOptions:
    return LabelOptions(method=args.method, k=args.k, label=args.label, after_error=args.after_error,
                        solutions=args.solutions, delimiter=unescape(args.delimiter),
                        problem_field=args.problem_field, gold_field=args.gold_field,
                        problems_per_batch=args.problems_per_batch, checker_workers=args.checker_workers,
                        check_timeout=args.check_timeout, limit=args.limit, overwrite=args.overwrite)


def cmd_label(args) -> int:
    options = label_options(args)
    generation = generation_options(args)
    from prmkit.labeling.problems import read_problems
    from prmkit.labeling.runner import label_file

    from prmkit.shards import resolve_shard

    read_problems(args.input, options)  # bad rows are reported before a model is loaded
    shard = resolve_shard(args.shard)
    generation = generation.replace(device=launch_device(generation.device, generation.backend))
    quiet_transformers()
    from prmkit.generation import load_generator

    console = display.console()
    if shard is not None:
        console.print(shard_lines(shard, args.output)[0], highlight=False)
    generator = load_generator(args.policy, generation)

    def announce(budget) -> None:
        for line in budget.lines():
            console.print(line, highlight=False)

    try:
        shown = sys.stderr.isatty() or shard is not None  # a shard's log gets progress lines (prmkit.shards)
        result = label_file(generator, args.input, args.output, options, progress=shown, on_start=announce,
                            shard=shard)
    finally:
        generator.close()
    per_step = (f"; per labelled step {result.rollouts / result.steps:.1f} rollouts, "
                f"{result.tokens / result.steps:.0f} tokens") if result.steps else ""
    kept = f" ({result.kept} were already there)" if result.kept else ""
    skipped = f"; {result.skipped} sampled solutions had no step and were left out" if result.skipped else ""
    console.print(f"labelled {result.solutions} solutions ({result.steps} steps) of {result.problems} problems in "
                  f"{result.seconds:.1f} s: {result.rollouts:,} rollouts, {result.tokens:,} tokens generated"
                  f"{per_step}{skipped}", highlight=False)
    cut = result.finish_reasons.get("length", 0)
    if cut:
        console.print(f"{cut:,} of {result.rollouts:,} rollouts ran out of tokens (--max-new-tokens "
                      f"{generation.max_new_tokens}): each counts only an answer it stated, never its last number; "
                      "raise --max-new-tokens if many are cut", highlight=False)
    checks = result.checks
    if checks.timeouts or checks.crashes:
        console.print(f"answer checks: {checks.timeouts} timed out and {checks.crashes} failed (counted wrong) of "
                      f"{checks.checked}", highlight=False)
    console.print(f"-> {result.output}{kept}", highlight=False)
    if shard is not None:
        console.print(shard_lines(shard, args.output)[1], highlight=False)
    return 0
