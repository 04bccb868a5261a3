#!/usr/bin/env bash
# Builds and runs every test: the release build (CUDA compiled when nvcc is present; GPU tests
# SKIPPED without a device), the CPU tests again under AddressSanitizer + UBSan, the concurrency
# tests under ThreadSanitizer, the fuzzers for a bounded time, and the Python package's CPU tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time, so a slow CI run says where its minutes went.
start=$SECONDS
stage() { echo "attnkit: $1 done at $((SECONDS - start)) s"; }
scripts/setup.sh
stage setup
cmake --workflow --preset release-test
stage release
# ASan + UBSan with clang, in the tree that also builds the fuzzers (one sanitized library for both,
# ~5 min less than two). The test preset sets KMP_HOT_TEAMS_MAX_LEVEL=0: clang's OpenMP runtime
# (libomp 14) otherwise leaks the team buffers __kmp_fork_call allocates when a region's thread
# count changes, which LeakSanitizer reports against our tests at exit.
cmake --workflow --preset asan-test
stage asan
# Many threads planning and running at once, under ThreadSanitizer; then each libFuzzer target
# for 45 s, failing on any finding (built by the asan stage: one sanitized library for both).
cmake --workflow --preset tsan-test
stage tsan
scripts/fuzz.sh 45
stage fuzz
# The Python package, CPU-only here (the CUDA kernels were compiled above already), with the
# release build's C++ compiler (Python's sysconfig names g++, CMake picked c++; ccache hashes the
# name), so its CPU objects come from ccache: ~30 s instead of ~130 on two cores.
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/release/CMakeCache.txt)
python3 -m pip install -q --disable-pip-version-check . --no-build-isolation -Ccmake.define.ATTNKIT_CUDA=OFF \
  ${cxx:+-Ccmake.define.CMAKE_CXX_COMPILER=$cxx}
stage "python install"
python3 -m pytest -q python/tests -m "not gpu"
stage pytest
echo "attnkit: all tests passed"
