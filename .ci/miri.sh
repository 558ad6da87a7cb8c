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
# core, balanced by each test's wall time in a recorded run (.ci/miri-times);
# each lane runs one process per run and test binary it has tests of.
# Builds come first, once per configuration (each run's tests are listed
# while the next one builds); the lanes then only interpret. Each job's log is under
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
# stacked-borrows run covers. Of traces::plan::, the two tests that run an
# allocator: the others only compute `Trace::plan`, safe code (neither
# src/trace/plan.rs nor src/caching/plan.rs has `unsafe`).
TB_TESTS="os:: failure:: memory::footprint:: memory::threads:: memory::budget:: frames::checkpoints:: failures::fallback:: memory::sessions:: traces::plan::a_region_committed_to_the_plan_never_grows traces::plan::a_prewarmed_allocator_takes_no_memory_in_its_first_inference frames::scopes:: allocators::fixed:: frames::context:: allocators::malloc:: allocators::bump:: traces::recording:: memory::model:: memory::stress:: failures::debug_checks:: failures::faults:: memory::work::"
# Of those, the heavy tests that reach no line of src/ that the lighter tests
# kept here do not also reach, with the same shape of work, are left to
# stacked borrows, which runs every test (a line coverage of each tree-borrows
# test under `--cfg miri`, docs/reliability.md, "CI-time cuts": the lines
# the run reaches are the same 2 879 with or without them). Each, and a kept
# test of its shape that reaches what it does:
# - memory::sessions::the_counts_match_the_cache_after_random_windows:
#   random windows on a shared cache, as ...shared_cache_counts_balance_under_faults;
# - memory::work::an_inference_on_whichever_thread_is_held_once, frames on
#   a thread after another's: ...fallback::heap_blocks_in_frames_converge_with_fresh_threads_per_kernel;
# - the checkpoint tests with fresh threads per kernel and 17 nested
#   checkpoints: the same, and ...checkpoints::debug_checks_see_no_false_canary_damage_after_out_of_order_rewinds;
# - memory::budget:: (served while held plus need fits, free regions make
#   room for a thread that outgrew, a probe that cannot fit, a limit
#   covering each thread's window): ...a_refused_request_leaves_an_empty_region_usable,
#   ...a_region_that_outgrew_its_reservation_takes_the_room_of_free_regions,
#   ...a_leased_regions_memory_never_makes_room, traces::plan::a_prewarmed_...;
# - the random model programs: memory::model::a_fixed_program_agrees_with_the_model;
# - the retain cap: memory::budget::the_retain_cap_gives_back_only_what_is_above_it;
# - memory::threads:: (workers that exit early, stats read while threads
#   allocate, unequal shares): ...a_thread_that_exits_mid_window_keeps_its_region_until_the_reset,
#   memory::footprint::held_follows_the_most_each_thread_used_from_the_first_window;
# - two of memory::stress:: (threads sharing one allocator, workers sharing
#   one Sync context): its twenty fresh threads a round stays, as do
#   frames::context::a_context_is_shared_by_worker_threads and
#   memory::threads::threads_sharing_one_context_write_and_verify_their_own_scratch;
# - a threaded kernel through context and frames: frames::scopes::a_kernel_calls_another_kernel_with_its_context,
#   frames::checkpoints::scratch_a_worker_took_before_a_checkpoint_outlives_the_rewind;
# - memory::footprint::trim_gives_pages_back_and_the_next_window_takes_them_again
#   (two 2 MiB blocks: 30 to 52 s of wall time under tree borrows on a
#   loaded machine, 5 s of Miri's clock): ...after_trim_held_follows_what_later_windows_use.
TB_SKIP="memory::sessions::the_counts_match_the_cache_after_random_windows
memory::work::an_inference_on_whichever_thread_is_held_once
memory::budget::a_request_is_served_while_held_plus_need_fits_the_limit
frames::checkpoints::frames_with_fresh_threads_per_kernel_take_no_memory_after_warm_up
memory::budget::free_regions_make_room_for_a_thread_that_outgrew_its_own
memory::model::caching_allocators_agree_with_the_model
memory::footprint::the_retain_cap_gives_back_the_excess_at_each_reset_largest_regions_first
frames::checkpoints::the_per_kernel_pattern_with_fresh_threads_per_kernel_takes_no_memory_after_warm_up
memory::threads::workers_that_exit_early_keep_their_scratch_until_the_rewind
memory::stress::threads_share_one_caching_allocator
memory::stress::worker_threads_share_one_sync_kernel_context
frames::scopes::a_threaded_kernel_runs_through_with_context_and_frames
memory::budget::a_probe_that_cannot_fit_strips_nothing
memory::budget::a_limit_covering_each_threads_window_serves_large_windows
frames::checkpoints::checkpoints_nest_deeper_than_the_records_made_room_for
memory::threads::stats_read_while_fresh_and_persistent_threads_allocate_count_every_request
memory::threads::fresh_threads_with_unequal_shares_hold_at_most_the_largest_share_each
memory::footprint::trim_gives_pages_back_and_the_next_window_takes_them_again"
# What depends on the pointer width: the caching allocator's size classes,
# per-window counters and budget arithmetic (`util::HUGE` at `1 << 30`),
# sizes that overflow a 32-bit usize, and FixedAllocator and frames, whose
# users are 32-bit microcontrollers. Left to the 64-bit runs, as they add
# nothing at 32 bits (docs/reliability.md, "Miri"):
# - memory::threads:: and memory::stress::, threads leasing regions: the
#   lease word is an AtomicU64 at any width, and the requests, sizes and
#   layouts they run at 32 bits are those of the caching tests kept here,
#   several of them with threads (fresh threads per kernel, a worker after
#   the thread that outgrew, threads outgrowing under a limit, work::);
# - the bad_input rows whose input is the same at every width: alignments
#   zero and three, zero-byte requests at alignments up to 1 MiB, stale
#   checkpoints, no allocator. The rows kept are those with a number that
#   is `usize::MAX`, `isize::MAX`, `1 << (usize::BITS - 1)` or `util::HUGE`.
I686_TESTS="memory::footprint:: memory::budget:: frames::checkpoints:: failures::bad_input::alignment_above_the_largest_supported failures::bad_input::alignment_not_a_power_of_two failures::bad_input::zero_bytes_at_a_huge_alignment failures::bad_input::size_ failures::bad_input::typed_scratch_length_overflows failures::bad_input::vec_in_capacity_overflow failures::bad_input::request_above_ failures::bad_input::zero_length_typed_scratch failures::fallback:: allocators::fixed:: frames::scopes:: memory::work::"

