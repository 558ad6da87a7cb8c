#!/usr/bin/env bash
# Builds and runs the ExecuTorch runner (examples/executorch/runner.cpp):
# ExecuTorch programs executed by the released executorch 1.5.1 runtime and
# kernels, with tempalloc (through include/tempalloc.hpp), ExecuTorch's
# MallocMemoryAllocator and its released CPUCachingAllocator as the temp
# allocator, each in a child process of its own. Run from anywhere:
#
#   bash examples/executorch/build.sh [RUNNER OPTIONS]   (e.g. --repeat 200, --per-call)
#
# Downloads the executorch wheel from PyPI once (pip, cached under
# target/executorch/), writes the .pte files from the JSON programs with the
# wheel's flatc, builds the runner with CMake (examples/executorch/
# CMakeLists.txt: the crate's C library through examples/cmake/
# tempalloc.cmake, the wheel's package config, the stand-in libraries) and
# runs it on every program. Fails on a non-zero exit, or on any line the
# libraries log to stderr with "error" in it (they log errors and carry
# on). Linux x86-64 only (the wheel's platform). Needs python3 with pip,
# unzip, cmake, make, g++, gcc, nm.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/examples/executorch
w=$root/target/executorch
version=1.5.1  # pinned: the constant-segment and argument-count rules are this emitter's
et=$w/x/executorch
cd "$root"

if [ "$(uname -sm)" != "Linux x86_64" ]; then
  echo "examples/executorch: the executorch $version wheel is for Linux x86-64, not $(uname -sm)" >&2
  exit 1
fi

# 1. The wheel, once. --python-version: the wheel is cp311 whatever python runs pip.
# Unpacked again when a part is missing (share/cmake came later: caches
# from before it lack it).
parts=('executorch/lib/*' 'executorch/include/*' 'executorch/share/cmake/*' 'executorch/data/bin/flatc'
  'executorch/schema/*' 'executorch/extension/llm/runner/*')
if [ ! -f "$w/x/.unpacked-$version" ] || [ ! -f "$et/share/cmake/executorch-config.cmake" ]; then
  mkdir -p "$w"
  if ! compgen -G "$w/executorch-$version-*.whl" >/dev/null; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 -d "$w" "executorch==$version"
  fi
  rm -rf "$w/x" && mkdir -p "$w/x"
  unzip -q -o "$w/executorch-$version-"*.whl -d "$w/x" "${parts[@]}"
  touch "$w/x/.unpacked-$version"
fi
so=$(ls "$et"/extension/llm/runner/_llm_runner*.so)

# 2. The programs: JSON (checked in) -> .pte, and each one's op per kernel call.
python3 "$here/gen_programs.py" --check
mkdir -p "$w/pte"
for json in "$here"/programs/*.json; do
  "$et/data/bin/flatc" --binary -o "$w/pte" "$et/schema/program.fbs" "$json"
  python3 - "$json" > "$w/pte/$(basename "$json" .json).ops" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))["execution_plan"][0]
ops = plan["operators"]
for i in plan["chains"][0]["instructions"]:
    op = ops[i["instr_args"]["op_index"]]
    print(op["name"] + "." + op["overload"])
EOF
done

# 3. The runner, the crate's C library and the stand-ins, with CMake. The
# C library is `release`, in the crate's own target dir: the build the
# tables in docs/benchmarks.md measured, shared with cargo run by hand
# (tempalloc.cmake's default, release-capi in the build tree, would build
# the crate again with LTO).
build=$w/build
cmake -S "$here" -B "$build" -DEXECUTORCH_ROOT="$et" -DET_LLM_RUNNER_SO="$so" \
  -DTEMPALLOC_PROFILE=release -DTEMPALLOC_TARGET_DIR="$root/target" >/dev/null
CARGO_TERM_QUIET=true cmake --build "$build" >/dev/null
stubs=$build/stubs

# 4. Run. The libraries log to stderr and carry on: any "error" fails.
log=$w/stderr.log
status=0
programs=("$w"/pte/*.pte)
for a in "$@"; do case $a in *.pte) programs=();; esac; done
"$build/et_runner" --et-so "$so" --et-stubs "$stubs" "$@" "${programs[@]}" 2> >(tee "$log" >&2) || status=$?
wait
if [ $status -ne 0 ]; then
  echo "examples/executorch: et_runner exited with $status" >&2
  exit 1
fi
if grep -qi error "$log"; then
  echo "examples/executorch: the libraries logged errors (above)" >&2
  exit 1
fi
