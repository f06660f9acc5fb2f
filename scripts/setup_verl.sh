#!/usr/bin/env bash
# Create .venv-verl (once): verl 0.9.1 on CPU with prmkit installed into it, for the test that runs
# examples/verl_step_rewards.py through verl's own reward-loop classes. verl pins an older transformers than
# prmkit's default environment and brings Ray; the default environment (.venv, scripts/setup.sh) never needs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-verl
VERL_PACKAGE=${VERL_PACKAGE:-verl==0.9.1}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
# A marker keyed on this script and the package list skips the install when nothing changed since the last one.
stamp="$VENV/.prmkit-verl-installed-$(cat scripts/setup_verl.sh pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # torch first and pinned: the CPU build; an unpinned torch would pull CUDA.
    "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
    "$VENV/bin/python" -m pip install --quiet "$VERL_PACKAGE"
    # prmkit with its dependencies, transformers held where verl put it (prmkit accepts any 5.x).
    held=$("$VENV/bin/python" -m pip freeze | grep -iE '^(transformers|torch|tokenizers|huggingface[-_]hub)==')
    "$VENV/bin/python" -m pip install --quiet -e . $held "pytest>=8"
    rm -f "$VENV"/.prmkit-verl-installed-*
    touch "$stamp"
fi
