#!/usr/bin/env bash
# CI: ExecuTorch programs executed by the released executorch 1.5.1 runtime
# with tempalloc as the temp allocator, against ExecuTorch's own two
# (examples/executorch/build.sh, which builds the runner with CMake:
# examples/executorch/CMakeLists.txt). Installs what is missing; the wheel is
# downloaded once and cached under target/executorch/. Fails when the runner
# fails: a child's non-zero exit, outputs that differ between allocators, an
# error logged by the libraries, or a system allocation by tempalloc after
# the first execute.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v make >/dev/null || missing+=(make)
command -v g++ >/dev/null || missing+=(g++)
command -v unzip >/dev/null || missing+=(unzip)
command -v nm >/dev/null || missing+=(binutils)
command -v python3 >/dev/null || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Few executes and one round: CI checks, docs/benchmarks.md measures.
bash examples/executorch/build.sh --repeat 10 --rounds 1 --per-call
