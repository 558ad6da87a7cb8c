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
# wheel's flatc, builds the crate's C library (staticlib, feature capi),
# compiles the runner and runs it on every program. Fails on a non-zero
# exit, or on any line the libraries log to stderr with "error" in it (they
# log errors and carry on). Linux x86-64 only (the wheel's platform).
# Needs python3 with pip, unzip, g++, gcc, nm.
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
if [ ! -f "$w/x/.unpacked-$version" ]; then
  mkdir -p "$w"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$w" "executorch==$version"
  rm -rf "$w/x" && mkdir -p "$w/x"
  unzip -q -o "$w/executorch-$version-"*.whl -d "$w/x" 'executorch/lib/*' 'executorch/include/*' \
    'executorch/data/bin/flatc' 'executorch/schema/*' 'executorch/extension/llm/runner/*'
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

# 3. Stand-ins for the libraries the extension holding CPUCachingAllocator
# links but never calls on this path (PyTorch, Python): empty, under their
# sonames, with the data symbols it binds at load (no libpython needed).
stubs=$w/stubs
if [ ! -f "$stubs/.built" ] || [ "$so" -nt "$stubs/.built" ]; then
  mkdir -p "$stubs"
  {
    nm -D --undefined-only "$so" | awk '{print $NF}' | grep -E '^_?Py' | sed 's/.*/char &[64] __attribute__((aligned(64)));/'
    echo 'char _ZN3c1019UndefinedTensorImpl10_singletonE[4096] __attribute__((aligned(64)));'
  } > "$stubs/data.c"
  gcc -shared -fPIC -o "$stubs/_C.cpython-311-x86_64-linux-gnu.so" "$stubs/data.c" \
    -Wl,-soname,_C.cpython-311-x86_64-linux-gnu.so
  : > "$stubs/empty.c"
  for n in libc10.so libtorch.so libtorch_cpu.so libtorch_python.so; do
    gcc -shared -fPIC -o "$stubs/$n" "$stubs/empty.c" -Wl,-soname,$n
  done
  touch "$stubs/.built"
fi

# 4. The crate's C library, then the runner.
cargo rustc --quiet --release --lib --features capi --crate-type staticlib
g++ -O2 -std=c++17 -Wall -Wextra -o "$w/et_runner" \
  "$here/runner.cpp" "$here/hooks.cpp" \
  -DC10_USING_CUSTOM_GENERATED_MACROS -DET_EVENT_TRACER_ENABLED -DET_USE_THREADPOOL \
  -I"$root/include" -I"$et/include" -I"$et/include/executorch/runtime/core/portable_type/c10" \
  -L"$et/lib" -Wl,-rpath,"$et/lib" -rdynamic \
  -lexecutorch -Wl,--no-as-needed -lexecutorch_kernels_optimized -Wl,--as-needed \
  "$root/target/release/libtempalloc.a" -lpthread -ldl -lm

# 5. Run. The libraries log to stderr and carry on: any "error" fails.
log=$w/stderr.log
status=0
programs=("$w"/pte/*.pte)
for a in "$@"; do case $a in *.pte) programs=();; esac; done
"$w/et_runner" --et-so "$so" --et-stubs "$stubs" "$@" "${programs[@]}" 2> >(tee "$log" >&2) || status=$?
wait
if [ $status -ne 0 ]; then
  echo "examples/executorch: et_runner exited with $status" >&2
  exit 1
fi
if grep -qi error "$log"; then
  echo "examples/executorch: the libraries logged errors (above)" >&2
  exit 1
fi
