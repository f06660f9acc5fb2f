"""`prmkit score` and `prmkit eval`: use a trained PRM, each a thin call into prmkit.scoring / prmkit.evaluation."""

from __future__ import annotations

import sys
from pathlib import Path

from prmkit import display
from prmkit.cli.common import add_scoring_flags, quiet_transformers, scoring_options
from prmkit.errors import PRMError
from prmkit.evaluation.options import LABEL_SCHEMES, EvalOptions
from prmkit.scoring.aggregate import AGGREGATION_NAMES
from prmkit.scoring.options import ScoreFileOptions

SCORE_FILE_DEFAULTS = ScoreFileOptions()
EVAL_DEFAULTS = EvalOptions()


def register(commands) -> None:
    score = commands.add_parser(
        "score", help="score every chain of a file with a trained PRM",
        description="Rows are records ({prompt, completions}) or best-of-N rows ({prompt, candidates: [str | "
                    "[steps]]}). Output: each row plus step_scores and score (records) or step_scores, scores "
                    "and best (candidates), as JSON lines.")
    score.add_argument("run", help="run folder, checkpoint or merged export")
    score.add_argument("input", help=".jsonl, .json or .parquet file of rows, or a dataset id "
                                     "(owner/name:config#split)")
    score.add_argument("output", help=".jsonl file to write")
    score.add_argument("--aggregate", default=SCORE_FILE_DEFAULTS.aggregate, choices=AGGREGATION_NAMES,
                       help="chain score (default: %(default)s)")
    score.add_argument("--split-regex", metavar="REGEX", default=SCORE_FILE_DEFAULTS.split_regex,
                       help="cut string completions/candidates at this regex instead of the run's separator")
    score.add_argument("--chunk-rows", type=int, default=SCORE_FILE_DEFAULTS.chunk_rows,
                       help="rows read, scored and written at a time (default: %(default)s)")
    score.add_argument("--limit", type=int, default=SCORE_FILE_DEFAULTS.limit, help="score only the first N rows")
    add_scoring_flags(score)
    score.set_defaults(func=cmd_score)

    evaluate = commands.add_parser(
        "eval", help="step metrics, ProcessBench F1 and best-of-N accuracy, with an HTML report and plots",
        description="Evaluate a PRM on labelled files (records, ProcessBench rows converted or raw, best-of-N "
                    "rows). Writes metrics.json, report.html, roc.png, calibration.png and training_loss.png.")
    evaluate.add_argument("run", help="run folder, checkpoint, merged export or public PRM folder; several PRM "
                                      "folders before the data are evaluated side by side")
    evaluate.add_argument("data", nargs="+", help="labelled data files or dataset ids (one split each)")
    threshold = evaluate.add_mutually_exclusive_group()
    threshold.add_argument("--threshold", type=float, default=EVAL_DEFAULTS.threshold,
                           help="fixed step threshold (default 0.5)")
    threshold.add_argument("--calibrate-on", metavar="DATA", default=EVAL_DEFAULTS.calibrate_on,
                           help="choose the threshold maximising ProcessBench F1 on this file, apply it to all")
    evaluate.add_argument("--out", default=EVAL_DEFAULTS.out, help="output folder (default: RUN/eval/<data stem>)")
    evaluate.add_argument("--limit", type=int, default=EVAL_DEFAULTS.limit,
                          help="use N rows of each file, evenly spaced through it")
    evaluate.add_argument("--report-chains", type=int, default=EVAL_DEFAULTS.report_chains,
                          help="chains per split in report.html (default: %(default)s)")
    evaluate.add_argument("--label-scheme", default=EVAL_DEFAULTS.label_scheme, choices=LABEL_SCHEMES,
                          help="read labels as binary (0 = wrong) or ternary (-1/0/+1 ratings), or detect per file "
                               "(auto); default: as the run's training data was read")
    add_scoring_flags(evaluate)
    evaluate.set_defaults(func=cmd_eval)


def cmd_score(args) -> int:
    import torch

    from prmkit.device import launch_from_env
    from prmkit.scoring.distributed import join_process_group, leave_process_group, rank_device
    from prmkit.scoring.score_file import score_file
    from prmkit.scoring.scorer import PRMScorer

    options = ScoreFileOptions(aggregate=args.aggregate, split_regex=args.split_regex, chunk_rows=args.chunk_rows,
                               limit=args.limit)
    scoring = scoring_options(args)
    quiet_transformers()
    launch = launch_from_env()  # under torchrun: this rank scores every world_size-th chunk of rows
    scoring = scoring.replace(device=rank_device(scoring.device, launch, torch.cuda.is_available()))
    scorer = PRMScorer.from_options(args.run, scoring)
    join_process_group(launch, scorer.device)
    try:
        result = score_file(scorer, args.input, args.output, options, progress=sys.stderr.isatty(), launch=launch)
    finally:
        leave_process_group()
    if launch.is_main:
        ranks = f" by {launch.world_size} processes" if launch.distributed else ""
        print(f"{result.rows} rows ({result.chains} chains, {result.steps} steps) scored{ranks} in "
              f"{result.seconds:.1f} s on {scorer.device.type} -> {result.output}")
    return 0


def cmd_eval(args) -> int:

    from prmkit.evaluation.compare import compare, render_comparison, split_models
    from prmkit.evaluation.evaluate import evaluate
    from prmkit.evaluation.tables import render_tables

    console = display.console()
    options = EvalOptions(threshold=args.threshold, calibrate_on=args.calibrate_on, out=args.out, limit=args.limit,
                          report_chains=args.report_chains, label_scheme=args.label_scheme)
    quiet_transformers()
    runs, data = split_models([args.run, *args.data])
    if not data:
        raise PRMError(f"no data file after the PRM folders {', '.join(runs)}; give at least one labelled file")
    if len(runs) > 1:
        comparison = compare(runs, data, options, scoring_options(args), progress=console.print)
        console.print(render_comparison(comparison))
        console.print(f"written to {comparison.out}: comparison.json, comparison.html and one folder per PRM "
                      f"({', '.join(comparison.names)})")
        console.print(f"time: {comparison.seconds:.1f} s")
        return 0
    result = evaluate(runs[0], data, options, scoring_options(args), progress=console.print)
    for table in render_tables(result):
        console.print(table)
    for warning in result.warnings:
        console.print(f"warning: {warning}", style="yellow", highlight=False)
    written = ["metrics.json"] + [Path(v).name for v in result.outputs.values() if v]
    console.print(f"written to {result.out}: {', '.join(written)}")
    console.print(f"time: {result.total_seconds:.1f} s (model load {result.load_seconds:.1f} s)")
    return 0
