#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (-fsanitize=fuzzer,address,undefined) and runs
# each for N seconds (default 60) from its committed seed corpus (fuzz/corpus/<target>/).
# Exits non-zero on any finding (crash, sanitizer report, Error without a Fix, wrong answer); the
# input that found it is left in build/asan/work/<target>-artifacts/ for replay:
#   build/asan/fuzz/fuzz_<target> <that file>
# Usage: scripts/fuzz.sh [seconds] [target...]        targets: planner validate differential
#   ATTNKIT_FUZZ_STRICT=1  also generate inputs no caller makes by mistake (docs/errors.md, Fuzzing)
#   ATTNKIT_FUZZ_BUILD     build folder (default build/asan, the asan preset's)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(planner validate differential)
build=${ATTNKIT_FUZZ_BUILD:-build/asan}

# clang and libFuzzer's runtime (only "recommended" by clang's packages, so install it by name).
missing=()
for p in clang libclang-rt-14-dev; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The asan preset's tree is the fuzzing build too (its tests and the fuzzers share the sanitized
# library; after `cmake --workflow --preset asan-test` the targets are built already). Another
# folder gets a fuzz-only configuration.
if [[ $build == build/asan ]]; then
  cmake --preset asan >/dev/null
else
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DATTNKIT_CUDA=OFF -DATTNKIT_FUZZ=ON -DATTNKIT_TESTS=OFF >/dev/null
fi
cmake --build "$build" -j2 --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
for t in "${targets[@]}"; do
  # New inputs go to a scratch corpus; the committed seeds are only read.
  work="$build/work/$t"
  artifacts="$build/work/$t-artifacts/"
  mkdir -p "$work" "$artifacts"
  log="$build/work/$t.log"
  echo "fuzz: $t for ${seconds}s (log: $log)"
  if "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=30 -max_len=1024 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $t: $runs runs, coverage $cov edges, no finding"
  else
    echo "fuzz: $t: FINDING (see $log and $artifacts)"
    grep -E -m20 'attnkit fuzz finding|runtime error|ERROR: |SUMMARY|#[0-9]+ 0x.* in attnkit' "$log" || tail -40 "$log"
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in: ${failed[*]}"
  exit 1
fi
echo "fuzz: all targets clean"
