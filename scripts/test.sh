#!/usr/bin/env bash
# Builds and runs every test: the release build (CUDA compiled when nvcc is present; GPU tests
# SKIPPED without a device), then the CPU tests again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --workflow --preset release-test
cmake --workflow --preset asan-test
echo "attnkit: all tests passed"
