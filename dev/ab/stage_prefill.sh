#!/usr/bin/env bash
# Builds prefill_bench (and attnkit_cuda_tests) at several git refs, for one device call that
# compares them (dev/ab/prefill_ab.sh), and packs them for the device's `carry`:
#   dev/ab/stage_prefill.sh BUILD NAME=REF [NAME=REF ...]
#   e.g. dev/ab/stage_prefill.sh build/lead main=main cw=exp/cw-broadcast dead=exp/dead-key-tiles
# BUILD is a configured CUDA build folder (cmake -DATTNKIT_CUDA=ON); each ref is checked out in turn
# and the library rebuilt there incrementally, so the work tree must be clean (uncommitted edits
# would ride along into every build). Writes build/ab/NAME/{prefill_bench,attnkit_cuda_tests}
# (stripped), build/ab/run.sh if absent, and build/carry/m.tar.xz; on the device:
#   mkdir -p b && tar xJf build/carry/m.tar.xz -C b && bash b/run.sh
set -euo pipefail
build=$1
shift
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "stage_prefill.sh: commit or stash your edits first (they would be built into every ref)" >&2
  exit 1
fi
start=$(git rev-parse --abbrev-ref HEAD)
[[ $start == HEAD ]] && start=$(git rev-parse HEAD)
trap 'git checkout -q "$start"' EXIT
mkdir -p build/ab
for spec in "$@"; do
  name=${spec%%=*} ref=${spec#*=}
  git checkout -q "$ref"
  echo "== $name: $ref ($(git rev-parse --short HEAD))"
  cmake --build "$build" -j "$(nproc)" --target attnkit attnkit_cuda_tests attnkit_prefill_bench > /dev/null
  mkdir -p "build/ab/$name"
  cp "$build/bench/attnkit_prefill_bench" "build/ab/$name/prefill_bench"
  cp "$build/tests/attnkit_cuda_tests" "build/ab/$name/"
  strip "build/ab/$name/prefill_bench" "build/ab/$name/attnkit_cuda_tests"
  python3 dev/hopper/key_loop_spills.py "$build/libattnkit.a" | grep -v "LDL/STL 0$" || true
done
if [[ ! -e build/ab/run.sh ]]; then
  names=()
  for spec in "$@"; do names+=("\$B/${spec%%=*}/prefill_bench"); done
  cat > build/ab/run.sh <<EOF
set -u
B=\$(cd "\$(dirname "\$0")" && pwd)
dev/ab/prefill_ab.sh 3 ${names[*]}
EOF
fi
mkdir -p build/carry
tar cJf build/carry/m.tar.xz -C build/ab .
ls -la build/carry/m.tar.xz
