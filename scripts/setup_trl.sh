#!/usr/bin/env bash
# Create .venv-trl (once): TRL 1.13.0, the last release with a PRMTrainer (TRL 1.14 removed it), with prmkit
# installed into it, for the tests that check prmkit against TRL's own PRM tokenization and read a PRM that TRL's
# trainer wrote. The default environment (.venv, scripts/setup.sh) holds a newer TRL for GRPO and never needs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/side_venv.sh
TRL_PACKAGE=${TRL_PACKAGE:-trl==1.13.0}
# The transformers the default environment is tested with (constraints.txt), so both sides tokenize alike.
TRANSFORMERS_PACKAGE=${TRANSFORMERS_PACKAGE:-$(grep -E '^transformers==' constraints.txt)}

install_trl() {
    "$PY" -m pip install --quiet "$TRL_PACKAGE" "$TRANSFORMERS_PACKAGE" "peft>=0.15" "datasets>=3.0"
    # prmkit with its dependencies, torch and transformers held where they are now.
    local held
    held=$(held_versions)
    "$PY" -m pip install --quiet -e . $held "pytest>=8"
}

side_venv .venv-trl scripts/setup_trl.sh install_trl
