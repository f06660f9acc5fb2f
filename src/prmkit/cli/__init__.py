"""The `prmkit` command: parse arguments, call one library function, print the result.

One module per command group (train.py: train, config, export, demo; data.py: data ...; score.py: score, eval;
serve.py: serve; label.py; search.py; merge.py: merge, the shards of label and search; rl.py: rl-filter), all
sharing common.py.
Heavy libraries are imported inside the commands so `prmkit --help` answers at once.
"""

from __future__ import annotations

import argparse
import sys

from prmkit.cli import data as data_commands
from prmkit.cli import label as label_commands
from prmkit.cli import merge as merge_commands
from prmkit.cli import rl as rl_commands
from prmkit.cli import score as score_commands
from prmkit.cli import search as search_commands
from prmkit.cli import serve as serve_commands
from prmkit.cli import train as train_commands
from prmkit.errors import PRMError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prmkit", description="Train, evaluate and use Process Reward Models.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)
    train_commands.register(commands)
    data_commands.register(commands)
    score_commands.register(commands)
    serve_commands.register(commands)
    search_commands.register(commands)
    label_commands.register(commands)
    merge_commands.register(commands)
    rl_commands.register(commands)
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
