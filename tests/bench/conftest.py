import sys
from pathlib import Path

# The benchmark fixtures live under bench/, outside the package; their tests import them from there.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
