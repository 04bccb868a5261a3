#!/usr/bin/env bash
# One device call that A/Bs the decode CLI of a git ref against this working tree: both are built
# side by side there (the ref from `git archive`, so the tree may hold uncommitted edits), then
# dev/ab/cli_ab.sh alternates them over a point list:
#   dev/ab/device_decode_ab.sh REF POINTS [ROUNDS]
#   e.g. (on the device, carry [".deps/devprefix"]): dev/ab/device_decode_ab.sh HEAD dev/ab/points/decode_epilogue_lds.txt 2
# Build logs go to $OUT. Decode round 29 (docs/perf-notes.md) was measured this way.
set -uo pipefail
cd "$(dirname "$0")/../.."
ref=$1 points=$2 rounds=${3:-2}
OUT=${OUT:-/tmp/attnkit-out}
mkdir -p "$OUT"
old=/tmp/ab-old-tree
rm -rf "$old" && mkdir -p "$old" && git archive "$ref" | tar -x -C "$old" || { echo "no ref $ref here" >&2; exit 1; }
C=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON -DATTNKIT_NCCL=OFF -DATTNKIT_TESTS=OFF
   -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix")
cmake -S . -B build/ab-new "${C[@]}" > "$OUT/ab_configure_new.log" 2>&1
cmake -S "$old" -B "$old/build" "${C[@]}" > "$OUT/ab_configure_old.log" 2>&1
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
( cmake --build build/ab-new -j "$jobs" --target attnkit_cli > "$OUT/ab_build_new.log" 2>&1 &
  cmake --build "$old/build" -j "$jobs" --target attnkit_cli > "$OUT/ab_build_old.log" 2>&1 & wait )
for cli in "$old/build/attnkit" build/ab-new/attnkit; do
  [[ -x $cli ]] || { echo "build failed: $cli (logs in $OUT)" >&2; tail -5 "$OUT"/ab_build_*.log >&2; exit 1; }
done
echo "old = $ref ($(git rev-parse --short "$ref")), new = the working tree"
dev/ab/cli_ab.sh "$rounds" "$old/build/attnkit" build/ab-new/attnkit < "$points"
