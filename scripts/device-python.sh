#!/usr/bin/env bash
# Device-side Python checks (run on the lent GPU machine, which has no network): build and
# install the attnkit package with its CUDA backend from this checkout, then run every Python
# test there (the CPU ones, the torch ones and the `gpu` ones). Writes logs to $OUT (or
# /tmp/attnkit-python) and prints a short summary last. Exit status: pytest's (or the build's).
#
# Needs on the machine: nvcc, CMake, ninja and python3 with nanobind, scikit-build-core, numpy,
# pytest, torch and transformers (all on the device image). CMake packages that are not there
# (nlohmann-json, CLI11) are found through CMAKE_PREFIX_PATH, which this script extends with a
# carried .deps/ (and .deps/usr/) when present; extra CMake definitions can be given in CMAKE_ARGS
# (scikit-build-core reads it), e.g. CMAKE_ARGS="-DATTNKIT_CUDA_ARCHS=90a".
#   scripts/device-python.sh [--wheel DIR]
# --wheel DIR: install the wheel in DIR instead of building (built on the host for the device's
#   Python, e.g. pyenv's 3.12: `python3.12 -m pip wheel . --no-deps --no-build-isolation -w DIR`
#   with nvcc present and CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$PWD/.deps/devprefix"; carry DIR).
set -uo pipefail
cd "$(dirname "$0")/.."

out_dir=${OUT:-/tmp/attnkit-python}
mkdir -p "$out_dir"
python=${PYTHON:-python3}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
for prefix in "$PWD/.deps/usr" "$PWD/.deps"; do
  [[ -d $prefix ]] && export CMAKE_PREFIX_PATH="$prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
done

wheel_dir=""
[[ ${1:-} == --wheel ]] && wheel_dir=$2
started=$(date +%s)
if [[ -n $wheel_dir ]]; then
  echo "== attnkit python: installing the prebuilt wheel from $wheel_dir"
  install=("$python" -m pip install --no-deps --no-index --force-reinstall "$wheel_dir"/attnkit-*.whl)
else
  echo "== attnkit python: building the package (CUDA when nvcc is present), log: $out_dir/python-build.log"
  install=("$python" -m pip install . --no-build-isolation --no-deps --no-index -v -Cbuild-dir=build/python-device)
fi
if ! "${install[@]}" >"$out_dir/python-build.log" 2>&1; then
  tail -n 60 "$out_dir/python-build.log"
  echo "attnkit python: BUILD FAILED"
  exit 1
fi
built=$(date +%s)
grep -E "attnkit: CUDA backend" "$out_dir/python-build.log" | tail -n 1

# From outside the checkout, so `import attnkit` is the installed package.
(cd /tmp && "$python" - <<'PY') 2>&1 | tee "$out_dir/python-env.txt"
import attnkit, numpy, torch
try:
    import transformers
    tv = transformers.__version__
except ImportError:
    tv = "missing"
print(f"attnkit {attnkit.__version__} from {attnkit.__file__}: cuda_built={attnkit.cuda_built()} "
      f"devices={attnkit.cuda_device_count()}; torch {torch.__version__} (cuda {torch.cuda.is_available()}), "
      f"transformers {tv}, numpy {numpy.__version__}")
PY

echo "== attnkit python: pytest (cpu, torch and gpu marks)"
"$python" -m pytest python/tests -q -rs -p no:cacheprovider --durations=8 \
  --junitxml="$out_dir/python-tests.xml" 2>&1 | tee "$out_dir/python-tests.log"
status=${PIPESTATUS[0]}
finished=$(date +%s)
echo "== attnkit python: build $((built - started)) s, tests $((finished - built)) s, pytest exit $status"
tail -n 1 "$out_dir/python-tests.log"
exit "$status"
