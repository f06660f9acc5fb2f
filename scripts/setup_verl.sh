#!/usr/bin/env bash
# Create .venv-verl (once): verl 0.9.1 on CPU with prmkit installed into it, for the test that runs
# prmkit's verl reward manager through verl's own reward-loop classes. verl pins an older transformers than
# prmkit's default environment and brings Ray; the default environment (.venv, scripts/setup.sh) never needs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/side_venv.sh
VERL_PACKAGE=${VERL_PACKAGE:-verl==0.9.1}

install_verl() {
    "$PY" -m pip install --quiet "$VERL_PACKAGE"
    # prmkit with its dependencies, transformers held where verl put it (prmkit accepts any 5.x).
    local held
    held=$(held_versions)
    "$PY" -m pip install --quiet -e . $held "pytest>=8"
}

side_venv .venv-verl scripts/setup_verl.sh install_verl