STRICT="-Zmiri-strict-provenance"
# Each test's seconds under Miri in a recorded run (`RUN SECONDS NAME`), to
# balance the lanes; a run writes its own to target/miri-logs/times.
TIMES=.ci/miri-times

# args RUN: the cargo arguments of a run, without the test binaries;
# targets RUN: its test binaries (`lib`, the unit tests, and `all`);
# filters RUN: its test filters.
args() {
    case $1 in
    sb | tb) echo "" ;;
    nostd) echo "--no-default-features" ;;
    i686) echo "--target i686-unknown-linux-gnu" ;;
    esac
}
targets() {
    case $1 in
    i686) echo "all" ;;
    *) echo "lib all" ;;
    esac
}
# target TARGET: cargo's argument for one test binary.
target() {
    case $1 in
    lib) echo "--lib" ;;
    *) echo "--test $1" ;;
    esac
}
filters() {
    case $1 in
    tb) echo "$TB_TESTS" ;;
    i686) echo "$I686_TESTS" ;;
    *) echo "" ;;
    esac
}
# skips RUN: tests its filters select that it leaves out (exact names).
skips() {
    case $1 in
    tb) echo "$TB_SKIP" ;;
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
# 32-bit C headers, for a dependency that compiles C for the i686 target
# (none since criterion, whose `alloca` did, is not built under Miri).
if ! echo 'int main(void){return 0;}' | gcc -m32 -x c -o /dev/null - 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq gcc-multilib >/dev/null
fi
cargo +nightly miri setup >/dev/null
cargo +nightly miri setup --target i686-unknown-linux-gnu >/dev/null

runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(sb nostd tb i686)
out=target/miri-logs
rm -rf "$out" && mkdir -p "$out"

# Builds, and the sorted test names of each run's binaries. Listing runs
# the binary under Miri (a few seconds each, on one core), so each run's
# lists are made in the background while the next run builds. A run with
# the build and binaries of an earlier one (tb, of sb) filters that run's
# lists as libtest would (a name that contains any filter) instead of
# starting Miri again.
start=$(date +%s)
listers=()
# list RUN TARGET: the tests of one binary of RUN into RUN.TARGET.list.
list() {
    # shellcheck disable=SC2046 # lists of arguments
    cargo +nightly miri test $(args "$1") $(target "$2") -q -- --list --format terse $(filters "$1") 2>/dev/null |
        sed -n 's/: test$//p' | sort -u >"$out/$1.$2.list"
}
derived() { [ "$1" = tb ] && [[ " ${runs[*]} " == *" sb "* ]]; }
for run in "${runs[@]}"; do
    # shellcheck disable=SC2046 # lists of arguments
    cargo +nightly miri test $(args "$run") $(for bin in $(targets "$run"); do target "$bin"; done) --no-run 2>&1 | tail -n 3
    derived "$run" && continue
    for bin in $(targets "$run"); do
        list "$run" "$bin" &
        listers+=($!)
    done
done
for pid in "${listers[@]}"; do
    wait "$pid" || { echo "miri: a listing failed" >&2; exit 1; }
done
if derived tb; then
    pattern=()
    for filter in $(filters tb); do pattern+=(-e "$filter"); done
    for bin in $(targets tb); do
        grep -F "${pattern[@]}" "$out/sb.$bin.list" >"$out/tb.$bin.list" || true
    done
