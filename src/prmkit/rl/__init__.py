"""Policy optimisation with per-step PRM rewards: `ProcessGRPOTrainer` (TRL's GRPOTrainer with per-token
advantages), the pure advantage math in `advantages`, and `prompt_filter` (`prmkit rl-filter`: the prompts whose
pass rate under the policy gives GRPO a reward spread). Only the trainer needs TRL (`pip install prmkit[rl]`), and
nothing else in prmkit imports it, so `import prmkit` works without TRL."""

from __future__ import annotations

__all__ = ["ProcessGRPOConfig", "ProcessGRPOTrainer"]


def __getattr__(name: str):
    """The trainer loads TRL; `prmkit.rl.advantages` alone does not, so the names load on first use."""
    if name in __all__:
        from prmkit.rl import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'prmkit.rl' has no attribute {name!r}")
