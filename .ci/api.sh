#!/usr/bin/env bash
# CI steps of the API: features that only add, the C and C++
# build integration, packaging and the MSRV. Called from .ci/run; run from
# the project root on a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."

# step TITLE: ends the previous part with its seconds, starts the next
# (without TITLE, at exit: only ends the last).
part_start=$(date +%s)
step() {
    local now
    now=$(date +%s)
    [ -z "${part:-}" ] || echo "-- $part: $((now - part_start)) s"
    part=$* part_start=$now
    [ -z "$part" ] || echo "-- $part"
}
trap step EXIT

# No public type, default or signature changes with a
# feature. crates/no-std-kernel names `Frame<'_, FixedAllocator<'_>>` in its
# API; it must build on its own (no `std`) and in one build with a crate that
# turns `tempalloc/std` on (the root package, default features), where
# feature unification gives it `std`.
step "no-std-kernel: alone, with tempalloc/std, and beside a crate enabling std"
cargo check -p no-std-kernel
cargo check -p no-std-kernel --features tempalloc/std
cargo check -p no-std-kernel -p tempalloc

# The docs.rs build (every feature, `--cfg docsrs` on
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
grep -q '<code>test-util</code></strong> only' target/doc/tempalloc/testing/index.html
grep -Eq '^all-features = true$' Cargo.toml

# Every C and C++ block of README.md and docs/capi.md,
# read from the files, compiled, linked and run (also part of
# `cargo test --features capi`; named here so a failure says where).
step "C and C++ blocks of the docs"
# The feature set of .ci/run's feature tests, whose build this reuses.
cargo test --quiet --features capi,cli,dyn-stack --test all capi::docs::

# The C library as a C or C++ project gets it.
step "C library: the benchmark harness's build, SONAME, release-capi"
# The command ../shared/bench/et-compare.sh runs must keep working.
cargo rustc --quiet --release --lib --features capi --crate-type cdylib
# Both crate types in one call, the command cmake/tempalloc.cmake runs: the
# CMake builds below find this build and cargo does nothing there.
cargo rustc --quiet --profile release-capi --lib --features capi --crate-type staticlib,cdylib
readelf -d target/release-capi/libtempalloc.so | grep -q 'Library soname: \[libtempalloc.so.0.1\]'
ls -l target/release/libtempalloc.so target/release-capi/libtempalloc.so target/release-capi/libtempalloc.a

# The checked release library turns a double destroy, a
# stale handle and a handle of the other kind into error codes. `--release`,
# not release-capi: only this crate is built again, without a second LTO.
step "C library: the checked release build (capi-checked)"
cargo rustc --quiet --release --lib --features capi-checked --crate-type staticlib
cc -std=c99 -pedantic -Wall -Wextra -Werror -Iinclude tests/c/checked.c target/release/libtempalloc.a \
    -lpthread -ldl -lm -o target/checked-c
target/checked-c

# The static library built as code for an executable (docs/capi.md,
# "Building the library"): the request's thread-local look-up is a plain
# load, and the library links into an executable and runs. In the target
# dir cmake/tempalloc.cmake gives it (TEMPALLOC_FOR_EXECUTABLES), so the
# CMake build below that asks for it finds it built.
step "C library: static, as code for an executable (relocation-model=pie)"
cargo rustc --quiet --release --lib --features capi --crate-type staticlib --target-dir target/pie \
    -- -C relocation-model=pie
cc -std=c99 -pedantic -Wall -Wextra -Werror -Iinclude tests/c/smoke.c target/pie/release/libtempalloc.a \
    -lpthread -ldl -lm -o target/smoke-pie
target/smoke-pie

