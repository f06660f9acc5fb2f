"""What BENCHMARKS.md's rendered regions are made of: the results files, the targets, and number formats.

Every target a verdict is computed against is declared here, once, in TARGETS; a region states "met" or "missed"
by comparing a figure read from bench/results/*.json with its target, so no verdict outlives the run it judged.
"""

from __future__ import annotations

import json
import operator
import statistics
from functools import cache
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

# name -> (comparison, target, what is compared). The comparison reads "measured <op> target".
TARGETS: dict[str, tuple[str, float, str]] = {
    "train_full_speed": (">=", 1.2, "prmkit full fine-tune tokens/s, against the naive design's"),
    "train_full_rss": ("<=", 0.85, "prmkit full fine-tune peak RSS, against the naive design's"),
    "train_lora_speed": (">=", 1.6, "prmkit LoRA (all layers) tokens/s, against the naive full fine-tune's"),
    "train_utilisation": (">=", 0.6, "training FLOP utilisation of the prmkit full fine-tune"),
    "scoring_vs_prefix": (">=", 5.0, "batched one-pass scoring, against one forward per step prefix"),
    "scoring_vs_unbatched": (">=", 2.0, "batched one-pass scoring, against one chain at a time"),
    "groups_speedup": (">=", 1.25, "shared-prompt groups, prompt read once against whole chains"),
    "search_prm_time": (">=", 3.0, "tree search PRM time, full pass against keys and values kept"),
    "serve_vs_in_process": (">=", 0.85, "`prmkit serve` chains/s, against in-process score_many"),
    "serve_vs_one_at_a_time": (">=", 1.5, "`prmkit serve` chains/s, against one chain at a time"),
    "peer_lora_speed": (">=", 1.1, "prmkit LoRA rows/s, against TRL's PRMTrainer"),
    "peer_lora_rss": ("<=", 0.9, "prmkit LoRA peak RSS, against TRL's PRMTrainer"),
    "peer_full_speed": (">=", 1.15, "prmkit full fine-tune rows/s, against soup-cli"),
    "peer_full_rss": ("<=", 0.85, "prmkit full fine-tune peak RSS, against soup-cli"),
    "compiled_lora_speed": (">=", 1.2, "prmkit LoRA compiled (warm cache) rows/s, against TRL's"),
    "compiled_lora_rss": ("<=", 0.85, "prmkit LoRA compiled peak RSS, against TRL's"),
    "loop_weighted_vs_majority": (">", 0.0, "lower end of weighted best-of-N (mc PRM) - majority, N = 8 and 16"),
    "loop_mc_vs_exact_auroc": (">=", 0.9, "mc-label PRM held-out step AUROC, against the exact-label PRM's"),
    "loop_policy_low": (">=", 0.2, "the lifecycle policy's held-out greedy accuracy, lower bound"),
    "loop_policy_high": ("<=", 0.7, "the lifecycle policy's held-out greedy accuracy, upper bound"),
    "loop_minutes": ("<", 60.0, "the lifecycle loop from the cached policy, minutes"),
    "demo_auroc": (">=", 0.85, "the demo's held-out step AUROC"),
    "demo_gain": (">", 0.0, "the demo's held-out step AUROC, trained minus the probe it starts from"),
    "demo_seconds": ("<", 600.0, "the demo's run, seconds (its results.json)"),
}

COMPARE = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def verdict(target: str, *measured: float) -> str:
    """'met' when every measured value meets TARGETS[target], else 'missed'."""
    op, value, _ = TARGETS[target]
    return "met" if all(COMPARE[op](m, value) for m in measured) else "missed"


def goal(target: str, unit: str = "x") -> str:
    """The target as the docs write it, e.g. '>= 1.2x'."""
    op, value, _ = TARGETS[target]
    return f"{op} {value:g}{unit}"


@cache
def load(name: str) -> dict:
    """A results file by name (without .json)."""
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def interval(block: dict, places: int = 3, signed: bool = False) -> str:
    """'[low, high]' of a bootstrap block."""
    sign = "+" if signed else ""
    return f"[{block['low']:{sign}.{places}f}, {block['high']:{sign}.{places}f}]"


def spread(values: list[float], places: int = 3) -> str:
    """'median (min-max)' of repeated measurements; a single run says so."""
    if len(values) == 1:
        return f"{values[0]:.{places}f} (one run)"
    return f"{statistics.median(values):.{places}f} ({min(values):.{places}f}-{max(values):.{places}f})"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A markdown table; ALIGN holds one character per column, 'l' or 'r' (numbers right by default)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def bold(text: str, on: bool = True) -> str:
    return f"**{text}**" if on else text
