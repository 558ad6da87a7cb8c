#!/usr/bin/env bash
# Miri on the lib's unit tests and the `all` test binary (not doctests: a
# binary each), four runs (docs/reliability.md, "Miri"):
#
#   sb      stacked borrows, strict provenance: every test
#   nostd   the same without `std`: the modules that need only `core`
#   tb      tree borrows: the tests that drive unsafe code ($TB_TESTS)
#   i686    a 32-bit target: what depends on the pointer width ($I686_TESTS)
#
# Miri interprets on one thread, so the tests run in two lanes, one per
# core, balanced by each test's time in a recorded run (.ci/miri-times);
# each lane runs one process per run. Builds come first, once per
# configuration; the lanes then only interpret. Each job's log is under
# target/miri-logs/, printed when all are done, with each job's seconds, the
# slowest tests, and this run's times (to refresh .ci/miri-times when the
# tests have changed much: `cp target/miri-logs/times .ci/miri-times`).
#
#   bash .ci/miri.sh [RUN...]        (no RUN: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

# The modules that drive unsafe code (the allocators, the context,
# checkpoints, threads, the property model, the debug checks); trace
# parsing, the baseline model and the input tables are safe code that the
# stacked-borrows run covers.
TB_TESTS="os:: failure:: memory::footprint:: memory::threads:: memory::budget:: frames::checkpoints:: failures::fallback:: memory::sessions:: traces::plan:: frames::scopes:: allocators::fixed:: frames::context:: allocators::malloc:: allocators::bump:: traces::recording:: memory::model:: memory::stress:: failures::debug_checks:: failures::faults:: memory::work::"
# What depends on the pointer width: the caching allocator's size classes,
# per-window counters and budget arithmetic (`util::HUGE` at `1 << 30`),
# sizes that overflow a 32-bit usize, and FixedAllocator and frames, whose
# users are 32-bit microcontrollers.
I686_TESTS="memory::footprint:: memory::threads:: memory::budget:: frames::checkpoints:: failures::bad_input:: failures::fallback:: memory::stress:: allocators::fixed:: frames::scopes:: memory::work::"

STRICT="-Zmiri-strict-provenance"
# Each test's seconds under Miri in a recorded run (`RUN SECONDS NAME`), to
# balance the lanes; a run writes its own to target/miri-logs/times.
TIMES=.ci/miri-times

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
    echo "miri: $run: $(wc -l <"$out/$run.list") tests"
    [ -s "$out/$run.list" ] || { echo "miri: $run lists no test" >&2; exit 1; }
done
echo "miri: builds and lists: $(($(date +%s) - start)) s"

# The two lanes, balanced by time: every test of every run, longest first,
# goes to the lane with less time so far, by the seconds each took in a
# recorded run ($TIMES; a test not in it counts 5 s). Each lane then runs
# one process per run, with the names it was given.
lists=()
for run in "${runs[@]}"; do lists+=("$out/$run.list"); done
[ -f "$TIMES" ] || TIMES=/dev/null
awk '
    FILENAME == ARGV[1] { secs[$1 " " $3] = $2; next }
    { split(FILENAME, p, "/"); run = p[length(p)]; sub(/\.list$/, "", run)
      t = ((run " " $0) in secs) ? secs[run " " $0] : 5
      print t, run, $0 }' "$TIMES" "${lists[@]}" |
    sort -k1,1nr -k2,3 | awk -v out="$out" '
    { lane = (load[1] <= load[2]) ? 1 : 2; load[lane] += $1
      print $3 >> (out "/" $2 "-" lane ".names") }
    END { printf "miri: lanes balanced to %.0f s and %.0f s of recorded time\n", load[1], load[2] }'

# job NAME (RUN-LANE): a lane's share of a run, by exact names; its seconds
# into NAME.secs.
job() {
    local name=$1 run=${1%-*} t0 rc=0
    t0=$(date +%s)
    # shellcheck disable=SC2046 # lists of arguments and names
    MIRIFLAGS=$(flags "$run") cargo +nightly miri test $(args "$run") -- -Zunstable-options --report-time --exact $(cat "$out/$name.names") \
        >"$out/$name.log" 2>&1 || rc=$?
    echo "$(($(date +%s) - t0)) $rc" >"$out/$name.secs"
    return $rc
}

# Two lanes, one per core, each running its share of every run in turn.
lane() {
    local which=$1 run rc=0
    for run in "${runs[@]}"; do
        [ -s "$out/$run-$which.names" ] || continue
        job "$run-$which" || rc=1
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
        grep -vE '^test .* \.\.\. ok( <[0-9.]+s>)?$' "$out/$name.log" || true
        grep -qE '^test result: ok\. [1-9]' "$out/$name.log" || { echo "miri: $name ran no test or failed" >&2; rc=1; }
    done
done
# This run's times, for $TIMES when the tests have changed much, and the
# slowest tests, where scaling a count down under cfg(miri) pays most.
# Miri's clock counts interpreted work, and a unit of it takes longer under
# tree borrows than under stacked borrows: each run's times are scaled so
# that they add up to its jobs' wall seconds.
for run in "${runs[@]}"; do
    wall=$(cat "$out/$run"-[12].secs 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
    cat "$out/$run"-[12].log 2>/dev/null |
        sed -n "s/^test \(.*\) \.\.\. ok <\([0-9.]*\)s>$/\2 \1/p" |
        awk -v run="$run" -v wall="$wall" '{ t[NR] = $1; n[NR] = $2; sum += $1 }
            END { for (i = 1; i <= NR; i++) printf "%s %.2f %s\n", run, sum ? t[i] * wall / sum : 0, n[i] }'
done | sort -k1,1 -k3 >"$out/times"
echo "== miri: the ten slowest tests, wall seconds (all: $out/times)"
# `sed`, not `head`: `head` leaves before `sort` has written everything,
# and `sort`'s next write then dies of SIGPIPE, which `pipefail` makes this
# script's exit (141) whenever the timing falls that way.
sort -k2,2nr "$out/times" | sed -n '1,10p'
echo "== miri: seconds per job (lanes ran $(($(date +%s) - start)) s)"
for run in "${runs[@]}"; do
    for half in 1 2; do
        [ -f "$out/$run-$half.secs" ] && printf '%-8s %6s s  exit %s\n' "$run-$half" $(cat "$out/$run-$half.secs")
    done
done
exit $rc
