#!/usr/bin/env bash
# Benchmark-only dependencies (never needed by the build or the tests, so CI does not run this):
# PyTorch's CPU build for bench/peers/torch_cpu_prefill.py, installed only when torch is missing.
set -euo pipefail
if ! python3 -c "import torch" >/dev/null 2>&1; then
  # The CPU build from PyTorch's index; where that index is unreachable, PyPI's default build
  # (larger: it carries the CUDA libraries, and runs on the CPU as well).
  python3 -m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu ||
    python3 -m pip install --quiet torch
fi
