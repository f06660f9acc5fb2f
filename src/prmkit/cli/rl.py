"""`prmkit rl-filter`: the prompts worth GRPO's steps, by their pass rate under the policy; a thin call into
prmkit.rl.prompt_filter."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from prmkit import display
from prmkit.cli.common import (
    add_generation_flags,
    add_problem_flags,
    generation_options,
    quiet_transformers,
    write_json,
)
from prmkit.rl.prompt_filter import FilterOptions, filter_prompts, options_dict, parse_band, read_prompts

FILTER = FilterOptions()


def register(commands) -> None:
    rl_filter = commands.add_parser(
        "rl-filter", help="keep the prompts whose pass rate under the policy lies in a band (before RL)",
        description="Sample K solutions of every prompt of INPUT from the policy, grade each final answer against "
                    "the row's gold answer, and keep the prompts whose pass rate (right samples / K) lies in "
                    "--band LOW,HIGH, edges included: a prompt the policy always or never solves gives GRPO no "
                    "reward spread to learn from (DAPO's dynamic sampling, PRIME's 0.2-0.8). Writes one line per "
                    "prompt to OUTPUT (pass rate, right samples, distinct answers and samples, each sample's "
                    "answer), continuing OUTPUT if a run was stopped, and the kept input rows, unchanged, to "
                    "--kept. Sample at the temperature and --max-new-tokens the trainer will use.")
    rl_filter.add_argument("input", help="prompts: .jsonl, .json or .parquet rows, or a dataset id "
                                         "(owner/name:config#split), with prompt/problem/question and "
                                         "gold_answer/answer")
    rl_filter.add_argument("output", help=".jsonl file of per-prompt pass rates")
    rl_filter.add_argument("--policy", required=True, metavar="MODEL",
                           help="the policy to be trained: a model folder, a .gguf file, an alias (smollm2-135m) "
                                "or a hub id")
    rl_filter.add_argument("--k", type=int, default=FILTER.k,
                           help="samples per prompt (default: %(default)s)")
    rl_filter.add_argument("--band", default=",".join(f"{v:g}" for v in FILTER.band), metavar="LOW,HIGH",
                           help="keep prompts with LOW <= pass rate <= HIGH (default: 0.2,0.8; 0,1 keeps all and "
                                "only measures); a rerun with another band samples nothing")
    rl_filter.add_argument("--kept", metavar="FILE",
                           help="the kept rows, .jsonl (default: OUTPUT's name with .kept.jsonl)")
    add_problem_flags(rl_filter, FILTER, "prompts")
    rl_filter.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    add_generation_flags(rl_filter)
    rl_filter.set_defaults(func=cmd_rl_filter)


def filter_options(args: argparse.Namespace) -> FilterOptions:
    return FilterOptions(k=args.k, band=parse_band(args.band), problem_field=args.problem_field,
                         gold_field=args.gold_field, problems_per_batch=args.problems_per_batch,
                         checker_workers=args.checker_workers, check_timeout=args.check_timeout, limit=args.limit,
                         overwrite=args.overwrite)


def cmd_rl_filter(args) -> int:
    options = filter_options(args)
    generation = generation_options(args)
    read_prompts(args.input, options)  # bad rows are reported before a model is loaded
    quiet_transformers()
    from prmkit.generation import load_generator

    console = display.console()

    def announce(prompts: int, done: int) -> None:
        more = f"; {done} are already in {args.output}" if done else ""
        console.print(f"sampling {options.k} solutions of each of {prompts} prompts (temperature "
                      f"{generation.temperature}, up to {generation.max_new_tokens} tokens){more}", highlight=False)

    generator = load_generator(args.policy, generation)
    try:
        result = filter_prompts(generator, args.input, args.output, options, kept_path=args.kept,
                                progress=sys.stderr.isatty(), on_start=announce)
    finally:
        generator.close()
    s = result.summary
    if result.sampled:
        console.print(f"sampled {result.sampled} prompts in {result.seconds:.1f} s, {result.tokens:,} tokens "
                      "generated", highlight=False)
    console.print(summary_table(s))
    if s["mean_distinct_samples"] < 2 and s["k"] != 1:
        console.print(f"the policy wrote fewer than 2 distinct solutions per prompt in {s['k']} samples: it is "
                      "nearly deterministic at this temperature, and RL has little to explore", highlight=False)
    low, high = s["band"]
    console.print(f"kept {s['kept']} of {s['prompts']} prompts ({s['kept_share']:.3f}) with pass rate in "
                  f"[{low:g}, {high:g}] -> {result.kept_path}; per-prompt counts -> {result.output}", highlight=False)
    if not s["kept"]:
        console.print("the band keeps no prompt: at these settings the policy solves every prompt always or never "
                      "(the pass-rate rows above); widen --band, raise --temperature, or give harder or easier "
                      "prompts", highlight=False)
    write_json(args.json, {"input": args.input, "output": result.output, "kept": result.kept_path,
                           "policy": args.policy, "options": options_dict(options),
                           "generation": asdict(generation), **s})
    return 0


def summary_table(summary: dict):
    """The policy's sharpness on these prompts, then how many prompts sit at each pass rate."""
    from rich.table import Table

    k = summary["k"]
    table = Table(title=f"{summary['prompts']} prompts, {k} samples each", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [("per-sample accuracy", summary["per_sample_accuracy"]), (f"pass@{k}", summary["pass_at_k"]),
            ("all samples right (no reward spread)", summary["all_right_share"]),
            ("all samples wrong (no reward spread)", summary["all_wrong_share"]),
            ("distinct answers per prompt", summary["mean_distinct_answers"]),
            ("distinct samples per prompt", summary["mean_distinct_samples"])]
    rows += [(f"prompts at pass rate {rate}", count) for rate, count in summary["pass_rates"].items()]
    for name, value in rows:
        table.add_row(name, display.format_value(value))
    return table
