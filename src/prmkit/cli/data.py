"""`prmkit data ...`: convert, recipe, validate, stats, split and synth, each a thin call into prmkit.data."""

from __future__ import annotations

from pathlib import Path

from prmkit.cli.common import write_json
from prmkit.errors import PRMError


def register(commands) -> None:
    data = commands.add_parser("data", help="convert, check, split or generate stepwise data")
    sub = data.add_subparsers(dest="data_command", required=True)

    convert = sub.add_parser("convert", help="convert PRM800K, Math-Shepherd, ProcessBench, ... into prmkit records",
                             description="Options are key=value, e.g. neutral=ignore or after_error=negative.")
    convert.add_argument("--from", dest="source_format", required=True, metavar="FORMAT",
                         help="prm800k, prm800k-stepwise, math-shepherd, processbench, math-aps, prmbench, trl")
    convert.add_argument("input")
    convert.add_argument("output", help="JSONL file to write")
    convert.add_argument("options", nargs="*", help="format options as key=value")
    convert.add_argument("--json", dest="json_out", metavar="FILE", help="also write the report as JSON")
    convert.set_defaults(func=cmd_convert)

    recipe = sub.add_parser(
        "recipe", help="build TRL's stepwise Math-Shepherd or PRM800K dataset, in TRL's layout and prmkit's",
        description="Process raw Math-Shepherd or PRM800K rows as TRL's dataset scripts did (trl-lib/math_shepherd, "
                    "trl-lib/prm800k) and write a folder ready for `hf upload OWNER/NAME OUT_DIR --repo-type "
                    "dataset`: data/SPLIT.parquet in TRL's layout, prmkit/SPLIT.parquet as prmkit records, README.md "
                    "(the dataset card).")
    recipe.add_argument("recipe", metavar="RECIPE", help="math-shepherd or prm800k")
    recipe.add_argument("out_dir", help="folder to write (data/, prmkit/, README.md)")
    recipe.add_argument("--input", dest="inputs", action="append", default=[], metavar="[SPLIT=]PATH",
                        help="raw rows: a file, a folder or a dataset id; name splits as train=FILE test=FILE "
                             "(default for math-shepherd: peiyi9979/Math-Shepherd, split 95/5 as TRL did; prm800k: "
                             "phase1_train.jsonl and phase1_test.jsonl of github.com/openai/prm800k, or their "
                             "stepwise-critic parquet)")
    recipe.add_argument("--layout", action="append", choices=["trl", "prmkit"],
                        help="write only this layout (repeat for both; default both)")
    recipe.add_argument("--test-size", type=float, help="test share of one unnamed input (TRL's: 0.05)")
    recipe.add_argument("--seed", type=int, help="seed of that split (TRL's: 42)")
    recipe.add_argument("--json", dest="json_out", metavar="FILE", help="also write the report as JSON")
    recipe.set_defaults(func=cmd_recipe)

    for name, helptext in (("validate", "check every row of a file against the record contract"),
                           ("stats", "label, step and token-length statistics of a file")):
        command = sub.add_parser(name, help=helptext)
        command.add_argument("file")
        command.add_argument("--tokenizer", help="model folder or alias whose tokenizer measures token lengths")
        command.add_argument("--max-length", type=int, help="report the rows and steps this limit would cut")
        command.add_argument("--separator", default="\n\n", help="step separator (default: blank line)")
        command.add_argument("--label-scheme", default="auto", choices=["auto", "binary", "ternary"])
        command.add_argument("--neutral-label", default="positive", choices=["positive", "negative", "ignore"])
        command.add_argument("--json", dest="json_out", metavar="FILE", help="also write the statistics as JSON")
        command.set_defaults(func=cmd_validate if name == "validate" else cmd_stats)

    split = sub.add_parser("split", help="reproducible train/val split, grouped by problem")
    split.add_argument("file")
    split.add_argument("--val-fraction", type=float, required=True)
    split.add_argument("--seed", type=int, default=42)
    split.add_argument("--out-dir", required=True, help="writes train.jsonl and val.jsonl here")
    split.set_defaults(func=cmd_split)

    synth = sub.add_parser("synth", help="generate synthetic arithmetic chains with injected errors")
    synth.add_argument("out_dir", help="writes train.jsonl and val.jsonl here")
    synth.add_argument("--rows", type=int, default=600, help="training rows")
    synth.add_argument("--val-rows", type=int, default=100, help="held-out rows (from a different seed)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--correct-fraction", type=float, default=0.3)
    synth.add_argument("--after-error", default="negative", choices=["negative", "unlabelled"])
    synth.set_defaults(func=cmd_synth)


