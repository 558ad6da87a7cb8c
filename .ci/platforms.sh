#!/usr/bin/env bash
# Platform CI: each platform tempalloc ships on, proven as far as
# this x86-64 Linux machine allows. docs/reliability.md ("Platforms in CI")
# says what each step proves and cannot, and what it costs.
#
#   bash .ci/platforms.sh [STEP...]     (no STEP: all of them, in this order)
#
#   checks   clippy -D warnings (a superset of `cargo check`) for Apple,
#            Android, FreeBSD and wasm targets, and the C API for Apple/Android
#   windows  x86_64-pc-windows-gnu: the OS tests under wine
#   aarch64  aarch64-unknown-linux-gnu: the OS tests under qemu-user 10
#   pages    the OS tests on the host with TEMPALLOC_PAGE_SIZE=16384 and 65536
#   shim     the OS tests under an LD_PRELOAD shim that makes the system calls
#            act like a 16 KiB and a 64 KiB page kernel
#   ulimit   the OS tests in a 4 GB address space (ulimit -v)
#   fallback the OS tests with every reservation refused (TEMPALLOC_RESERVE=off):
#            heap blocks everywhere, as where nothing can be reserved
#
# Every step installs what it lacks (rustup targets, Debian packages, qemu
# into target/) and is quick when it is there. Downloads and built files go
# under target/platforms/. A step runs all its parts, then fails if any did;
# the script runs every step it is given, prints each one's time, and fails
# if any step failed.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
root=$PWD
out=$root/target/platforms

# The integration tests that touch the OS layer (`cargo test --test all`
# filters: a test runs when its path contains one): the CachingAllocator's
# promise modules. The lib's unit tests run whole as well. Extend this list
# when a module that reserves, commits or decommits memory is added (or
# whose promise depends on in-place growth, as `scratch::grow_in_place::`).
OS_TESTS="frames::scopes:: memory::stress:: memory::footprint:: memory::threads:: memory::budget:: frames::checkpoints:: failures::fallback:: memory::sessions:: failures::refusals:: traces::plan:: memory::work:: scratch::grow_in_place::"

# The page sizes of the kernels tempalloc must handle besides 4 KiB: Apple
# Silicon, iOS and Android 15+ (16 KiB), some arm64 servers (64 KiB).
PAGE_SIZES="16384 65536"

export CARGO_TERM_COLOR=never
# Runs the host's test binaries through a command (an LD_PRELOAD): cargo
# applies it to test executables only, never to rustc or build scripts.
host_runner=CARGO_TARGET_$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')_RUNNER

# ---------------------------------------------------------------- helpers

# rustup targets, added in one call when any is missing.
need_targets() {
    local missing=() t
    local installed
    installed=$(rustup target list --installed)
    for t in "$@"; do
        grep -qx "$t" <<<"$installed" || missing+=("$t")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        rustup target add "${missing[@]}"
    fi
}

# Debian packages, installed (without recommends) when any is missing.
# `apt-get update` runs first, once per step that installs (steps run in
# subshells, so this flag does not carry over).
apt_updated=""
need_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        if [ -z "$apt_updated" ]; then
            apt-get update -qq
            apt_updated=1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# build_c SRC DST CC [FLAGS...]: builds DST from the C source SRC (as
# `CC SRC FLAGS -o DST`, so libraries come after the source), unless DST is
# newer than SRC.
build_c() {
    local src=$1 dst=$2 cc=$3
    shift 3
    if [ ! -e "$dst" ] || [ "$src" -nt "$dst" ]; then
        mkdir -p "$(dirname "$dst")"
        "$cc" "$src" "$@" -o "$dst"
    fi
}

# The OS tests for the target and features in "$@": the lib's unit tests,
# the filtered integration tests, and the resident-memory test (Linux only;
# elsewhere it has no test). All run even when one fails.
run_os_tests() {
    local rc=0
    cargo test "$@" --lib -- -q || rc=1
    # shellcheck disable=SC2086 # OS_TESTS is a list of filters
    cargo test "$@" --test all -- -q $OS_TESTS || rc=1
    cargo test "$@" --test resident -- -q || rc=1
    return $rc
}

