"""`prmkit search`: a trained PRM guides a policy model at test time; a thin call into prmkit.search."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prmkit import display
from prmkit.cli.common import (
    add_generation_flags,
    add_scoring_flags,
    add_shard_flag,
    generation_options,
    launch_device,
    quiet_transformers,
    scoring_options,
    shard_lines,
    unescape,
)
from prmkit.errors import PRMError
from prmkit.evaluation.selection import SETTINGS
from prmkit.scoring.aggregate import AGGREGATION_NAMES
from prmkit.search.options import (
    METHODS,
    POLICY_GPU_MEMORY_UTILIZATION,
    SAMPLING,
    SELECTION_FIELDS,
    SearchOptions,
    parse_budgets,
    parse_methods,
)

SEARCH = SearchOptions()


def register(commands) -> None:
    search = commands.add_parser(
        "search", help="PRM-guided test-time compute: best-of-n, weighted best-of-n, beam search, DVTS",
        description="A policy model samples solutions to every problem of DATA and a trained PRM (RUN) chooses or "
                    "guides them. Writes one JSON line per problem to OUT (continued if a run was stopped). "
                    "With --budgets, compares every method at each N and writes a table, OUT stem.budgets.json "
                    "and OUT stem.budgets.png.")
    search.add_argument("run", help="PRM: run folder, checkpoint or merged export")
    search.add_argument("data", help="problems: .jsonl, .json or .parquet rows, or a dataset id "
                                     "(owner/name:config#split), with prompt/problem/question and, optionally, "
                                     "gold_answer/answer")
    search.add_argument("out", help=".jsonl file of results, one row per problem")
    search.add_argument("--policy", required=True, metavar="MODEL",
                        help="the policy: a model folder, a .gguf file, an alias (smollm2-135m) or a hub id")
    search.add_argument("--method", default=SEARCH.method, choices=METHODS, help="default: %(default)s")
    search.add_argument("--n", type=int, default=SEARCH.n, help="samples, or beams (default: %(default)s)")
    search.add_argument("--beam-width", type=int, default=SEARCH.beam_width,
                        help="beam: children per kept beam; dvts: n / beam-width subtrees (default: %(default)s)")
    search.add_argument("--delimiter", default=SEARCH.delimiter,
                        help="step separator and stop string, \\n written as \\n (default: '\\n\\n')")
    search.add_argument("--aggregate", default=SEARCH.aggregate, choices=AGGREGATION_NAMES,
                        help="chain score from step scores (default: %(default)s)")
    search.add_argument("--max-rounds", type=int, default=SEARCH.max_rounds,
                        help="beam/dvts step rounds; the last one writes to the end (default: %(default)s)")
    search.add_argument("--problems-per-batch", type=int, default=SEARCH.problems_per_batch,
                        help="problems sharing generate and score calls (default: %(default)s)")
    search.add_argument("--budgets", type=parse_budgets, default=SEARCH.budgets, metavar="N,N,...",
                        help="compare every method at these N, e.g. 1,2,4,8 (--method and --n are then unused)")
    search.add_argument("--budget-methods", type=parse_methods, default=SEARCH.budget_methods,
                        metavar="METHOD,...", help=f"methods a --budgets run compares (default: {','.join(METHODS)})")
    selection = search.add_argument_group(
        "selection settings", "how the selection rules choose among samples; defaults in brackets. Choose them on "
        "validation problems with `prmkit search-tune` and apply the file with --select-settings")
    for rule, settings in SETTINGS.items():
        for name, setting in settings.items():
            selection.add_argument(f"--{name.replace('_', '-')}", type=type(setting.default), default=None,
                                   help=f"{rule}: {setting.help} [{setting.default}]")
    selection.add_argument("--confidence-weight", type=float, default=None,
                           help="every rule but majority: each PRM score x the policy's per-token probability of "
                                "that sample ** this weight; 0 is the PRM alone, inf the policy alone (needs a bce "
                                f"PRM and the policy's log-probs) [{SEARCH.confidence_weight}]")
    selection.add_argument("--select-settings", metavar="FILE",
                           help="settings chosen by `prmkit search-tune` (a flag above may not set them again)")
    search.add_argument("--problem-field", default=SEARCH.problem_field,
                        help="the problem's field (default: the first of prompt, problem, question)")
    search.add_argument("--gold-field", default=SEARCH.gold_field,
                        help="the gold answer's field (default: gold_answer, else answer; none: no accuracy)")
    search.add_argument("--limit", type=int, default=SEARCH.limit, help="search only the first N problems")
    search.add_argument("--overwrite", action="store_true", help="start OUT afresh instead of continuing it")
    add_shard_flag(search, "OUT")
    # --device and --dtype: the scoring flags, for both; --no-logprobs: rows without the policy's confidence
    add_generation_flags(search, device_flags=False, logprobs_flag=True)
    search.set_defaults(gpu_memory_utilization=POLICY_GPU_MEMORY_UTILIZATION)  # the PRM needs the rest of the GPU
    add_scoring_flags(search)
    search.set_defaults(func=cmd_search)
    register_tune(commands)


def register_tune(commands) -> None:
    tune = commands.add_parser(
        "search-tune", help="choose the selection rules' settings on validation problems",
        description="Reads VALIDATION, the output of `prmkit search` over validation problems with gold answers "
                    "(a --budgets run, or a sampling method), tries every point of each selection rule's grid "
                    "and writes each point's validation accuracy and the chosen settings to OUT, for "
                    "`prmkit search --select-settings OUT`. Held-out problems are read only with --held-out, "
                    "after every choice is made, to report the chosen settings' accuracy there.")
    tune.add_argument("validation", help="search output .jsonl of the validation problems")
    tune.add_argument("--out", required=True, help=".json file for the chosen settings and every grid point")
    tune.add_argument("--n", type=int, default=None,
                      help="choose among the first N candidates of each problem, the N you will search with "
                           "(default: all of them)")
    tune.add_argument("--rules", type=parse_methods, default=SAMPLING, metavar="RULE,...",
                      help=f"rules to tune (default: {','.join(SAMPLING)})")
    tune.add_argument("--seed", type=int, default=None,
                      help="majority-of-bests' seed (default: the seed the validation search ran with)")
    tune.add_argument("--held-out", metavar="FILE",
                      help="search output of held-out problems: accuracy there at the chosen settings, reported "
                           "only (never used to choose)")
    tune.set_defaults(func=cmd_search_tune)


def selection_settings(args: argparse.Namespace) -> dict:
    """The selection settings from --select-settings FILE and the flags; a setting given both ways is an error,
    so a tuned file is never half overridden by accident."""
    from prmkit.search.tune import read_settings

    tuned = read_settings(args.select_settings) if args.select_settings else {}
    flags = {name: getattr(args, name) for name in SELECTION_FIELDS if getattr(args, name) is not None}
    both = sorted(set(tuned) & set(flags))
    if both:
        given = ", ".join(f"--{name.replace('_', '-')}" for name in both)
        raise PRMError(f"{given} and --select-settings {args.select_settings} both set {', '.join(both)}; give the "
                       "flag or the file, not both")
    return {**tuned, **flags}


def search_options(args: argparse.Namespace) -> SearchOptions:
    return SearchOptions(method=args.method, n=args.n, beam_width=args.beam_width, temperature=args.temperature,
                         max_new_tokens=args.max_new_tokens, delimiter=unescape(args.delimiter),
                         aggregate=args.aggregate, max_rounds=args.max_rounds, seed=args.seed,
                         problems_per_batch=args.problems_per_batch, budgets=args.budgets,
                         budget_methods=args.budget_methods, problem_field=args.problem_field,
                         gold_field=args.gold_field, limit=args.limit, overwrite=args.overwrite,
                         **selection_settings(args))


def cmd_search(args) -> int:
    from prmkit.search.problems import read_problems

    options = search_options(args)
    generation = generation_options(args)
    if options.confidence_weight and not generation.logprobs:
        raise PRMError(f"--confidence-weight {options.confidence_weight} blends in the policy's log-probs, which "
                       "--no-logprobs turns off; drop one of them")
    read_problems(args.data, options)  # bad rows are reported before the models load, not after
    if Path(args.out).suffix.lower() not in (".jsonl", ".ndjson"):
        raise PRMError(f"{args.out}: the output is JSON lines, one row per problem; give a .jsonl path")
    from prmkit.shards import resolve_shard, shard_progress

    shard = resolve_shard(args.shard)
    args.device = launch_device(args.device, args.backend)  # --device is the PRM's and the policy's alike
    generation = generation.replace(device=args.device)
    quiet_transformers()
    from prmkit.generation import load_generator
    from prmkit.scoring.scorer import PRMScorer
    from prmkit.search.report import budget_table
    from prmkit.search.run import run_search

    console = display.console()
    if shard is not None:
        console.print(shard_lines(shard, args.out)[0], highlight=False)
    # The policy before the PRM: vLLM starts its engine process by fork only while this process holds no CUDA
    # context, and a PRM loaded on the GPU first would create one.
    generator = load_generator(args.policy, generation)
    try:
        scorer = PRMScorer.from_options(args.run, scoring_options(args))
        shown = sys.stderr.isatty() or shard is not None  # a shard's log gets progress lines (prmkit.shards)
        with shard_progress(shown, "searching", shard, unit="problems") as update:
            summary = run_search(scorer, generator, args.data, args.out, options, prm=str(Path(args.run).resolve()),
                                 progress=lambda done, total: update(completed=done, total=total), shard=shard)
    finally:
        generator.close()
    where = f"; {summary.resumed} were already in {summary.out}" if summary.resumed else ""
    what = "every method at budgets " + ",".join(map(str, options.budgets)) if options.budgets else (
        f"{options.method}, n={1 if options.method == 'greedy' else options.n}"
        + (f", beam width {options.beam_width}" if options.method in ("beam", "dvts") else "")
        + "".join(f", {name}={value}" for name, value in options.selection(options.method).items()))
    console.print(f"searched {summary.searched} of {summary.problems} problems ({what}) in {summary.seconds:.1f} s"
                  f"{where}; {summary.tokens} tokens generated")
    if summary.report is not None:
        console.print(budget_table(summary.report))
        console.print(f"written: {summary.out}, {summary.files['json']}, {summary.files['png']}")
    elif summary.graded:
        console.print(f"accuracy {summary.accuracy:.3f} ({summary.correct} of {summary.graded} problems with a gold "
                      f"answer) -> {summary.out}")
    else:
        console.print(f"no problem has a gold answer, so no accuracy -> {summary.out}")
    if shard is not None:
        budgets = "; the budget report is written by the merge" if options.budgets else ""
        console.print(shard_lines(shard, args.out)[1] + budgets, highlight=False)
    return 0


def cmd_search_tune(args) -> int:
    from prmkit.files import write_json_atomic
    from prmkit.search.tune import held_out_accuracy, tune_selection

    if Path(args.out).suffix.lower() != ".json":
        raise PRMError(f"{args.out}: the settings file is JSON; give a .json path")
    tuned = tune_selection(args.validation, n=args.n, seed=args.seed, rules=args.rules)
    write_json_atomic(args.out, tuned)  # written before any held-out problem is read
    if args.held_out:
        tuned["held_out"] = held_out_accuracy(tuned, args.held_out)
        write_json_atomic(args.out, tuned)
    console = display.console()
    console.print(tune_table(tuned))
    console.print(f"written: {args.out}; apply with `prmkit search ... --select-settings {args.out}`")
    return 0


def tune_table(tuned: dict):
    from rich.table import Table

    held = tuned.get("held_out")
    table = Table(title=f"selection settings chosen on {tuned['problems']} validation problems "
                        f"({tuned['candidates']} candidates each)", title_justify="left")
    for column in ("rule", "chosen", "validation", *(("held-out", "held-out at defaults") if held else ())):
        table.add_column(column, justify="left" if column in ("rule", "chosen") else "right")
    for rule, entry in tuned["rules"].items():
        chosen = ", ".join(f"{k}={v}" for k, v in entry["chosen"].items()) or "-"
        cells = [rule, chosen, display.format_value(entry["accuracy"])]
        if held:
            cells += [display.format_value(held["rules"][rule][which]["accuracy"]) for which in ("chosen", "default")]
        table.add_row(*cells)
    weight = tuned.get("confidence_weight", {})
    if weight.get("grid"):
        auroc = next(p["auroc"] for p in weight["grid"] if p["confidence_weight"] == weight["chosen"])
        table.caption = (f"every rule but majority at confidence weight {weight['chosen']:g} (within-problem AUROC "
                         f"{display.format_value(auroc)}; 0 is the PRM alone, inf the policy's confidence alone)")
    elif weight.get("note"):
        table.caption = weight["note"]
    table.caption_justify = "left"
    return table
