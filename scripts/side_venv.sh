#!/usr/bin/env bash
# Sourced by the setup scripts of prmkit's side environments (.venv-vllm, .venv-verl): each pins its own torch and
# transformers beside a system prmkit is tested against, and the default environment (.venv) never needs them.
#
#   side_venv VENV SCRIPT install_function
#
# creates VENV once and runs install_function (with $PY set to VENV's python) after the pinned CPU torch, when the
# setup SCRIPT, this file or pyproject.toml changed since the last install (a marker keyed on them says so).
side_venv() {
    local venv=$1 script=$2 install=$3
    if [ ! -x "$venv/bin/python" ]; then
        "${PYTHON:-python3}" -m venv "$venv"
    fi
    local stamp
    stamp="$venv/.prmkit-installed-$(cat "$script" scripts/side_venv.sh pyproject.toml | sha256sum | cut -c1-16)"
    if [ ! -f "$stamp" ]; then
        PY="$venv/bin/python"
        "$PY" -m pip install --quiet --upgrade pip
        # torch first and pinned: the CPU build; an unpinned torch would pull CUDA.
        "$PY" -m pip install --quiet "torch==2.13.0"
        "$install"
        rm -f "$venv"/.prmkit-*installed-*
        touch "$stamp"
    fi
}

# transformers, torch, tokenizers and huggingface-hub as the side system installed them, to hold them there while
# prmkit is installed beside it.
held_versions() {
    "$PY" -m pip freeze | grep -iE '^(transformers|torch|tokenizers|huggingface[-_]hub)=='
}