def cmd_convert(args) -> int:
    from prmkit.data.convert import convert

    options = {}
    for item in args.options:
        key, sep, raw = item.partition("=")
        if not sep:
            raise PRMError(f"option '{item}': expected key=value, e.g. neutral=ignore")
        options[key] = _option_value(raw)
    report = convert(args.source_format, args.input, args.output, **options)
    print(report.summary())
    write_json(args.json_out, report.to_dict())
    return 0


def cmd_recipe(args) -> int:
    from prmkit.data.recipe_output import LAYOUTS, run_recipe

    result = run_recipe(args.recipe, args.inputs, args.out_dir, layouts=args.layout or LAYOUTS,
                        test_size=args.test_size, seed=args.seed)
    print(result.summary())
    write_json(args.json_out, result.to_dict())
    return 0


def cmd_validate(args) -> int:
    from prmkit.data.stats import validate_file
    from prmkit.display import console

    report, problems = validate_file(args.file, scheme=args.label_scheme, neutral=args.neutral_label)
    for line in problems:
        print(line)
    try:
        stats = _stats(args) if report.rows_kept else None
    except PRMError as err:  # a line that is not JSON at all: the problems above say which
        stats = None
        print(f"statistics skipped: {err}")
    if stats:
        from prmkit.data.stats import render_stats

        console().print(render_stats(stats))
    bad_rows = len({p.row for p in report.problems})
    print(f"{args.file}: {report.rows_read} rows, {bad_rows} invalid, labels read as {report.scheme}")
    write_json(args.json_out, {"rows": report.rows_read, "invalid_rows": bad_rows, "problems": problems,
                                "stats": stats})
    return 1 if problems else 0


def cmd_stats(args) -> int:
    from prmkit.data.stats import render_stats
    from prmkit.display import console

    stats = _stats(args)
    console().print(render_stats(stats))
    write_json(args.json_out, stats)
    return 0


def cmd_split(args) -> int:
    from prmkit.data.io import load_records
    from prmkit.data.stats import split_records
    from prmkit.files import write_jsonl

    records, _ = load_records(args.file)
    train, val = split_records(records, args.val_fraction, args.seed)
    out = Path(args.out_dir)
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(val, out / "val.jsonl")
    print(f"{len(train)} train rows -> {out / 'train.jsonl'}\n{len(val)} val rows -> {out / 'val.jsonl'} "
          f"(grouped by prompt, seed {args.seed})")
    return 0


def cmd_synth(args) -> int:
    from prmkit.data.synthetic import generate_splits
    from prmkit.files import write_jsonl

    train, val = generate_splits(args.rows, args.val_rows, args.seed, correct_fraction=args.correct_fraction,
                                 after_error=args.after_error)
    out = Path(args.out_dir)
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(val, out / "val.jsonl")
    print(f"{len(train)} train rows -> {out / 'train.jsonl'}\n{len(val)} held-out rows -> {out / 'val.jsonl'}")
    return 0


def _stats(args) -> dict:
    from prmkit.data.io import load_records
    from prmkit.data.stats import dataset_stats

    records, _ = load_records(args.file, scheme=args.label_scheme, neutral=args.neutral_label, skip_invalid=True)
    tokenizer = None
    if args.tokenizer:
        from prmkit.backbones import resolve_base
        from prmkit.model import load_tokenizer

        tokenizer = load_tokenizer(resolve_base(args.tokenizer))
    elif args.max_length:
        raise PRMError("--max-length needs --tokenizer to count tokens")
    return dataset_stats(records, tokenizer, separator=args.separator, max_length=args.max_length)


def _option_value(raw: str):
    import yaml

    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
