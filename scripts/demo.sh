#!/usr/bin/env bash
# Set up (if needed) and run the demo: a LoRA PRM on SmolLM2-135M trained on synthetic chains, on this CPU.
# Extra arguments go to `prmkit demo` (e.g. --steps 40 --rows 300).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/prmkit demo --overwrite "$@"
