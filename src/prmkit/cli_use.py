"""`prmkit score` and `prmkit eval`: use a trained PRM, each a thin call into prmkit.score_file / prmkit.evaluate."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from prmkit.errors import PRMError

AGGREGATION_NAMES = ("min", "max", "mean", "last", "prod", "geometric_mean")


def register(commands) -> None:
    score = commands.add_parser(
        "score", help="score every chain of a file with a trained PRM",
        description="Rows are records ({prompt, completions}) or best-of-N rows ({prompt, candidates: [str | "
                    "[steps]]}). Output: each row plus step_scores and score (records) or step_scores, scores "
                    "and best (candidates), as JSON lines.")
    score.add_argument("run", help="run folder, checkpoint or merged export")
    score.add_argument("input", help=".jsonl, .json or .parquet file of rows")
    score.add_argument("output", help=".jsonl file to write")
    score.add_argument("--aggregate", default="min", choices=AGGREGATION_NAMES, help="chain score (default: min)")
    score.add_argument("--split-regex", metavar="REGEX",
                       help="cut string completions/candidates at this regex instead of the run's separator")
    score.add_argument("--chunk-rows", type=int, default=256, help="rows read, scored and written at a time")
    score.add_argument("--limit", type=int, help="score only the first N rows")
    _model_options(score)
    score.set_defaults(func=cmd_score)

    evaluate = commands.add_parser(
        "eval", help="step metrics, ProcessBench F1 and best-of-N accuracy, with an HTML report and plots",
        description="Evaluate a PRM on labelled files (records, ProcessBench rows converted or raw, best-of-N "
                    "rows). Writes metrics.json, report.html, roc.png, calibration.png and training_loss.png.")
    evaluate.add_argument("run", help="run folder, checkpoint or merged export")
    evaluate.add_argument("data", nargs="+", help="labelled data files (one split each)")
    threshold = evaluate.add_mutually_exclusive_group()
    threshold.add_argument("--threshold", type=float, help="fixed step threshold (default 0.5)")
    threshold.add_argument("--calibrate-on", metavar="DATA",
                           help="choose the threshold maximising ProcessBench F1 on this file, apply it to all")
    evaluate.add_argument("--out", help="output folder (default: RUN/eval/<data stem>)")
    evaluate.add_argument("--limit", type=int, help="use N rows of each file, evenly spaced through it")
    evaluate.add_argument("--report-chains", type=int, default=500, help="chains per split in report.html")
    _model_options(evaluate)
    evaluate.set_defaults(func=cmd_eval)


def _model_options(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=16, help="chains per forward pass")
    parser.add_argument("--max-batch-tokens", type=int,
                        help="padded tokens per forward pass (chains x longest chain); bounds GPU memory on long "
                             "chains (default: no bound beyond --batch-size)")
    parser.add_argument("--device", help="cuda, mps or cpu (default: the first available, in that order)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                        help="weights for inference (auto: bf16/fp16 on GPU, fp32 on CPU)")
    parser.add_argument("--max-length", type=int,
                        help="tokens read per chain (default: the run's training max_length); steps past it are "
                             "left unscored")


def cmd_score(args) -> int:
    from prmkit.distributed import default_device, join_process_group, launch_from_env, leave_process_group
    from prmkit.score import PRMScorer
    from prmkit.score_file import score_file

    separator = _regex(args.split_regex) if args.split_regex else None
    _quiet()
    launch = launch_from_env()  # under torchrun: this rank scores every world_size-th chunk of rows
    scorer = PRMScorer.from_pretrained(args.run, device=args.device or default_device(launch), dtype=args.dtype,
                                       batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens,
                                       max_length=args.max_length)
    join_process_group(launch, scorer.device)
    try:
        result = score_file(scorer, args.input, args.output, how=args.aggregate, separator=separator,
                            chunk_rows=args.chunk_rows, limit=args.limit, progress=sys.stderr.isatty(), launch=launch)
    finally:
        leave_process_group()
    if launch.is_main:
        ranks = f" by {launch.world_size} processes" if launch.distributed else ""
        print(f"{result['rows']} rows ({result['chains']} chains, {result['steps']} steps) scored{ranks} in "
              f"{result['seconds']:.1f} s on {scorer.device.type} -> {result['output']}")
    return 0


def cmd_eval(args) -> int:
    from rich.console import Console

    from prmkit.evaluate import evaluate, render_tables

    console = Console()
    _quiet()
    metrics = evaluate(args.run, args.data, threshold=args.threshold, calibrate_on=args.calibrate_on, out=args.out,
                       batch_size=args.batch_size, device=args.device, dtype=args.dtype, limit=args.limit,
                       max_length=args.max_length, max_batch_tokens=args.max_batch_tokens,
                       max_report_chains=args.report_chains, progress=console.print)
    for table in render_tables(metrics):
        console.print(table)
    written = ["metrics.json"] + [Path(v).name for v in metrics["outputs"].values() if v]
    console.print(f"written to {metrics['out']}: {', '.join(written)}")
    console.print(f"time: {metrics['seconds']['total']:.1f} s (model load {metrics['seconds']['load']:.1f} s)")
    return 0


def _quiet() -> None:
    """Keep loader chatter (transformers' weight-loading bar, its deprecation notices) out of the output."""
    import warnings

    from prmkit.cli import _quiet_transformers

    _quiet_transformers()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


def _regex(pattern: str):
    try:
        return re.compile(pattern)
    except re.error as err:
        raise PRMError(f"--split-regex {pattern!r} is not a valid regular expression ({err}); "
                       r"e.g. --split-regex '\n\s*\n'") from None
