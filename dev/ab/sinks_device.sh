#!/usr/bin/env bash
# One device call for the attention-sinks work (docs/perf-notes.md, "Attention sinks folded into the
# kernels"): the sinks gpu tests plain and under memcheck / racecheck (build/ab/cuda_tests, a
# stripped attnkit_cuda_tests), the CLI A/B (dev/ab/sinks_ab.sh), then the Python package built
# here with the CUDA backend, its sinks / transformers gpu tests, and dev/sinks_sdpa_timing.py.
set -u
export LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib
T=build/ab/cuda_tests
F='AttentionSinksCuda*'
$T --gtest_filter="$F" 2>&1 | grep -E "^\[ +(OK|FAILED) |Failure" | head -20
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > $OUT/sanitize_$tool.log 2>&1
  echo "$tool rc=$? $(grep -c 'ERROR SUMMARY: 0 errors' $OUT/sanitize_$tool.log) clean summaries"
done
$T --gtest_filter='Decode*:Prefill*:*Paged*:*Extend*' --gtest_brief=1 2>&1 | tail -3
bash dev/ab/sinks_ab.sh 2>&1 | tail -16
export CMAKE_PREFIX_PATH=$PWD/.deps/devprefix CMAKE_ARGS="-DATTNKIT_CUDA_ARCHS=90a" CMAKE_BUILD_PARALLEL_LEVEL=16
python3 -m pip install -q . --no-build-isolation --no-deps --no-index -Cbuild-dir=build/python-device > $OUT/pip.log 2>&1 || tail -20 $OUT/pip.log
(cd /tmp && python3 -m pytest -q -p no:cacheprovider $OLDPWD/python/tests/test_gpu.py $OLDPWD/python/tests/test_torch_compile.py 2>&1 | tail -3)
python3 dev/sinks_sdpa_timing.py --reps 50 2>&1 | tail -9
