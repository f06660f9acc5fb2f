"""prmkit: train, evaluate and use Process Reward Models.

The public API, importable from `prmkit` itself (these names stay where they are when modules move):

    from prmkit import PRMScorer, PRMReward, train, load_config, Config, PRMError

The package reads as the pipeline: `data` (records, rows, converters) -> `training` -> `scoring` (scorer, score
files, reward, export) -> `evaluation` (metrics, ProcessBench, reports), with the command line in `cli` and the
pieces every stage shares (config, tokenize, model, loss, device, errors) at the top. Names load on first use, so
`import prmkit` (and `prmkit --help`) does not pay for torch and transformers.
"""

from __future__ import annotations

from importlib import import_module

PUBLIC_API = {
    "PRMScorer": "prmkit.scoring.scorer",
    "PRMReward": "prmkit.scoring.reward",
    "ScoringOptions": "prmkit.scoring.options",
    "train": "prmkit.training.trainer",
    "load_config": "prmkit.config",
    "Config": "prmkit.config",
    "evaluate": "prmkit.evaluation.evaluate",
    "EvalOptions": "prmkit.evaluation.options",
    "PRMError": "prmkit.errors",
}
__all__ = list(PUBLIC_API)


def __getattr__(name: str):
    if name not in PUBLIC_API:
        raise AttributeError(f"module 'prmkit' has no attribute {name!r}")
    value = getattr(import_module(PUBLIC_API[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
