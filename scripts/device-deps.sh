#!/usr/bin/env bash
# Builds .deps/devprefix: the build dependencies the GPU machine's image lacks (GoogleTest and
# GoogleMock, CLI11, nlohmann-json), copied from this machine's Debian packages into one CMake
# prefix. The GPU machine has no network, so every device call names .deps/devprefix in `carry`
# and the device scripts pass it as CMAKE_PREFIX_PATH. Run scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=.deps/devprefix
rm -rf "$prefix"
mkdir -p "$prefix/include" "$prefix/lib/x86_64-linux-gnu/cmake" "$prefix/share/cmake"
cp -r /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann "$prefix/include/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$prefix/lib/x86_64-linux-gnu/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$prefix/lib/x86_64-linux-gnu/cmake/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$prefix/share/cmake/"
echo "$prefix: $(du -sh "$prefix" | cut -f1) (carry it with every device call)"
