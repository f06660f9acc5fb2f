"""TRL's PRM trainer on prmkit: `from prmkit.trl import PRMConfig, PRMTrainer` in place of TRL's import, the rest of
a TRL 1.13 PRM script unchanged. docs/trl.md: the argument table and what differs."""

from prmkit.trl.config import PRMConfig
from prmkit.trl.trainer import PRMTrainer

__all__ = ["PRMConfig", "PRMTrainer"]
