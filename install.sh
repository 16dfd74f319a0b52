#!/usr/bin/env bash
# Install damcha_ts (editable) with the right torch build for this machine.
#   bash install.sh            # the package plus plotting
#   bash install.sh dev        # plus the test tools (and triton, whose CPU interpreter the tests use)
# On a machine without an NVIDIA GPU, torch is installed as a CPU build first (a few hundred MB
# instead of several GB of CUDA libraries); with a GPU the default CUDA build from PyPI is used, and
# the gpu extra (triton, for the fused DAMCHA kernel) is added to the extras asked for.
# Set DAMCHA_TS_TORCH to pick another torch version, PYTHON to pick another interpreter.
set -euo pipefail
cd "$(dirname "$0")"
extras="${1:-plot}"
py="${PYTHON:-python3}"
torch_version="${DAMCHA_TS_TORCH:-2.13.0}"

has_gpu=false
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  has_gpu=true
  extras="${extras},gpu"
fi

if ! "$py" -c "import torch" 2>/dev/null; then
  if "$has_gpu"; then
    "$py" -m pip install "torch==${torch_version}"
  elif "$py" -c "import socket; socket.setdefaulttimeout(3); socket.getaddrinfo('download.pytorch.org', 443)" 2>/dev/null; then
    "$py" -m pip install "torch==${torch_version}" --index-url https://download.pytorch.org/whl/cpu
  else
    # No route to the CPU wheel index: a local wheel directory or mirror (pip's find-links) serves it.
    "$py" -m pip install "torch==${torch_version}"
  fi
fi
"$py" -m pip install -e ".[${extras}]"
