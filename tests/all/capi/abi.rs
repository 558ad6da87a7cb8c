//! The C ABI (`--features capi`): the functions called from Rust, the
//! checked-in header against cbindgen's output for `src/capi.rs`, and the C
//! and C++ programs built against the static library.
#![cfg(feature = "capi")]

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;
use std::sync::OnceLock;

use tempalloc::capi::*;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// An allocator handle for the tests; destroyed on drop.
struct Handle(*mut tempalloc_allocator);

// SAFETY: the C API allows `tempalloc_allocate` and `tempalloc_allocator_stats`
// from any thread concurrently; the tests only reset or destroy it while no
// other thread uses it (after joining them).
unsafe impl Send for Handle {}
// SAFETY: as above; shared use is limited to the thread-safe calls.
unsafe impl Sync for Handle {}

impl Handle {
    fn new(config: Option<&tempalloc_config>) -> Self {
        let mut error = -1;
        let config = config.map_or(ptr::null(), |c| c as *const _);
        // SAFETY: `config` is NULL or points to a live config; `error` is writable.
        let handle = unsafe { tempalloc_allocator_create(config, &mut error) };
        assert_eq!(error, TEMPALLOC_OK);
        assert!(!handle.is_null());
        Handle(handle)
    }

    fn allocate(&self, size: usize, align: usize) -> (*mut u8, tempalloc_error) {
        let mut error = -1;
        // SAFETY: the handle is live; `error` is writable.
        let p = unsafe { tempalloc_allocate(self.0, size, align, &mut error) };
        (p.cast(), error)
    }

    fn stats(&self) -> tempalloc_stats {
        let mut stats = tempalloc_stats::default();
        // SAFETY: the handle is live; `stats` is writable.
        let code = unsafe { tempalloc_allocator_stats(self.0, &mut stats) };
        assert_eq!(code, TEMPALLOC_OK);
        stats
    }

    fn reset(&mut self) {
        // SAFETY: the handle is live and `&mut self` makes this the only user.
        assert_eq!(unsafe { tempalloc_reset(self.0) }, TEMPALLOC_OK);
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle is live and not used after this.
        unsafe { tempalloc_allocator_destroy(self.0) };
    }
}

/// Creates an allocator from `config`, returning the code (and destroying
/// the handle if one was made).
fn create_code(config: &tempalloc_config) -> tempalloc_error {
    let mut error = -1;
    // SAFETY: `config` is live; `error` is writable.
    let handle = unsafe { tempalloc_allocator_create(config, &mut error) };
    assert_eq!(handle.is_null(), error != TEMPALLOC_OK);
    // SAFETY: NULL or a live handle, not used again.
    unsafe { tempalloc_allocator_destroy(handle) };
    error
}

#[test]
fn flags_other_than_0_or_1_are_invalid_arguments() {
    let default = tempalloc_config_default();
    for value in [0u8, 1] {
        for field in 0..3 {
            let mut c = default;
            *[&mut c.prefault, &mut c.huge_pages, &mut c.debug_checks][field] = value;
            assert_eq!(create_code(&c), TEMPALLOC_OK, "field {field} = {value}");
        }
    }
    for value in [2u8, 0x80, 0xff] {
        for field in 0..3 {
            let mut c = default;
            *[&mut c.prefault, &mut c.huge_pages, &mut c.debug_checks][field] = value;
            assert_eq!(
                create_code(&c),
                TEMPALLOC_ERROR_INVALID_ARGUMENT,
                "field {field} = {value}"
            );
        }
    }
    assert!(message(TEMPALLOC_ERROR_INVALID_ARGUMENT).contains("neither 0 nor 1"));
    assert_eq!(default.debug_checks, 0, "off in every build");
}

