//! The C API's `capi_checked` cfg (debug builds, or the `capi-checked`
//! feature), and the shared C library's SONAME (feature `capi`, `--crate-type cdylib`, on
//! ELF targets), so that programs linked against it ask the loader for the
//! ABI version they were built with.
//!
//! `cargo:rustc-cdylib-link-arg` would say it best, but Cargo warns about it
//! on every build of a package whose manifest declares no cdylib (the C
//! library's crate type is chosen on the command line: docs/capi.md). So the
//! flag goes to every link of this package with `capi` on: the cdylib, and
//! its own test, example and binary executables, where an ELF loader ignores
//! a SONAME. Nothing reaches the packages that depend on this one.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(capi_checked)");
    // Set by .ci/platforms.sh for its cross builds (Cargo.toml, the
    // dev-dependencies they leave out).
    println!("cargo::rustc-check-cfg=cfg(tempalloc_os_tests)");
    if std::env::var_os("CARGO_FEATURE_CAPI").is_none() {
        return;
    }
    // The C API's handle books (src/capi/handles.rs): in debug builds, and
    // in release with the `capi-checked` feature. One name for both, so the
    // code says one thing where it would say `any(debug_assertions, ..)`.
    if std::env::var_os("CARGO_CFG_DEBUG_ASSERTIONS").is_some()
        || std::env::var_os("CARGO_FEATURE_CAPI_CHECKED").is_some()
    {
        println!("cargo:rustc-cfg=capi_checked");
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    // Before 1.0 a minor version may break the ABI, as Cargo's semver says.
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let soname = match os.as_str() {
        // Android loads libraries by their file name, unversioned.
        "android" => "libtempalloc.so".to_string(),
        "linux" | "freebsd" | "netbsd" | "openbsd" | "dragonfly" | "illumos" | "solaris" => {
            format!("libtempalloc.so.{abi}")
        }
        // Mach-O, PE and the rest: the linker's default name.
        _ => return,
    };
    println!("cargo:rustc-link-arg=-Wl,-soname,{soname}");
}
