"""What every command module shares: quiet model loading, the scoring flags built from `ScoringOptions`, and
writing a JSON side file. Command modules import this one and nothing else of the command line, so there is no
import cycle."""

from __future__ import annotations

import argparse

# Defaults come from the options dataclasses (light imports: no torch), so each is written once.
from prmkit.scoring.options import DTYPE_NAMES, ScoringOptions

SCORING_DEFAULTS = ScoringOptions()


def quiet_transformers() -> None:
    """Keep loader chatter off screen: transformers' load reports (e.g. 'score.weight newly initialized', which is
    expected here), its weight-loading bar, and deprecation notices peft and transformers trigger in every run. The
    Trainer's own progress bar stays."""
    import warnings

    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


def add_scoring_flags(parser: argparse.ArgumentParser) -> None:
    """The `ScoringOptions` fields as flags (`batch_size` = `--batch-size`)."""
    parser.add_argument("--batch-size", type=int, default=SCORING_DEFAULTS.batch_size,
                        help="chains per forward pass (default: %(default)s)")
    parser.add_argument("--max-batch-tokens", type=int, default=SCORING_DEFAULTS.max_batch_tokens,
                        help="padded tokens per forward pass (chains x longest chain); bounds GPU memory on long "
                             "chains (default: no bound beyond --batch-size)")
    parser.add_argument("--device", default=SCORING_DEFAULTS.device,
                        help="cuda, mps or cpu (default: the first available, in that order)")
    parser.add_argument("--dtype", default=SCORING_DEFAULTS.dtype, choices=DTYPE_NAMES,
                        help="weights for inference (auto: bf16/fp16 on GPU, fp32 on CPU)")
    parser.add_argument("--max-length", type=int, default=SCORING_DEFAULTS.max_length,
                        help="tokens read per chain (default: the run's training max_length); steps past it are "
                             "left unscored")


def scoring_options(args: argparse.Namespace) -> ScoringOptions:
    return ScoringOptions(device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                          max_batch_tokens=args.max_batch_tokens, max_length=args.max_length)


def write_json(path: str | None, payload: dict) -> None:
    """A report beside the printed output, when the user asked for one with --json."""
    if path:
        from prmkit.files import write_json_atomic

        write_json_atomic(path, payload)
