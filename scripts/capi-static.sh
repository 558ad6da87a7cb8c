#!/usr/bin/env bash
# et-compare's harness with tempalloc linked the way a runtime ships it: the
# static library of the `release-capi` profile (docs/capi.md, "Building the
# library") linked into the harness, so a request is a direct call and the
# thread-local read a plain load; `bash ../shared/bench/et-compare.sh` loads
# the `release` cdylib with dlopen and calls it through function pointers,
# which costs a `__tls_get_addr` call per request. Run from the project root:
#
#   bash scripts/capi-static.sh [TRACE...]     (default: ../shared/traces/*.trace)
#
# Builds a copy of ../shared/bench/et_replay.cpp whose tempalloc calls are
# the static library's symbols (the rest of the harness unchanged) and runs
# it like et-compare.sh, `ROUNDS` times (default 5) per trace, each time
# beside et-compare.sh's own harness and `release` cdylib (the baseline),
# printing each run and then the medians of tempalloc's (both ways) and
# ExecuTorch's ns per request over the bump floor's. Needs et-compare.sh to have run once (it fetches
# the ExecuTorch wheel and makes its stand-in libraries under
# target/et-compare). `INSTRUCTIONS=1` counts instructions per request over
# the floor, both ways, with callgrind instead of timing.
set -euo pipefail
here=../shared/bench
w=${ET_DIR:-$PWD/target/et-compare}
target=${CARGO_TARGET_DIR:-$PWD/target}
so=$(ls "$w"/x/executorch/extension/llm/runner/_llm_runner*.so 2>/dev/null | head -1 || true)
if [ -z "$so" ] || [ ! -f "$w/stubs/libc10.so" ]; then
  echo "capi-static.sh: run bash ../shared/bench/et-compare.sh once first (it fetches ExecuTorch)" >&2
  exit 2
fi
# `relocation-model=pie`: code for an executable, so the thread-local
# look-up is a plain load from the thread pointer (no `__tls_get_addr`
# call, whose clobbers cost the fast path a frame; docs/capi.md).
cargo rustc --quiet --profile release-capi --lib --features capi --crate-type staticlib \
  -- -C relocation-model=pie
# The baseline in the same run: what et-compare.sh loads.
cargo rustc --quiet --release --lib --features capi --crate-type cdylib
# The harness's dlopen of TEMPALLOC_SO and its four dlsym look-ups become
# the linked symbols; nothing else in it changes.
sed -e 's|void\* th = dlopen(tso, RTLD_NOW \| RTLD_LOCAL);|void* th = (void*)tso;|' \
    -e 's|dlsym(th, "\(tempalloc_[a-z_]*\)")|\&\1|' \
    -e 's|^#include <dlfcn.h>|&\
extern "C" { void* tempalloc_allocator_create(const void*, int*); void* tempalloc_allocate(const void*, size_t, size_t, int*); int tempalloc_reset(void*); void tempalloc_allocator_destroy(void*); }|' \
    "$here/et_replay.cpp" > "$w/et_replay_static.cpp"
n=$(grep -c '&tempalloc_' "$w/et_replay_static.cpp")
[ "$n" = 4 ] || { echo "capi-static.sh: the harness changed ($n of 4 look-ups replaced)" >&2; exit 2; }
g++ -O2 -std=c++17 -o "$w/et_replay_static" "$w/et_replay_static.cpp" \
  "$target/release-capi/libtempalloc.a" -ldl -lpthread
pylib=$(python3 -c "import sysconfig;print(sysconfig.get_config_var('LIBDIR'))")
run() {
  TEMPALLOC_SO=${TEMPALLOC_SO:-static} LD_LIBRARY_PATH="$w/stubs:$pylib" LD_PRELOAD="$pylib/libpython3.11.so" \
    "$@" 2>&1 | grep -v Registering
}
[ $# -gt 0 ] || set -- "$here"/../traces/*.trace
count() { # HARNESS TRACE: tempalloc's instructions per request over the floor's
  rm -rf "$w/cg" && mkdir -p "$w/cg"
  run valgrind -q --tool=callgrind --trace-children=yes --callgrind-out-file="$w/cg/%p" \
    "$1" "$so" "$2" 1 10485760 > /dev/null
  # The parent first, then its children in fork order: et_caching,
  # tempalloc, malloc_free, bump_arena. Each pass (the warm-up and one
  # timed) makes the trace's requests.
  mapfile -t totals < <(ls "$w/cg" | sort -n | while read -r f; do
    grep -m1 '^totals:' "$w/cg/$f" | cut -d' ' -f2; done)
  awk -v n="$(grep -c '^a' "$2")" -v ta="${totals[2]}" -v bump="${totals[4]}" \
    'BEGIN { printf "%.1f", (ta - bump) / (2 * n) }'
}
dl=$target/release/libtempalloc.so
if [ "${INSTRUCTIONS:-0}" = 1 ]; then
  for t in "$@"; do
    s=$(count "$w/et_replay_static" "$t")
    d=$(TEMPALLOC_SO=$dl count "$w/et_replay" "$t")
    printf '%-8s instructions per request over the bump floor: static %s, dlopen (et-compare.sh) %s\n' \
      "$(basename "$t" .trace)" "$s" "$d"
  done
  exit 0
fi
for t in "$@"; do
  for r in $(seq "${ROUNDS:-5}"); do
    echo "round $r static"; run "$w/et_replay_static" "$so" "$t" "${ET_REPEAT:-5}" 10485760
    echo "round $r dlopen"; TEMPALLOC_SO=$dl run "$w/et_replay" "$so" "$t" "${ET_REPEAT:-5}" 10485760
  done > "$w/runs.txt"
  cat "$w/runs.txt"
  awk -v t="$(basename "$t" .trace)" '
    function median(a, k,   i, j, x) {
      for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    $1 == "round" { how = $3; next }
    /ns\/alloc=/ { v = $0; sub(/.*ns\/alloc= */, "", v); ns[$1] = v + 0 }
    $1 == "bump_arena" {
      k[how]++; ta[how, k[how]] = ns["tempalloc"] / ns["bump_arena"]
      if (how == "static") et[k[how]] = ns["et_caching"] / ns["bump_arena"]
    }
    END {
      for (i = 1; i <= k["static"]; i++) { s[i] = ta["static", i]; d[i] = ta["dlopen", i] }
      printf "%-8s medians of %d interleaved runs over the bump floor: tempalloc static %.2fx, dlopen %.2fx; ExecuTorch %.2fx\n",
        t, k["static"], median(s, k["static"]), median(d, k["dlopen"]), median(et, k["static"])
    }' "$w/runs.txt"
done
