"""The `prmkit` command: parse arguments, call one library function, print the result.

Heavy libraries are imported inside the commands so `prmkit --help` answers at once.
"""

from __future__ import annotations

import argparse
import sys

from prmkit import cli_data
from prmkit import cli_use
from prmkit.errors import PRMError


def cmd_train(args) -> int:
    from prmkit.config import load_config
    from prmkit.run_folder import is_main_process
    from prmkit.summary import print_summary
    from prmkit.train import train

    config = load_config(args.config, args.overrides)
    _quiet_transformers()
    summary = train(config, overwrite=args.overwrite)
    if is_main_process():  # under torchrun every rank returns; one table is enough
        print_summary(summary)
    return 0


def cmd_export(args) -> int:
    from prmkit.export import export_merged

    _quiet_transformers()
    out = export_merged(args.run, args.merge, overwrite=args.overwrite)
    print(f"merged model written to {out} (load it with AutoModelForTokenClassification.from_pretrained)")
    return 0


def cmd_config(args) -> int:
    from prmkit.config import config_to_yaml, load_config

    print(config_to_yaml(load_config(args.config, args.overrides)), end="")
    return 0


def cmd_demo(args) -> int:
    from pathlib import Path

    from prmkit.demo import DemoOptions, run_demo

    _quiet_transformers()
    run_demo(DemoOptions(out=Path(args.out), base=args.base, rows=args.rows, val_rows=args.val_rows, steps=args.steps,
                         batch_size=args.batch_size, top_layers=args.top_layers or None, seed=args.seed,
                         after_error=args.after_error, lr=args.lr, num_layers=args.num_layers or None,
                         packing=args.packing, head_init=args.head_init,
                         overwrite=args.overwrite))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prmkit", description="Train, evaluate and use Process Reward Models.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a PRM from a YAML config",
                                description="Train a PRM. Overrides use the YAML keys: training.lr=1e-4")
    train.add_argument("config", help="YAML config file")
    train.add_argument("overrides", nargs="*", help="section.key=value overrides")
    train.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    train.set_defaults(func=cmd_train)

    export = commands.add_parser("export", help="export a run as a standalone transformers model")
    export.add_argument("run", help="run folder or checkpoint")
    export.add_argument("--merge", required=True, metavar="OUT", help="folder for the merged model")
    export.add_argument("--overwrite", action="store_true", help="replace OUT if it holds files")
    export.set_defaults(func=cmd_export)

    config = commands.add_parser("config", help="print the full config (defaults + file + overrides) as YAML")
    config.add_argument("config", nargs="?", help="YAML config file")
    config.add_argument("overrides", nargs="*", help="section.key=value overrides")
    config.set_defaults(func=cmd_config)

    from prmkit.demo import DemoOptions

    defaults = DemoOptions()
    demo = commands.add_parser("demo", help="train a real PRM on synthetic chains and show what it learned")
    demo.add_argument("--out", default=str(defaults.out), help="output folder (default: %(default)s)")
    demo.add_argument("--base", default=defaults.base, help="backbone (default: %(default)s)")
    demo.add_argument("--rows", type=int, default=defaults.rows, help="training chains (default: %(default)s)")
    demo.add_argument("--val-rows", type=int, default=defaults.val_rows, help="held-out chains (default: %(default)s)")
    demo.add_argument("--steps", type=int, default=defaults.steps, help="optimizer steps (default: %(default)s)")
    demo.add_argument("--batch-size", type=int, default=defaults.batch_size, help="default: %(default)s")
    demo.add_argument("--top-layers", type=int, default=defaults.top_layers,
                      help="LoRA on the last N layers only; 0 = every layer (default: %(default)s)")
    demo.add_argument("--num-layers", type=int, default=defaults.num_layers,
                      help="keep the backbone's first N layers; 0 = all (default: %(default)s)")
    demo.add_argument("--packing", action=argparse.BooleanOptionalAction, default=defaults.packing,
                      help="padding-free batches (default: %(default)s)")
    demo.add_argument("--head-init", default=defaults.head_init, choices=["random", "probe"],
                      help="start the head from a linear probe of the backbone (default: %(default)s)")
    demo.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate (default: %(default)s)")
    demo.add_argument("--after-error", default=defaults.after_error, choices=["negative", "unlabelled"],
                      help="labels of steps after the first error (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=defaults.seed)
    demo.add_argument("--overwrite", action="store_true", help="replace an earlier demo in --out")
    demo.set_defaults(func=cmd_demo)

    cli_data.register(commands)
    cli_use.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "config" and args.config and "=" in args.config:
        args.overrides, args.config = [args.config, *args.overrides], None
    try:
        return args.func(args)
    except PRMError as err:
        if args.debug:
            raise
        print(f"prmkit: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("prmkit: interrupted; a training run continues from its last checkpoint with training.resume=latest",
              file=sys.stderr)
        return 130


def _quiet_transformers() -> None:
    """Keep loader chatter off screen: transformers' load reports (e.g. 'score.weight newly initialized', which is
    expected here), its weight-loading bar, and a deprecation notice peft triggers in every run. The Trainer's own
    progress bar stays."""
    import warnings

    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


if __name__ == "__main__":
    sys.exit(main())