# cross_build TARGET-VAR: what the two cross builds (windows, aarch64) leave
# out. `--cfg tempalloc_os_tests` in the target's RUSTFLAGS (TARGET-VAR, the
# `CARGO_TARGET_<TRIPLE>_RUSTFLAGS` variable) leaves out the dev-dependencies
# that neither the lib's unit tests nor tests/all without `capi` use:
# criterion (benches/), cbindgen (the header test, `capi` only) and
# shuttle (tests/shuttle_lease.rs; Cargo.toml). No debug info in the test
# profile: mingw's ld links large debug binaries slowly, and a failure
# still prints its panic's file and line. 0.39x the CPU time of those
# builds (docs/reliability.md, "CI-time cuts"); the tests are the same.
cross_build() {
    export "$1=${!1:+${!1} }--cfg tempalloc_os_tests"
    export CARGO_PROFILE_TEST_DEBUG=false
}

# ---------------------------------------------------------------- steps

# Type checks and lints for targets this machine cannot run. No linking, so
# no SDK or NDK is needed.
step_checks() {
    need_targets aarch64-apple-darwin aarch64-apple-ios aarch64-linux-android \
        x86_64-unknown-freebsd wasm32-unknown-unknown
    local failed=() args
    while read -r args; do
        echo "-- cargo clippy --lib $args -- -D warnings"
        # shellcheck disable=SC2086 # $args is a list of cargo arguments
        cargo clippy -q --lib $args -- -D warnings </dev/null || failed+=("$args")
    done <<'EOF'
--target aarch64-apple-darwin
--target aarch64-apple-darwin --features capi
--target aarch64-apple-ios
--target aarch64-apple-ios --features capi
--target aarch64-linux-android
--target aarch64-linux-android --features capi
--target x86_64-unknown-freebsd
--target wasm32-unknown-unknown --no-default-features
--target wasm32-unknown-unknown --no-default-features --features alloc
EOF
    if [ ${#failed[@]} -gt 0 ]; then
        printf 'checks: FAILED for %s\n' "${failed[@]}"
        return 1
    fi
}

# Windows: the OS tests of an x86_64-pc-windows-gnu build under wine.
step_windows() {
    local target=x86_64-pc-windows-gnu
    need_targets $target
    need_packages gcc-mingw-w64-x86-64 wine wine64
    # Debian 12's wine lacks ProcessPrng, which Rust's std imports: a stub
    # bcryptprimitives.dll next to the test executables supplies it.
    local deps=$root/target/$target/debug/deps
    build_c .ci/shims/processprng.c "$deps/bcryptprimitives.dll" \
        x86_64-w64-mingw32-gcc -O2 -shared -s -ladvapi32
    export WINEPREFIX=$out/wine WINEDEBUG=-all
    # No Mono or Gecko: the tests need neither, and wine would offer to
    # install them on the prefix's first start.
    export WINEDLLOVERRIDES="mscoree,mshtml="
    # A time limit far above a normal run (25 s of tests), so that a hang
    # fails this step instead of using up CI's time.
    export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="timeout -k 10 900 wine"
    cross_build CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUSTFLAGS
    mkdir -p "$WINEPREFIX"
    local rc=0
    run_os_tests --target $target || rc=1
    # The prefix's wineserver lingers a few seconds after the last program;
    # end it now so that nothing of this step outlives it.
    wineserver -k 2>/dev/null || true
    return $rc
}

# qemu-aarch64 from qemu-user 10 (the system suite's backports), unpacked
# into target/: Debian 12's qemu 7.2 keeps state for every page of a
# region's 64 GiB reservation and is killed for memory on these tests.
# Downloaded with a sources list under target/, so the system's apt sources
# and lists stay as they are; the mirror and keyring are the system's own.
qemu_aarch64() {
    local dir=$out/qemu bin=$out/qemu/usr/bin/qemu-aarch64
    if [ -x "$bin" ] && "$bin" --version | grep -Eq 'version ([1-9][0-9])\.'; then
        echo "$bin"
        return
    fi
    local codename uri keyring
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
        keyring=$(awk '/^Signed-By:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
    else
        uri=$(awk -v s="$codename" '$1 == "deb" && $3 == s { print $2; exit }' /etc/apt/sources.list)
    fi
    keyring=${keyring:-/usr/share/keyrings/debian-archive-keyring.gpg}
    mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial"
    echo "deb [signed-by=$keyring] $uri $codename-backports main" >"$dir/apt/sources.list"
    local apt=(-q -o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache"
        -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" update >&2
    rm -f "$dir"/qemu-user_*.deb
    (cd "$dir" && apt-get "${apt[@]}" download "qemu-user/$codename-backports" >&2)
    dpkg-deb --fsys-tarfile "$dir"/qemu-user_*.deb | tar -x -C "$dir" ./usr/bin/qemu-aarch64
    rm -f "$dir"/qemu-user_*.deb
    "$bin" --version | head -1 >&2
    echo "$bin"
}

# aarch64 Linux: the OS tests under qemu-user. Linked with clang and lld, not
# gcc-aarch64-linux-gnu: that package conflicts with gcc-multilib, which the
# i686 Miri step needs (apt would remove /usr/include/asm).
step_aarch64() {
    local target=aarch64-unknown-linux-gnu
    need_targets $target
    local gcc_major
    gcc_major=$(gcc -dumpversion | cut -d. -f1)
    need_packages clang lld llvm libc6-dev-arm64-cross "libgcc-$gcc_major-dev-arm64-cross"
    local qemu
    qemu=$(qemu_aarch64)
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=clang
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-Clink-arg=--target=aarch64-linux-gnu -Clink-arg=-fuse-ld=lld"
    # A time limit far above a normal run (3 to 5 minutes of tests).
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="timeout -k 10 1800 $qemu -L /usr/aarch64-linux-gnu"
    cross_build CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS
    # A C compiler for the target, for a dependency that builds C (none
    # does with criterion's `alloca` left out, cross_build).
    export CC_aarch64_unknown_linux_gnu=clang CXX_aarch64_unknown_linux_gnu=clang++
    export CFLAGS_aarch64_unknown_linux_gnu=--target=aarch64-linux-gnu
    export CXXFLAGS_aarch64_unknown_linux_gnu=--target=aarch64-linux-gnu
    export AR_aarch64_unknown_linux_gnu=llvm-ar
    run_os_tests --target $target
}

# The logical page: TEMPALLOC_PAGE_SIZE makes the crate use a larger page
# than the kernel's. An observing shim records the commits and madvise calls
# the tests make and the step fails unless every one of them is a multiple
# of the page asked for: proof that the variable was honoured.
step_pages() {
    local watch=$out/pagewatch.so log=$out/pagewatch.log
    build_c .ci/shims/pagesize.c "$watch" gcc -O2 -Wall -shared -fPIC -DSHIM_OBSERVE
    local rc=0 page line used
    for page in $PAGE_SIZES; do
        echo "-- TEMPALLOC_PAGE_SIZE=$page"
        rm -f "$log"
        export TEMPALLOC_PAGE_SIZE=$page PAGEWATCH_LOG=$log "$host_runner=env LD_PRELOAD=$watch"
        run_os_tests || rc=1
        while read -r line; do
            echo "$line"
            used=$(sed -n 's/.*multiple of \([0-9]*\) bytes.*/\1/p' <<<"$line")
            if [ -n "$used" ] && [ "$used" -lt "$page" ]; then
                echo "pages: FAILED: TEMPALLOC_PAGE_SIZE=$page, but the system calls used $used-byte pages"
                rc=1
            fi
        done <"$log"
    done
    return $rc
}

# The system calls themselves refuse what a 16 or 64 KiB page kernel would
# (and, stricter, lengths that are not whole pages): a hard-coded page size
# fails here even where the logical page would hide it.
step_shim() {
    build_c .ci/shims/pagesize_check.c "$out/pagesize_check" gcc -O2 -Wall
    local rc=0 page so
    for page in $PAGE_SIZES; do
        so=$out/pagesize$((page / 1024))k.so
        build_c .ci/shims/pagesize.c "$so" gcc -O2 -Wall -shared -fPIC "-DSHIM_PAGE=$page" -ldl
        echo "-- under $so"
        # The shim must refuse before its passing tests mean anything.
        PAGESIZE_SHIM_QUIET=1 LD_PRELOAD=$so "$out/pagesize_check" "$page"
        export "$host_runner=env LD_PRELOAD=$so"
        run_os_tests || rc=1
    done
    return $rc
}

# A limited address space (`ulimit -v`): reservations shrink to a share of
# it (os::region_reserve) and fall back to heap blocks past it, and every
# promise still holds. 4 GB leaves room for the C library's per-thread
# arenas of the 64-thread tests; the binaries are built outside the limit.
# One test at a time: the reservations' share (a quarter of the limit) is
# the process's, so two 64-thread tests at once would hold 128 regions'
# reservations, twice the share, and some threads would run on heap blocks,
# past the bounds of the mapped promise their test asserts (a CI run failed
# so on a loaded machine).
step_ulimit() {
    cargo test -q --no-run --lib --test all --test resident
    (ulimit -v 4000000 && RUST_TEST_THREADS=1 run_os_tests)
}

# The heap-block fallback of the platforms without reservations (wasm, and
# wherever the system refuses them) for every OS test: TEMPALLOC_RESERVE=off
# makes every reservation refused, as the system refuses one, so every region
# runs on heap blocks; each test asserts what the fallback promises where
# its promise is a mapped region's (tests/all/scenarios.rs, `mapped`), and
# `failures::fallback::tempalloc_reserve_off_refuses_every_reservation` fails unless
# the variable was honoured.
step_fallback() {
    export TEMPALLOC_RESERVE=off
    local rc=0
    run_os_tests || rc=1
    # The doc examples too: a pattern the docs show keeps its promise on
    # the platforms that reserve nothing (wasm, Miri), or says where not.
    cargo test --doc -q || rc=1
    # Heap blocks come in size classes of whole pages: the budget rule's
    # reckoning at the largest page too.
    echo "-- TEMPALLOC_RESERVE=off TEMPALLOC_PAGE_SIZE=65536"
    TEMPALLOC_PAGE_SIZE=65536 run_os_tests || rc=1
    return $rc
}

# Not a test: qemu-aarch64 into target/ (.ci/install.sh calls it early, so
# the aarch64 step does not wait for the download).
step_fetch() {
    qemu_aarch64 >/dev/null
}

# ---------------------------------------------------------------- main

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(checks windows aarch64 pages shim ulimit fallback)
for s in "${steps[@]}"; do
    declare -F "step_$s" >/dev/null || { echo "platforms.sh: no step '$s'" >&2; exit 2; }
done

mkdir -p "$out"
summary=()
failed=0
for s in "${steps[@]}"; do
    echo "== platforms: $s"
    start=$(date +%s)
    # A subshell per step: its exports stay in it, and `set -e` holds inside
    # (it would not in an `if` or `||` context).
    set +e
    (set -e; "step_$s")
    rc=$?
    set -e
    secs=$(($(date +%s) - start))
    if [ $rc -eq 0 ]; then result=passed; else result=FAILED; failed=1; fi
    echo "platforms: $s: $result in $secs s"
    summary+=("$(printf '%-8s %-6s %5d s' "$s" "$result" "$secs")")
done
echo "== platforms: summary (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%s\n' "${summary[@]}"
exit $failed
