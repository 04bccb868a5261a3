#!/usr/bin/env bash
# Installs everything attnkit needs on a fresh Debian machine (idempotent; skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(cmake ninja-build g++ libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libfmt-dev
              libomp-dev clang libclang-rt-14-dev ccache python3 python3-pip)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python package's build and test tools (numpy for the CPU tests; torch is not needed in CI).
python3 -m pip install -q --disable-pip-version-check nanobind scikit-build-core numpy pytest
# Where CUDA compiles but the toolkit has no SASS disassembler: cuobjdump and nvdisasm from PyPI, for
# the Hopper kernels' SASS test (dev/hopper/key_loop_spills.py).
if { command -v nvcc || [[ -x /usr/local/cuda/bin/nvcc ]]; } >/dev/null 2>&1 &&
   ! { command -v cuobjdump || [[ -x /usr/local/cuda/bin/cuobjdump ]]; } >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
fi
