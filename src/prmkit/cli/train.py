"""`prmkit train`, `prmkit config`, `prmkit export` and `prmkit demo`: each parses its flags and calls one library
function."""

from __future__ import annotations

import argparse
import json

from prmkit.cli.common import quiet_transformers
from prmkit.errors import PRMError


def register(commands) -> None:
    train = commands.add_parser("train", help="train a PRM from a YAML config",
                                description="Train a PRM. Overrides use the YAML keys: training.lr=1e-4")
    train.add_argument("config", help="YAML config file")
    train.add_argument("overrides", nargs="*", help="section.key=value overrides")
    train.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    train.set_defaults(func=cmd_train)

    export = commands.add_parser("export", help="export a run as a standalone transformers or vLLM model folder")
    export.add_argument("run", help="run folder or checkpoint")
    target = export.add_mutually_exclusive_group(required=True)
    target.add_argument("--merge", metavar="OUT", help="folder for the merged transformers model")
    target.add_argument("--vllm", metavar="OUT",
                        help="folder for `vllm serve --runner pooling` (one score per step; see prmkit_vllm.json)")
    export.add_argument("--hub-id", metavar="OWNER/NAME",
                        help="with --merge: the hub repository the model is meant for; the model card (OUT/README.md) "
                             "loads it by this id, and the `hf upload` command that publishes it is printed")
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
    demo.add_argument("--head-lr", type=float, default=defaults.head_lr,
                      help="learning rate of the head (default: the same as --lr)")
    demo.add_argument("--probe-rows", type=int, default=defaults.probe_rows,
                      help="training chains the probe head is fitted on (default: %(default)s)")
    demo.add_argument("--after-error", default=defaults.after_error, choices=["negative", "unlabelled"],
                      help="labels of steps after the first error (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=defaults.seed)
    demo.add_argument("--overwrite", action="store_true", help="replace an earlier demo in --out")
    demo.set_defaults(func=cmd_demo)


def cmd_train(args) -> int:
    from prmkit.config import load_config
    from prmkit.scoring.distributed import leave_process_group
    from prmkit.training.run_folder import is_main_process
    from prmkit.training.summary import print_summary
    from prmkit.training.trainer import train

    config = load_config(args.config, args.overrides)
    quiet_transformers()
    summary = train(config, overwrite=args.overwrite)
    # under torchrun, a gloo group left for interpreter exit to tear down can abort the process after a finished run
    leave_process_group()
    if is_main_process():  # under torchrun every rank returns; one table is enough
        print_summary(summary)
    return 0


def cmd_export(args) -> int:
    quiet_transformers()
    if args.vllm:
        if args.hub_id:
            raise PRMError("--hub-id goes with --merge (a vLLM folder has no model card); export with --merge OUT")
        from prmkit.scoring.export_vllm import VLLM_FILE, export_vllm, serve_command

        out = export_vllm(args.run, args.vllm, overwrite=args.overwrite)
        step_id = json.loads((out / VLLM_FILE).read_text(encoding="utf-8"))["step_token_id"]
        print(f"vLLM model written to {out}; serve it with:\n  {serve_command(out, step_id)}\n"
              f"and send token ids from prmkit.scoring.export_vllm.VLLMInputs (see {out / VLLM_FILE})")
        return 0
    from prmkit.scoring.export import CARD_FILE, export_merged, upload_command

    out = export_merged(args.run, args.merge, overwrite=args.overwrite, hub_id=args.hub_id)
    print(f"merged model written to {out} (load it with AutoModelForTokenClassification.from_pretrained), with a "
          f"model card in {out / CARD_FILE}")
    if args.hub_id:
        print(f"publish it with (after `hf auth login`):\n  {upload_command(out, args.hub_id)}")
    return 0


def cmd_config(args) -> int:
    from prmkit.config import config_to_yaml, load_config

    print(config_to_yaml(load_config(args.config, args.overrides)), end="")
    return 0


def cmd_demo(args) -> int:
    from pathlib import Path

    from prmkit.demo import DemoOptions, run_demo

    quiet_transformers()
    run_demo(DemoOptions(out=Path(args.out), base=args.base, rows=args.rows, val_rows=args.val_rows, steps=args.steps,
                         batch_size=args.batch_size, top_layers=args.top_layers or None, seed=args.seed,
                         after_error=args.after_error, lr=args.lr, head_lr=args.head_lr, probe_rows=args.probe_rows,
                         num_layers=args.num_layers or None,
                         packing=args.packing, head_init=args.head_init,
                         overwrite=args.overwrite))
    return 0