# CMake the way CMake users write it.
step "CMake: install (SONAME, development link, package config), find_package, add_subdirectory, include, pkg-config"
if ! command -v cmake >/dev/null || ! command -v pkg-config >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends cmake pkg-config >/dev/null
fi
cm=target/cmake
rm -rf "$cm"
# cargo's own target dir: every CMake build below reuses the library above.
cargo_target="$PWD/target"
cmake -S . -B "$cm/lib" -DCMAKE_BUILD_TYPE=Release -DTEMPALLOC_TARGET_DIR="$cargo_target" >/dev/null
cmake --build "$cm/lib"
prefix="$PWD/$cm/prefix"
cmake --install "$cm/lib" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name libtempalloc.a)")
# The shared library under its SONAME, and the development link to it.
test "$(readlink "$libdir/libtempalloc.so")" = libtempalloc.so.0.1
readelf -d "$libdir/libtempalloc.so.0.1" | grep -q 'Library soname: \[libtempalloc.so.0.1\]'
test -f "$libdir/cmake/tempalloc/tempallocConfig.cmake"
# A C program linked with -ltempalloc asks for the SONAME and runs with the
# library installed under it.
cc -std=c99 -pedantic -Wall -Wextra -Werror -I"$prefix/include" tests/c/smoke.c -L"$libdir" -ltempalloc -o "$cm/smoke-shared"
readelf -d "$cm/smoke-shared" | grep -q 'Shared library: \[libtempalloc.so.0.1\]'
LD_LIBRARY_PATH="$libdir" "$cm/smoke-shared"
# A consumer each way: find_package of the install, add_subdirectory of the
# tree, include() of examples/cmake/tempalloc.cmake; a program on the static
# library and one on the shared library each time.
for from in package subdirectory include; do
    cmake --no-warn-unused-cli -S examples/cmake -B "$cm/$from" -DCMAKE_BUILD_TYPE=Release -DTEMPALLOC_FROM="$from" \
        -DCMAKE_PREFIX_PATH="$prefix" -DTEMPALLOC_TARGET_DIR="$cargo_target" >/dev/null
    cmake --build "$cm/$from"
    "$cm/$from/example"
    "$cm/$from/example_shared"
done
# TEMPALLOC_FOR_EXECUTABLES: the static library as code for an executable
# (the `release` profile, whose two builds the steps above made).
cmake --no-warn-unused-cli -S examples/cmake -B "$cm/pie" -DCMAKE_BUILD_TYPE=Release -DTEMPALLOC_FROM=include \
    -DTEMPALLOC_PROFILE=release -DTEMPALLOC_FOR_EXECUTABLES=ON -DTEMPALLOC_TARGET_DIR="$cargo_target" >/dev/null
cmake --build "$cm/pie"
"$cm/pie/example"
"$cm/pie/example_shared"
# The include() example's install (static library, headers, tempalloc.pc):
# pkg-config, no CMake.
cmake --install "$cm/include" --prefix "$PWD/$cm/include/prefix" >/dev/null
pcdir=$(dirname "$(find "$cm/include/prefix" -name tempalloc.pc)")
export PKG_CONFIG_PATH="$pcdir"
cc -std=c99 -pedantic -Wall -Wextra -Werror tests/c/smoke.c $(pkg-config --cflags tempalloc) \
    -o "$cm/smoke" $(pkg-config --libs --static tempalloc)
"$cm/smoke"
unset PKG_CONFIG_PATH

# `cargo publish --dry-run` (packaging, the manifest
# checks crates.io's upload makes, a build of the packaged crate) passes
# with no warning but its own "aborting upload due to dry run". A fresh
# clone is clean, as it wants.
step "cargo publish --dry-run: no warning"
cargo publish --dry-run 2>&1 | tee target/ci-publish.log
if grep -i 'warning' target/ci-publish.log | grep -vx 'warning: aborting upload due to dry run'; then
    echo "cargo publish --dry-run warned" >&2
    exit 1
fi
grep -qx 'warning: aborting upload due to dry run' target/ci-publish.log
# The list in a file: `grep -q` leaves at its first match, and a writer
# still writing into the pipe would then fail the step (`pipefail`).
cargo package --list >target/ci-package.list
for f in LICENSE-MIT LICENSE-APACHE tests/data/reference-traces.txt; do
    grep -qx "$f" target/ci-package.list
done
if grep -E '^(\.ci/|scripts/)|\.svg$' target/ci-package.list; then
    echo "the package ships CI, scripts or the plot" >&2
    exit 1
fi

# The MSRV (rust-version in Cargo.toml) builds with default features and
# with none.
step "MSRV $(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml): default features and none"
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if ! cargo "+$msrv" --version >/dev/null 2>&1; then
    rustup toolchain install "$msrv" --profile minimal
fi
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" build --lib
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" build --lib --no-default-features
