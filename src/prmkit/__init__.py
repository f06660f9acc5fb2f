"""prmkit: train, evaluate and use Process Reward Models.

The public API, importable from `prmkit` itself (these names stay where they are when modules move):

    from prmkit import PRMScorer, PRMReward, RemotePRMReward, train, load_config, Config, PRMError

The package reads as the pipeline: `data` (records, rows, converters) -> `training` -> `scoring` (scorer, score
files, reward, export) -> `evaluation` (metrics, ProcessBench, reports) and `serving` (prmkit serve), with the
command line in `cli` and the pieces every stage shares (config, tokenize, model, loss, device, errors) at the
top. Names load on first use, so
`import prmkit` (and `prmkit --help`) does not pay for torch and transformers.
"""

from __future__ import annotations

__all__ = ["PRMScorer", "PRMReward", "RemotePRMReward", "ScoringOptions", "train", "load_config", "Config",
           "evaluate", "EvalOptions", "PRMError"]


def __getattr__(name: str):
    """Each public name is imported from its module on first use (plain imports, one branch per name)."""
    if name == "PRMScorer":
        from prmkit.scoring.scorer import PRMScorer as value
    elif name == "PRMReward":
        from prmkit.scoring.reward import PRMReward as value
    elif name == "RemotePRMReward":
        from prmkit.serving.clients import RemotePRMReward as value
    elif name == "ScoringOptions":
        from prmkit.scoring.options import ScoringOptions as value
    elif name == "train":
        from prmkit.training.trainer import train as value
    elif name in ("load_config", "Config"):
        from prmkit import config

        value = getattr(config, name)
    elif name == "evaluate":
        from prmkit.evaluation.evaluate import evaluate as value
    elif name == "EvalOptions":
        from prmkit.evaluation.options import EvalOptions as value
    elif name == "PRMError":
        from prmkit.errors import PRMError as value
    else:
        raise AttributeError(f"module 'prmkit' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