#[test]
fn check_reports_the_first_write_past_the_end() {
    let config = tempalloc_config {
        debug_checks: 1,
        ..tempalloc_config_default()
    };
    let temp = Handle::new(Some(&config));
    let (p, e) = temp.allocate(100, 16);
    assert_eq!(e, TEMPALLOC_OK);
    // SAFETY: the handle is live.
    assert_eq!(unsafe { tempalloc_check(temp.0) }, TEMPALLOC_OK);
    // SAFETY: the allocator put a canary right after the 100 bytes, in
    // memory it owns; writing it is the bug the check exists for.
    unsafe { p.add(100).write(0x5a) };
    // SAFETY: the handle is live.
    assert_eq!(
        unsafe { tempalloc_check(temp.0) },
        TEMPALLOC_ERROR_CANARY_CORRUPTED
    );
    assert_eq!(temp.stats().canary_violations, 1);
    // SAFETY: NULL is an error code.
    assert_eq!(
        unsafe { tempalloc_check(ptr::null()) },
        TEMPALLOC_ERROR_NULL_ARGUMENT
    );
    // With the checks off, always OK.
    let off = Handle::new(Some(&tempalloc_config {
        debug_checks: 0,
        ..tempalloc_config_default()
    }));
    off.allocate(100, 16);
    // SAFETY: the handle is live.
    assert_eq!(unsafe { tempalloc_check(off.0) }, TEMPALLOC_OK);
}

fn checkpoint(temp: &Handle) -> tempalloc_checkpoint_token {
    let mut cp = tempalloc_checkpoint_token::default();
    // SAFETY: the handle is live and used by this thread only; `cp` is writable.
    assert_eq!(
        unsafe { tempalloc_checkpoint(temp.0, &mut cp) },
        TEMPALLOC_OK
    );
    cp
}

fn rewind(temp: &Handle, cp: tempalloc_checkpoint_token) -> tempalloc_error {
    // SAFETY: the handle is live and used by this thread only.
    unsafe { tempalloc_rewind(temp.0, cp) }
}

#[test]
fn checkpoints_recycle_a_kernel_and_keep_the_inference() {
    let temp = Handle::new(None);
    let (act, _) = temp.allocate(1000, 64);
    // SAFETY: 1000 writable bytes.
    unsafe { act.write_bytes(7, 1000) };
    let mut kernel_at = None;
    for _ in 0..5 {
        let cp = checkpoint(&temp);
        let (tile, e) = temp.allocate(4096, 64);
        assert_eq!(e, TEMPALLOC_OK);
        assert_eq!(
            *kernel_at.get_or_insert(tile),
            tile,
            "the same memory each kernel"
        );
        // SAFETY: 4096 writable bytes.
        unsafe { tile.write_bytes(1, 4096) };
        assert_eq!(rewind(&temp, cp), TEMPALLOC_OK);
        assert_eq!(
            rewind(&temp, cp),
            TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
            "consumed by its rewind"
        );
    }
    // SAFETY: still valid: allocated before every checkpoint.
    assert!(
        unsafe { std::slice::from_raw_parts(act, 1000) }
            .iter()
            .all(|&b| b == 7)
    );
}

