#!/usr/bin/env bash
# Exports a commit (default HEAD) into the ignored .deps/snapshot/ so a device run can build exactly
# that commit while the working tree holds other engineers' unfinished edits:
#   scripts/snapshot-for-device.sh [commit]
# then `run` with carry [".deps/devprefix", ".deps/snapshot"] and a command starting with
#   cd .deps/snapshot && export ATTNKIT_COMMIT=$(cat COMMIT) && ...
# (.deps/devprefix is found at ../devprefix: the scripts take CMAKE_PREFIX_PATH from $PWD/.deps).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:-HEAD}
rm -rf .deps/snapshot && mkdir -p .deps/snapshot
git archive "$commit" | tar -x -C .deps/snapshot
git rev-parse --short "$commit" > .deps/snapshot/COMMIT
mkdir -p .deps/snapshot/.deps && ln -s ../../devprefix .deps/snapshot/.deps/devprefix
du -sh .deps/snapshot | cut -f1
