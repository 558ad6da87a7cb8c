#!/usr/bin/env bash
# CI steps of the API work (issue 20): features that only add, the C and C++
# build integration, packaging and the MSRV. Called from .ci/run; run from
# the project root on a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "-- $*"; }

# Issue 20, item 2: no public type, default or signature changes with a
# feature. crates/no-std-kernel names `Frame<'_, FixedAllocator<'_>>` in its
# API; it must build on its own (no `std`) and in one build with a crate that
# turns `tempalloc/std` on (the root package, default features), where
# feature unification gives it `std`.
step "no-std-kernel: alone, with tempalloc/std, and beside a crate enabling std"
cargo check -p no-std-kernel
cargo check -p no-std-kernel --features tempalloc/std
cargo check -p no-std-kernel -p tempalloc

# Issue 20, item 9: the docs.rs build (every feature, `--cfg docsrs` on
# nightly) has no warning, and feature-gated items say which feature they need.
step "docs.rs: all features, doc_cfg"
if ! cargo +nightly --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo +nightly doc --no-deps --all-features
grep -q 'Available on <strong>crate feature <code>std</code></strong> only' \
    target/doc/tempalloc/struct.CachingAllocator.html
grep -q 'Available on <strong>crate feature <code>capi</code></strong> only' \
    target/doc/tempalloc/capi/index.html
grep -q 'crate feature <code>dyn-stack</code>' target/doc/tempalloc/struct.KernelContext.html
grep -Eq '^all-features = true$' Cargo.toml
