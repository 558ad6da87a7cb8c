#!/usr/bin/env bash
# Miri on the lib's unit tests and the `all` test binary (not doctests: a
# binary each), four runs (docs/reliability.md, "Miri"):
#
#   sb      stacked borrows, strict provenance: every test
#   nostd   the same without `std`: the modules that need only `core`
#   tb      tree borrows: the tests that drive unsafe code ($TB_TESTS)
#   i686    a 32-bit target: what depends on the pointer width ($I686_TESTS)
#
# Miri interprets on one thread, so each run's tests are split into two
# halves (every other name of its sorted list) and the halves run as two
# processes, one per core. Builds come first, once per configuration; the
# runs then only interpret. Each job's log is under target/miri/, printed
# when all are done, with each job's seconds.
#
#   bash .ci/miri.sh [RUN...]        (no RUN: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

# The modules that drive unsafe code (the allocators, the context,
# checkpoints, threads, the property model, the debug checks); trace
# parsing, the baseline model and the input tables are safe code that the
# stacked-borrows run covers.
TB_TESTS="os:: footprint:: threads:: budget:: checkpoints:: fallback:: sessions:: plan:: frames:: fixed:: failure:: context:: malloc:: bump:: recording:: model:: stress:: debug_checks:: faults:: work::"
# The caching allocator and its threads (size classes, the per-window
# counters, the budget arithmetic, `util::HUGE` at `1 << 30`), and
# FixedAllocator and frames, whose users are 32-bit microcontrollers.
I686_TESTS="footprint:: threads:: budget:: checkpoints:: fallback:: stress:: fixed:: frames:: work::"

STRICT="-Zmiri-strict-provenance"

# args RUN: the cargo arguments of a run; filters RUN: its test filters.
args() {
    case $1 in
    sb | tb) echo "--lib --test all" ;;
    nostd) echo "--no-default-features --lib --test all" ;;
    i686) echo "--target i686-unknown-linux-gnu --test all" ;;
    esac
}
filters() {
    case $1 in
    tb) echo "$TB_TESTS" ;;
    i686) echo "$I686_TESTS" ;;
    *) echo "" ;;
    esac
}
flags() {
    case $1 in
    tb) echo "$STRICT -Zmiri-tree-borrows" ;;
    *) echo "$STRICT" ;;
    esac
}

if ! cargo +nightly miri --version >/dev/null 2>&1; then
    rustup component add --toolchain nightly miri rust-src
fi
# criterion's `alloca` compiles C for the i686 target: 32-bit headers.
if ! echo 'int main(void){return 0;}' | gcc -m32 -x c -o /dev/null - 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq gcc-multilib >/dev/null
fi
cargo +nightly miri setup >/dev/null
cargo +nightly miri setup --target i686-unknown-linux-gnu >/dev/null

runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(sb nostd tb i686)
out=target/miri-logs
rm -rf "$out" && mkdir -p "$out"

# Builds, and the sorted test names of each run, split in two.
start=$(date +%s)
for run in "${runs[@]}"; do
    # shellcheck disable=SC2046 # lists of arguments
    cargo +nightly miri test $(args "$run") --no-run 2>&1 | tail -n 3
    # shellcheck disable=SC2046
    cargo +nightly miri test $(args "$run") -q -- --list --format terse $(filters "$run") 2>/dev/null |
        sed -n 's/: test$//p' | sort -u >"$out/$run.list"
    awk 'NR % 2 == 1' "$out/$run.list" >"$out/$run-1.names"
    awk 'NR % 2 == 0' "$out/$run.list" >"$out/$run-2.names"
    echo "miri: $run: $(wc -l <"$out/$run.list") tests"
    [ -s "$out/$run.list" ] || { echo "miri: $run lists no test" >&2; exit 1; }
done
echo "miri: builds and lists: $(($(date +%s) - start)) s"

# job NAME: one half of a run, by exact names; its seconds into NAME.secs.
job() {
    local name=$1 run=${1%-*} t0 rc=0
    t0=$(date +%s)
    # shellcheck disable=SC2046 # lists of arguments and names
    MIRIFLAGS=$(flags "$run") cargo +nightly miri test $(args "$run") -- --exact $(cat "$out/$name.names") \
        >"$out/$name.log" 2>&1 || rc=$?
    echo "$(($(date +%s) - t0)) $rc" >"$out/$name.secs"
    return $rc
}

# Two lanes, one per core: the first halves in one, the second in the other.
lane() {
    local half=$1 run rc=0
    for run in "${runs[@]}"; do
        [ -s "$out/$run-$half.names" ] || continue
        job "$run-$half" || rc=1
    done
    return $rc
}
start=$(date +%s)
lane 1 &
one=$!
lane 2 &
two=$!
rc=0
wait $one || rc=1
wait $two || rc=1

for run in "${runs[@]}"; do
    for half in 1 2; do
        name=$run-$half
        [ -f "$out/$name.log" ] || continue
        echo "---- miri $name ($(flags "$run"); $(args "$run"))"
        grep -vE '^test .* \.\.\. ok$' "$out/$name.log" || true
        grep -qE '^test result: ok\. [1-9]' "$out/$name.log" || { echo "miri: $name ran no test or failed" >&2; rc=1; }
    done
done
echo "== miri: seconds per job (lanes ran $(($(date +%s) - start)) s)"
for run in "${runs[@]}"; do
    for half in 1 2; do
        [ -f "$out/$run-$half.secs" ] && printf '%-8s %6s s  exit %s\n' "$run-$half" $(cat "$out/$run-$half.secs")
    done
done
exit $rc