fi
for run in "${runs[@]}"; do
    # A left-out name that is no test (renamed) would leave its test in
    # without a word.
    for skip in $(skips "$run"); do
        grep -qxF -e "$skip" "$out/$run".*.list || { echo "miri: $run: no test '$skip' to leave out" >&2; exit 1; }
        for list in "$out/$run".*.list; do
            grep -vxF -e "$skip" "$list" >"$list.kept" || true
            mv "$list.kept" "$list"
        done
    done
    echo "miri: $run: $(cat "$out/$run".*.list | wc -l) tests"
    [ -n "$(cat "$out/$run".*.list)" ] || { echo "miri: $run lists no test" >&2; exit 1; }
    # A filter that selects nothing (a module renamed or moved) would leave
    # its code out of the run without a word.
    for filter in $(filters "$run"); do
        grep -qF -e "$filter" "$out/$run".*.list || { echo "miri: $run: no test matches '$filter'" >&2; exit 1; }
    done
done
echo "miri: builds and lists: $(($(date +%s) - start)) s"

# The two lanes, balanced by time: every test of every run, longest first,
# goes to the lane with less time so far, by the wall seconds each took in
# a recorded run ($TIMES, where an ignored test counts 0 s; a test not in
# it counts 5 s); a run's unit tests
# (`lib`, a few seconds in all) go to one lane together, so the other
# lane does not start that binary under Miri for that run. Each lane then
# runs one process per binary of each run, with the names it was given.
lists=()
for run in "${runs[@]}"; do lists+=("$out/$run".*.list); done
[ -f "$TIMES" ] || TIMES=/dev/null
awk '
    FILENAME == ARGV[1] { secs[$1 " " $3] = $2; next }
    { split(FILENAME, p, "/"); split(p[length(p)], f, "."); run = f[1]; bin = f[2]
      t = ((run " " $0) in secs) ? secs[run " " $0] : 5
      print t, run, bin, $0 }' "$TIMES" "${lists[@]}" |
    sort -k1,1nr -k2,4 | awk -v out="$out" '
    { if ($3 == "lib" && ($2 in unit)) lane = unit[$2]
      else lane = (load[1] <= load[2]) ? 1 : 2
      if ($3 == "lib") unit[$2] = lane
      load[lane] += $1
      print $4 >> (out "/" $2 "-" lane "." $3 ".names") }
    END { printf "miri: lanes balanced to %.0f s and %.0f s of recorded time\n", load[1], load[2] }'

# stamp FILE: copies its input, and writes each line that starts a
# binary's tests or ends one test to FILE after the wall time it was read
# at. Miri runs a binary's tests one at a time (it reports one CPU), so a
# test's wall seconds are the time from the line before it to its own.
# (Miri's own clock, `--report-time`, counts interpreted work, which is
# not wall time: a lane split on it ended 48 s apart.)
stamp() {
    local line
    while IFS= read -r line; do
        printf '%s\n' "$line"
        case $line in
        'running '* | 'test '*) printf '%s %s\n' "$EPOCHREALTIME" "$line" >>"$1" ;;
        esac
    done
}

# job NAME (RUN-LANE): a lane's share of a run, by exact names, one
# process per binary it has names in; its seconds into NAME.secs.
job() {
    local name=$1 run=${1%-*} t0 rc=0 bin miriflags
    # Checked: a failing substitution in an assignment before a command
    # would run Miri with no flags at all, and pass.
    miriflags=$(flags "$run") && [ -n "$miriflags" ] || { echo "miri: no MIRIFLAGS for $run" >&2; return 1; }
    t0=$(date +%s)
    : >"$out/$name.log"
    for bin in $(targets "$run"); do
        [ -s "$out/$name.$bin.names" ] || continue
        # shellcheck disable=SC2046 # lists of arguments and names
        MIRIFLAGS=$miriflags cargo +nightly miri test $(args "$run") $(target "$bin") -- --exact $(cat "$out/$name.$bin.names") \
            2>&1 | stamp "$out/$name.stamps" >>"$out/$name.log" || rc=$?
    done
    echo "$(($(date +%s) - t0)) $rc" >"$out/$name.secs"
    return $rc
}

# Two lanes, one per core, each running its share of every run in turn.
lane() {
    local which=$1 run rc=0
    for run in "${runs[@]}"; do
        compgen -G "$out/$run-$which.*.names" >/dev/null || continue
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
        echo "---- miri $name ($(flags "$run"); $(args "$run") $(for bin in $(targets "$run"); do target "$bin"; done))"
        grep -vE '^test .* \.\.\. ok( <[0-9.]+s>)?$' "$out/$name.log" || true
        grep -qE '^test result: ok\. [1-9]' "$out/$name.log" || { echo "miri: $name ran no test or failed" >&2; rc=1; }
    done
done
# This run's times (wall seconds, from the stamps), for $TIMES when the
# tests have changed much, and the slowest tests, where scaling a count
# down under cfg(miri) pays most. An ignored test is written with 0 s.
for run in "${runs[@]}"; do
    cat "$out/$run"-[12].stamps 2>/dev/null |
        awk -v run="$run" '$2 == "running" { last = $1; next }
            $2 == "test" && $4 == "..." && ($5 == "ok" || $5 ~ /^ignored/) {
                printf "%s %.2f %s\n", run, $5 == "ok" ? $1 - last : 0, $3 }
            $2 == "test" { last = $1 }'
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
