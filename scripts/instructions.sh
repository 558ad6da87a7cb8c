#!/usr/bin/env bash
# Instructions per scratch request (requests, first/last byte touches and
# resets included) for every allocator on every reference workload, counted
# by callgrind inside `Trace::run` only. Counts, not times: the same binary
# gives the same numbers on a busy machine.
#
#   bash scripts/instructions.sh            # needs valgrind
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --features cli --bin tempalloc-replay --quiet
bin=target/release/tempalloc-replay
runs=4 # one warm-up pass and --repeat 3 timed passes, all inside Trace::run
printf '%-8s %-18s %14s %10s\n' trace allocator instructions per-request
for trace in steady decode mixed; do
    requests=$("$bin" "$trace" --allocators malloc --repeat 1 | sed -n 's/^[a-z]*: \([0-9]*\) requests.*/\1/p')
    for allocator in caching bumpalo exact-size-cache malloc; do
        ir=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            --toggle-collect='tempalloc::trace::replay::<impl tempalloc::trace::Trace>::run' \
            "$bin" "$trace" --allocators "$allocator" --repeat 3 2>&1 |
            sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
        printf '%-8s %-18s %14s %10.1f\n' "$trace" "$allocator" "$ir" "$(echo "$ir / ($requests * $runs)" | bc -l)"
    done
done

# The hot path alone: a request through `KernelContext::allocate_temp` on a
# warm `CachingAllocator` (and on a `FixedAllocator`) against
# `bumpalo::Bump::alloc_layout`, a request plus a reset, and the reset alone,
# per request. Targets: within 1.1x of bumpalo (caching), at most
# 40 (fixed), 60 (a request and a reset) and 32 (the reset).
cargo build --release --example hot_path_instructions --quiet
bin=target/release/examples/hot_path_instructions
n=$("$bin" | sed -n 's/^\([0-9]*\) requests.*/\1/p')
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="hot_path_instructions::$1" \
        "$bin" "${@:2}" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# The reset alone: the harness's out-of-line `reset`, called once per
# request, slow path included when it is taken.
reset_alone=$(count reset)
ctx=$(count through_kernel_context)
bump=$(count through_bumpalo)
fixed=$(count through_kernel_context fixed)
reset=$(count resets)
printf '\n%-42s %8s\n' "hot path (instructions per request)" ""
printf '%-42s %8.1f\n' "KernelContext::allocate_temp (caching)" "$(echo "$ctx / $n / 3" | bc -l)"
printf '%-42s %8.1f\n' "bumpalo::Bump::alloc_layout" "$(echo "$bump / $n / 3" | bc -l)"
printf '%-42s %8.2fx   (target <= 1.10x)\n' "ratio" "$(echo "$ctx / $bump" | bc -l)"
printf '%-42s %8.1f   (target <= 40)\n' "KernelContext::allocate_temp (fixed, Sync)" "$(echo "$fixed / $n / 3" | bc -l)"
printf '%-42s %8.2fx\n' "ratio (fixed / bumpalo)" "$(echo "$fixed / $bump" | bc -l)"
printf '%-42s %8.1f   (target <= 60)\n' "a request and a reset (caching)" "$(echo "$reset / $n" | bc -l)"
printf '%-42s %8.2fx\n' "ratio (request and reset / bumpalo)" "$(echo "$reset * 3 / $bump" | bc -l)"
printf '%-42s %8.1f   (target <= 32)\n' "the reset alone (caching, one region)" "$(echo "$reset_alone / $n" | bc -l)"
