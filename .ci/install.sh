#!/usr/bin/env bash
# Installs what CI's steps need and a fresh machine lacks: Debian packages,
# rustup targets and toolchains, Miri's sysroots, qemu-aarch64. .ci/run
# starts it in the background while its first steps compile (a fresh
# machine downloads about 1.5 GB), and waits for it before the first step
# that needs any of it. Each step still installs what it lacks, so a step
# run alone (`bash .ci/platforms.sh windows`) needs none of this. Quick
# when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

# Debian packages: i686 Miri (gcc-multilib, for criterion's `alloca`),
# Windows (mingw, wine), aarch64 (clang, lld, the arm64 C library), the C
# API's CMake and pkg-config steps, the ExecuTorch runner.
gcc_major=$(gcc -dumpversion | cut -d. -f1)
packages=(gcc-multilib gcc-mingw-w64-x86-64 wine wine64 clang lld llvm libc6-dev-arm64-cross
    "libgcc-$gcc_major-dev-arm64-cross" cmake pkg-config make g++ unzip binutils python3-pip valgrind)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
start=$(date +%s)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install: ${#missing[@]} Debian packages in $(($(date +%s) - start)) s"

# Toolchains and targets: the no_std and platform targets, Miri, the MSRV.
start=$(date +%s)
targets=(thumbv7em-none-eabihf aarch64-apple-darwin aarch64-apple-ios aarch64-linux-android
    x86_64-unknown-freebsd wasm32-unknown-unknown x86_64-pc-windows-gnu aarch64-unknown-linux-gnu)
installed=$(rustup target list --installed)
missing=()
for t in "${targets[@]}"; do grep -qx "$t" <<<"$installed" || missing+=("$t"); done
[ ${#missing[@]} -eq 0 ] || rustup target add "${missing[@]}"
cargo +nightly miri --version >/dev/null 2>&1 ||
    rustup component add --toolchain nightly miri rust-src
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
cargo "+$msrv" --version >/dev/null 2>&1 || rustup toolchain install "$msrv" --profile minimal
echo "install: rustup in $(($(date +%s) - start)) s"

start=$(date +%s)
cargo +nightly miri setup >/dev/null
cargo +nightly miri setup --target i686-unknown-linux-gnu >/dev/null
echo "install: Miri's sysroots in $(($(date +%s) - start)) s"

start=$(date +%s)
bash .ci/platforms.sh fetch >/dev/null
echo "install: qemu-aarch64 in $(($(date +%s) - start)) s"
