#!/usr/bin/env bash
# The lease protocol's model (tests/shuttle_lease.rs) under shuttle's random
# and PCT schedulers, TEMPALLOC_SHUTTLE_ITERATIONS schedules each (100 000
# here; `cargo test` alone runs 10 000), and the planted bugs it must catch.
# Reuses the test build of `cargo test`: shuttle's own crates are optimised
# in test builds (Cargo.toml), so this takes about half a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target
export TEMPALLOC_SHUTTLE_ITERATIONS="${TEMPALLOC_SHUTTLE_ITERATIONS:-100000}"
cargo test --test shuttle_lease 2>&1 | tee target/ci-shuttle.log
grep -E '^test result:' target/ci-shuttle.log