/// Each reason a rewind is refused has its own code,
/// the allocator's (foreign, stale, closed), and a refused rewind changes
/// nothing.
#[test]
fn stale_foreign_closed_and_forged_checkpoints_are_refused_each_with_its_code() {
    let mut temp = Handle::new(None);
    let other = Handle::new(None);
    let theirs = checkpoint(&other);
    assert_eq!(rewind(&temp, theirs), TEMPALLOC_ERROR_FOREIGN_CHECKPOINT);
    assert_eq!(rewind(&other, theirs), TEMPALLOC_OK);
    // Nested: rewinding the outer closes the inner.
    let outer = checkpoint(&temp);
    assert_eq!(temp.allocate(100, 8).1, TEMPALLOC_OK);
    let inner = checkpoint(&temp);
    assert_eq!(temp.allocate(200, 8).1, TEMPALLOC_OK);
    assert_eq!(rewind(&temp, outer), TEMPALLOC_OK);
    assert_eq!(rewind(&temp, inner), TEMPALLOC_ERROR_CHECKPOINT_CLOSED);
    // A double rewind.
    assert_eq!(rewind(&temp, outer), TEMPALLOC_ERROR_CHECKPOINT_CLOSED);
    // A reset consumes every checkpoint.
    let cp = checkpoint(&temp);
    temp.reset();
    assert_eq!(rewind(&temp, cp), TEMPALLOC_ERROR_STALE_CHECKPOINT);
    // Made-up values: refused by the first check they fail.
    let gone = checkpoint(&temp);
    assert_eq!(rewind(&temp, gone), TEMPALLOC_OK);
    let open = checkpoint(&temp);
    assert_eq!((gone.depth, gone.resets), (open.depth, open.resets));
    assert_eq!(temp.allocate(300, 8).1, TEMPALLOC_OK);
    for (forged, expected) in [
        (
            tempalloc_checkpoint_token::default(),
            TEMPALLOC_ERROR_FOREIGN_CHECKPOINT,
        ),
        (
            tempalloc_checkpoint_token {
                allocator: u64::MAX,
                ..open
            },
            TEMPALLOC_ERROR_FOREIGN_CHECKPOINT,
        ),
        (
            tempalloc_checkpoint_token {
                resets: open.resets + 1,
                ..open
            },
            TEMPALLOC_ERROR_STALE_CHECKPOINT,
        ),
        (
            tempalloc_checkpoint_token {
                depth: usize::MAX,
                ..open
            },
            TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
        ),
        (
            tempalloc_checkpoint_token {
                serial: u64::MAX,
                ..open
            },
            TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
        ),
        // A token of this window rewound before, whose depth is open again.
        (gone, TEMPALLOC_ERROR_CHECKPOINT_CLOSED),
    ] {
        assert_eq!(rewind(&temp, forged), expected, "{forged:?}");
        // Nothing changed: the open checkpoint's scratch is still live.
        assert_eq!(temp.stats().bytes_live, 300);
    }
    assert_eq!(rewind(&temp, open), TEMPALLOC_OK);
    assert_eq!(temp.stats().bytes_live, 0);
    for code in [
        TEMPALLOC_ERROR_STALE_CHECKPOINT,
        TEMPALLOC_ERROR_FOREIGN_CHECKPOINT,
        TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
    ] {
        assert!(message(code).contains("checkpoint"), "{code}");
    }
    // SAFETY: NULL handles and outputs are error codes.
    unsafe {
        assert_eq!(
            tempalloc_checkpoint(ptr::null_mut(), &mut tempalloc_checkpoint_token::default()),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
        assert_eq!(
            tempalloc_checkpoint(temp.0, ptr::null_mut()),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
        assert_eq!(
            tempalloc_rewind(ptr::null_mut(), cp),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
    }
}

/// The C checkpoints add no system allocation to what the same
/// checkpoint/rewind pattern costs in Rust.
#[test]
fn c_checkpoints_take_memory_in_the_first_round_only() {
    use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    let temp = Handle::new(None);
    let round = || {
        let inference = checkpoint(&temp);
        for _ in 0..3 {
            let kernel = checkpoint(&temp);
            assert_eq!(temp.allocate(10_000, 64).1, TEMPALLOC_OK);
            assert_eq!(rewind(&temp, kernel), TEMPALLOC_OK);
        }
        assert_eq!(rewind(&temp, inference), TEMPALLOC_OK);
    };
    let mut rust = CachingAllocator::new();
    let rust_round = |rust: &mut CachingAllocator| {
        let inference = rust.checkpoint().unwrap();
        for _ in 0..3 {
            let kernel = rust.checkpoint().unwrap();
            KernelContext::new(rust).allocate_temp(10_000, 64).unwrap();
            rust.rewind(kernel).unwrap();
        }
        rust.rewind(inference).unwrap();
    };
    round();
    rust_round(&mut rust);
    let (c_first, rust_first) = (
        temp.stats().system_allocations,
        rust.stats().system_allocations,
    );
    // The C layer allocates nothing itself (its checkpoints are the
    // allocator's), and a rewind keeps the memory for the next kernel.
    assert_eq!(c_first, rust_first);
    for _ in 0..5 {
        round();
        rust_round(&mut rust);
    }
    assert_eq!(temp.stats().system_allocations, c_first);
    assert_eq!(rust.stats().system_allocations, rust_first);
}

/// docs/capi.md: up to 8 nested open checkpoints cost no system allocation,
/// the first time too. Counted by the test binary's global allocator, after
/// a round with as many requests but no checkpoint (the debug checks' books
/// grow with the requests in a window). With the debug checks off (the
/// default) and on.
#[test]
fn eight_nested_checkpoints_allocate_nothing_the_first_time() {
    for debug_checks in [0, 1] {
        let mut temp = Handle::new(Some(&tempalloc_config {
            debug_checks,
            ..tempalloc_config_default()
        }));
        for _ in 0..9 {
            assert_eq!(temp.allocate(64, 8).1, TEMPALLOC_OK);
        }
        temp.reset();
        assert_eq!(temp.allocate(64, 8).1, TEMPALLOC_OK);
        let before = crate::counting::counts().allocs;
        let mut open = [tempalloc_checkpoint_token::default(); 8];
        for cp in &mut open {
            *cp = checkpoint(&temp);
            assert_eq!(temp.allocate(64, 8).1, TEMPALLOC_OK);
        }
        for cp in open.into_iter().rev() {
            assert_eq!(rewind(&temp, cp), TEMPALLOC_OK);
        }
        assert_eq!(
            crate::counting::counts().allocs,
            before,
            "debug checks {debug_checks}"
        );
        assert_eq!(temp.stats().bytes_live, 64);
    }
}

#[test]
#[cfg(any(debug_assertions, feature = "capi-checked"))]
fn a_handle_of_the_wrong_kind_is_an_invalid_handle_in_debug_builds() {
    let mut error = -1;
    // SAFETY: `error` is writable.
    let cache = unsafe { tempalloc_block_cache_create(0, 0, &mut error) };
    assert_eq!(error, TEMPALLOC_OK);
    let wrong = cache.cast::<tempalloc_allocator>();
    // SAFETY: `wrong` points to a live handle (of the other kind); every
    // handle starts with its magic word, which is all the calls read before
    // refusing it.
    unsafe {
        assert!(tempalloc_allocate(wrong, 8, 8, &mut error).is_null());
        assert_eq!(error, TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(tempalloc_reset(wrong), TEMPALLOC_ERROR_INVALID_HANDLE);
        assert_eq!(tempalloc_check(wrong), TEMPALLOC_ERROR_INVALID_HANDLE);
        // Destroying it as an allocator does nothing (and frees nothing).
        tempalloc_allocator_destroy(wrong);
        let mut stats = tempalloc_stats::default();
        assert_eq!(tempalloc_block_cache_stats(cache, &mut stats), TEMPALLOC_OK);
        tempalloc_block_cache_destroy(cache);
    }
    assert!(message(TEMPALLOC_ERROR_INVALID_HANDLE).contains("invalid handle"));
}

fn message(code: tempalloc_error) -> String {
    // SAFETY: `tempalloc_error_message` returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(tempalloc_error_message(code)) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn allocate_aligns_and_resets() {
    let mut temp = Handle::new(None);
    let mut warm = None;
    for _ in 0..3 {
        for align in [1, 8, 64, 4096] {
            let (p, error) = temp.allocate(1000, align);
            assert_eq!(error, TEMPALLOC_OK);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0);
            // SAFETY: `p` is 1000 writable bytes until the reset.
            unsafe { ptr::write_bytes(p, 0xAB, 1000) };
        }
        temp.reset();
        warm.get_or_insert(temp.stats().system_allocations);
    }
    let stats = temp.stats();
    // Memory is taken in the first window only.
    assert_eq!(
        (
            stats.allocations,
            stats.resets,
            Some(stats.system_allocations)
        ),
        (12, 3, warm)
    );
    assert_eq!(stats.bytes_requested, 12_000);
    let (p, error) = temp.allocate(0, 64);
    assert_eq!(error, TEMPALLOC_OK);
    assert!(!p.is_null() && p as usize % 64 == 0);
}

#[test]
fn errors_come_back_as_codes() {
    let temp = Handle::new(None);
    for (size, align, expected) in [
        (64, 3, TEMPALLOC_ERROR_INVALID_ALIGNMENT),
        (64, 0, TEMPALLOC_ERROR_INVALID_ALIGNMENT),
        (usize::MAX - 10, 64, TEMPALLOC_ERROR_SIZE_OVERFLOW),
        (
            isize::MAX as usize - 100,
            4096,
            TEMPALLOC_ERROR_SIZE_OVERFLOW,
        ),
    ] {
        let (p, error) = temp.allocate(size, align);
        assert!(p.is_null(), "{size} at {align}");
        assert_eq!(error, expected, "{size} at {align}: {}", message(error));
    }
    // A NULL `error` is allowed: the pointer alone says it failed.
    // SAFETY: the handle is live; NULL `error` is documented as ignored.
    assert!(unsafe { tempalloc_allocate(temp.0, 64, 3, ptr::null_mut()) }.is_null());
    // SAFETY: as above.
    assert!(!unsafe { tempalloc_allocate(temp.0, 64, 64, ptr::null_mut()) }.is_null());

    let limited = Handle::new(Some(&tempalloc_config {
        max_bytes: 1 << 20,
        ..tempalloc_config_default()
    }));
    let (p, error) = limited.allocate(4 << 20, 64);
    assert!(p.is_null());
    assert_eq!(error, TEMPALLOC_ERROR_BUDGET_EXCEEDED);
    assert!(message(error).contains("budget"));
    assert_eq!(limited.allocate(1000, 64).1, TEMPALLOC_OK);
}

#[test]
fn null_arguments_are_error_codes() {
    let mut error = -1;
    let mut stats = tempalloc_stats::default();
    // SAFETY: every call below passes NULL where the API documents NULL as an
    // error code; other pointers are live locals.
    unsafe {
        assert!(tempalloc_allocate(ptr::null(), 16, 16, &mut error).is_null());
        assert_eq!(error, TEMPALLOC_ERROR_NULL_ARGUMENT);
        assert!(tempalloc_allocate(ptr::null(), 16, 16, ptr::null_mut()).is_null());
        assert_eq!(
            tempalloc_reset(ptr::null_mut()),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
        assert_eq!(
            tempalloc_release(ptr::null_mut()),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
        assert_eq!(
            tempalloc_allocator_stats(ptr::null(), &mut stats),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
        error = -1;
        let handle = tempalloc_allocator_create_with_cache(ptr::null(), ptr::null(), &mut error);
        assert!(handle.is_null());
        assert_eq!(error, TEMPALLOC_ERROR_NULL_ARGUMENT);
        error = -1;
        assert_eq!(
            tempalloc_block_cache_evict_idle(ptr::null(), 0, &mut error),
            0
        );
        assert_eq!(error, TEMPALLOC_ERROR_NULL_ARGUMENT);
        error = -1;
        assert_eq!(tempalloc_block_cache_idle_bytes(ptr::null(), &mut error), 0);
        assert_eq!(error, TEMPALLOC_ERROR_NULL_ARGUMENT);
        assert_eq!(
            tempalloc_block_cache_stats(ptr::null(), &mut stats),
            TEMPALLOC_ERROR_NULL_ARGUMENT
        );
        tempalloc_allocator_destroy(ptr::null_mut());
        tempalloc_block_cache_destroy(ptr::null_mut());
    }
    let temp = Handle::new(None);
    // SAFETY: live handle, NULL output struct (documented as an error code).
    let code = unsafe { tempalloc_allocator_stats(temp.0, ptr::null_mut()) };
    assert_eq!(code, TEMPALLOC_ERROR_NULL_ARGUMENT);
    assert!(message(code).contains("NULL"));
}

#[test]
fn shared_cache_serves_several_allocators() {
    let mut error = -1;
    // SAFETY: `error` is writable.
    let cache = unsafe { tempalloc_block_cache_create(64 << 20, 0, &mut error) };
    assert_eq!(error, TEMPALLOC_OK);
    let make = || {
        let mut error = -1;
        // SAFETY: the cache handle is live; NULL config means defaults.
        let handle =
            unsafe { tempalloc_allocator_create_with_cache(cache, ptr::null(), &mut error) };
        assert_eq!(error, TEMPALLOC_OK);
        Handle(handle)
    };
    let a = make();
    assert_eq!(a.allocate(300_000, 64).1, TEMPALLOC_OK);
    // SAFETY: the handle is live and used by this thread only.
    assert_eq!(unsafe { tempalloc_release(a.0) }, TEMPALLOC_OK);
    assert_eq!(a.stats().bytes_held, 0);
    let b = make();
    assert_eq!(b.allocate(300_000, 64).1, TEMPALLOC_OK);
    let mut stats = tempalloc_stats::default();
    // SAFETY: the cache handle is live; `stats` is writable.
    let code = unsafe { tempalloc_block_cache_stats(cache, &mut stats) };
    assert_eq!(code, TEMPALLOC_OK);
    assert_eq!((stats.system_allocations, stats.cache_hits), (1, 1));
    drop(b);
    // SAFETY: the cache handle is live; NULL `error` is ignored.
    unsafe {
        assert!(tempalloc_block_cache_idle_bytes(cache, ptr::null_mut()) >= 300_000);
        assert!(tempalloc_block_cache_evict_idle(cache, 0, &mut error) >= 300_000);
        assert_eq!(error, TEMPALLOC_OK);
        assert_eq!(tempalloc_block_cache_idle_bytes(cache, ptr::null_mut()), 0);
        assert_eq!(tempalloc_block_cache_evict_idle(cache, 0, &mut error), 0);
        // The handle goes first; `a` keeps the cache alive and works on.
        tempalloc_block_cache_destroy(cache);
    }
    assert_eq!(a.allocate(1000, 64).1, TEMPALLOC_OK);
}

#[test]
fn two_threads_allocate_concurrently() {
    const PER_THREAD: usize = 2000;
    let mut temp = Handle::new(None);
    for _round in 0..3 {
        let buffers: Vec<Vec<(usize, usize)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u8)
                .map(|t| {
                    let temp = &temp;
                    s.spawn(move || {
                        let mut mine = Vec::with_capacity(PER_THREAD);
                        for i in 0..PER_THREAD {
                            let size = 16 + (i % 7) * 24;
                            let (p, error) = temp.allocate(size, 64);
                            assert_eq!(error, TEMPALLOC_OK);
                            assert_eq!(p as usize % 64, 0);
                            // SAFETY: `p` is `size` writable bytes, disjoint
                            // from every other live allocation.
                            unsafe { ptr::write_bytes(p, t + 1, size) };
                            mine.push((p as usize, size));
                        }
                        mine
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        // Every byte still holds what its thread wrote: no overlap.
        for (t, mine) in buffers.iter().enumerate() {
            for &(p, size) in mine {
                // SAFETY: the buffer is live until the reset below.
                let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, size) };
                assert!(bytes.iter().all(|&b| b == t as u8 + 1));
            }
        }
        temp.reset();
    }
    assert_eq!(temp.stats().allocations, 3 * 2 * PER_THREAD as u64);
}

// ---------------------------------------------------------------------------
// The header is cbindgen's output for the exports.
// ---------------------------------------------------------------------------

/// Everything the C API declares, in C spelling.
/// The header is generated by cbindgen from `src/capi.rs` with
/// `cbindgen.toml`; the checked-in copy must be exactly that output.
// Not under Miri (parsing Rust source there takes minutes), nor where
// Cargo.toml leaves cbindgen out (`tempalloc_os_tests`): every other
// `--features capi` test build runs it.
#[test]
#[cfg(not(any(miri, tempalloc_os_tests)))]
fn header_is_what_cbindgen_generates() {
    let root = Path::new(MANIFEST_DIR);
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/capi.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8");
    let path = root.join("include/tempalloc.h");
    if std::env::var_os("TEMPALLOC_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/tempalloc.h");
    }
    let checked_in = std::fs::read_to_string(&path).expect("include/tempalloc.h");
    assert!(
        checked_in == generated,
        "include/tempalloc.h differs from what cbindgen generates from src/capi.rs; \
         regenerate it with `TEMPALLOC_BLESS=1 cargo test --features capi --test all \
         capi::abi::header_is_what_cbindgen_generates`"
    );
}

// ---------------------------------------------------------------------------
// The C++ adapter, built with g++ against the static library.
// ---------------------------------------------------------------------------

/// Runs `cmd`, returning its output; fails the test with stderr if it fails.
pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{text}",
        out.status
    );
    text
}

/// The compiler named by `var` (else `default`). A missing one fails the
/// test, saying how to get one: a C test that passed without compiling
/// anything would claim what it never checked. (The tests that call it are
/// ignored, and say so, where the link line is not set up: off Unix.)
pub(crate) fn compiler(var: &str, default: &str) -> String {
    let cc = std::env::var(var).unwrap_or_else(|_| default.to_string());
    if let Err(e) = Command::new(&cc).arg("--version").output() {
        panic!(
            "`{cc}` not found ({e}): install it or set {var}; \
             `--skip capi::abi::c_ --skip capi::abi::cpp_ --skip capi::docs::every_` runs the other tests"
        );
    }
    cc
}

/// The crate's static library with the C API, built once per test run by a
/// nested cargo in a target dir of its own (the outer `cargo test` holds the
/// lock on the main one). Incremental: only the first run pays for the
/// dependencies.
fn static_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-target");
        run(Command::new(env!("CARGO"))
            .current_dir(MANIFEST_DIR)
            .args(["rustc", "--quiet", "--lib", "--features", "capi"])
            .args(["--crate-type", "staticlib", "--target-dir"])
            .arg(&target));
        target.join("debug").join("libtempalloc.a")
    })
}

/// Compiles `source` with `cc` and `flags` against the static library, runs
/// it, and checks it passed.
fn build_and_run(cc: &str, flags: &[&str], source: &str, exe: &str) {
    let output = build_and_run_file(cc, flags, &Path::new(MANIFEST_DIR).join(source), exe);
    println!("{output}");
    assert!(output.contains("all checks passed"), "{output}");
}

/// Compiles `source` with `cc` and `flags` (and `include/` on the include
/// path) against the static library, runs it and returns its output; fails
/// the test if any step fails or the program exits non-zero.
pub(crate) fn build_and_run_file(cc: &str, flags: &[&str], source: &Path, exe: &str) -> String {
    let root = Path::new(MANIFEST_DIR);
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(exe);
    let mut cmd = Command::new(cc);
    cmd.args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(root.join("include"))
        .arg(source)
        .arg(static_lib())
        .arg("-o")
        .arg(&exe);
    // What `rustc --print native-static-libs` lists for std on Linux
    // (libgcc_s, libc and libm come with the compiler driver's defaults).
    if cfg!(target_os = "linux") {
        cmd.args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"]);
    }
    run(&mut cmd);
    run(&mut Command::new(&exe))
}

#[test]
#[cfg_attr(miri, ignore = "runs a C++ compiler")]
#[cfg_attr(not(unix), ignore = "the C++ link line is only set up for Unix")]
fn cpp_adapter_test_passes() {
    let cxx = compiler("CXX", "g++");
    build_and_run(
        &cxx,
        &["-std=c++17"],
        "tests/cpp/adapter_test.cpp",
        "adapter_test",
    );
}

/// A header of another version than the library makes
/// the adapter refuse at construction, with an error code.
#[test]
#[cfg_attr(miri, ignore = "runs a C++ compiler")]
#[cfg_attr(not(unix), ignore = "the C++ link line is only set up for Unix")]
fn cpp_adapter_refuses_a_header_of_another_version() {
    let cxx = compiler("CXX", "g++");
    build_and_run(
        &cxx,
        &["-std=c++17"],
        "tests/cpp/version_mismatch.cpp",
        "version_mismatch",
    );
}

/// The header's version constants and the library's
/// `tempalloc_version` are Cargo.toml's version.
#[test]
fn the_versions_are_cargo_tomls() {
    let parse = |s: &str| s.parse::<u32>().expect("a number");
    let major = parse(env!("CARGO_PKG_VERSION_MAJOR"));
    let minor = parse(env!("CARGO_PKG_VERSION_MINOR"));
    let patch = parse(env!("CARGO_PKG_VERSION_PATCH"));
    assert_eq!(
        (
            TEMPALLOC_VERSION_MAJOR,
            TEMPALLOC_VERSION_MINOR,
            TEMPALLOC_VERSION_PATCH
        ),
        (major, minor, patch),
        "update the TEMPALLOC_VERSION_* constants in src/capi.rs with Cargo.toml's version"
    );
    assert_eq!(TEMPALLOC_VERSION, major * 10000 + minor * 100 + patch);
    assert_eq!(tempalloc_version(), TEMPALLOC_VERSION);
}

/// The misuses a checked library turns into error codes,
/// from C (the debug library is a checked one; CI runs the same program on
/// the release `capi-checked` library).
#[test]
#[cfg_attr(miri, ignore = "runs a C compiler")]
#[cfg_attr(not(unix), ignore = "the C link line is only set up for Unix")]
fn c_checked_test_passes() {
    let cc = compiler("CC", "cc");
    build_and_run(
        &cc,
        &["-std=c99", "-pedantic"],
        "tests/c/checked.c",
        "c_checked",
    );
}

#[test]
#[cfg_attr(miri, ignore = "runs a C compiler")]
#[cfg_attr(not(unix), ignore = "the C link line is only set up for Unix")]
fn c_smoke_test_passes() {
    let cc = compiler("CC", "cc");
    build_and_run(
        &cc,
        &["-std=c99", "-pedantic"],
        "tests/c/smoke.c",
        "c_smoke",
    );
}

/// Every Rust item the header names (`Type::item`)
/// exists in the file that defines the type (it once named
/// `CachingConfig::max_cached_bytes`, which never existed).
#[test]
#[cfg_attr(miri, ignore = "reads the source tree, which Miri's isolation forbids")]
fn the_header_names_only_rust_items_that_exist() {
    let root = Path::new(MANIFEST_DIR);
    let header = std::fs::read_to_string(root.join("include/tempalloc.h")).expect("header");
    let mut sources = Vec::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).expect("src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                sources.push(std::fs::read_to_string(&path).expect("source"));
            }
        }
    }
    let mut checked = 0;
    for word in header.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
        let Some((ty, item)) = word.split_once("::") else {
            continue;
        };
        // The crate's own types start upper case (`isize::MAX` is core's).
        if !ty.starts_with(char::is_uppercase) || item.is_empty() || item.contains(':') {
            continue;
        }
        let definers: Vec<&String> = sources
            .iter()
            .filter(|s| s.contains(&format!("struct {ty} ")) || s.contains(&format!("enum {ty} ")))
            .collect();
        assert!(
            !definers.is_empty(),
            "the header names `{word}`: no type `{ty}` in src/"
        );
        let defined = definers.iter().any(|s| {
            [
                format!("fn {item}("),
                format!("fn {item}<"),
                format!("pub {item}:"),
                format!("    {item} {{"),
                format!("    {item},"),
            ]
            .iter()
            .any(|pattern| s.contains(pattern.as_str()))
        });
        assert!(
            defined,
            "the header names `{word}`, which `{ty}` does not have"
        );
        checked += 1;
    }
    assert!(
        checked > 5,
        "the scan found the header's Rust names ({checked})"
    );
}
