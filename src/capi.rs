//! The C ABI (cargo feature `capi`): a [`CachingAllocator`] and a shared
//! [`BlockCache`] behind opaque handles, for runtimes written in C or C++.
//!
//! The checked-in header `include/tempalloc.h` is generated from this module
//! by cbindgen (`cbindgen.toml`; a test fails when it differs, and
//! `TEMPALLOC_BLESS=1` rewrites it), and `include/tempalloc.hpp`
//! adapts it to a C++ temp-allocator base class. `docs/capi.md` has the
//! ownership rules and the build commands.
//!
//! Rules every function follows:
//!
//! - **No panics cross the boundary.** Every function that reaches allocator
//!   code runs it under [`std::panic::catch_unwind`]; a panic (none is
//!   expected) becomes [`TEMPALLOC_ERROR_INTERNAL`]. The other two
//!   (`tempalloc_config_default`, `tempalloc_error_message`) cannot panic.
//! - **NULL is an error code, never a crash.** A NULL handle or output
//!   struct gives [`TEMPALLOC_ERROR_NULL_ARGUMENT`]; a NULL `error` out
//!   parameter is allowed and ignored; `*_destroy(NULL)` does nothing.
//! - **No global error state.** Errors come back as a return value or
//!   through the caller's `error` out parameter, so threads never see each
//!   other's errors.
//! - **Thread safety** is stated per function: `tempalloc_allocate`,
//!   `tempalloc_allocator_stats` and every block cache function may run concurrently;
//!   `tempalloc_reset`, `tempalloc_release` and `*_destroy` need exclusive use
//!   of their handle (no other call on it in flight).
//!
//! Names follow C conventions (`tempalloc_config`, not `TempallocConfig`) so
//! the header and this module read the same.
#![allow(non_camel_case_types)]

mod handles;

use core::ffi::{CStr, c_char};
use core::ptr;

use handles::{guard, on_cache, on_exclusive, on_shared};
pub use handles::{tempalloc_allocator, tempalloc_block_cache};

use crate::Error;
#[cfg(doc)]
use crate::{BlockCache, CachingAllocator};

/// A status code: [`TEMPALLOC_OK`] or one of the `TEMPALLOC_ERROR_*`
/// constants. A plain integer (not a Rust enum), so a code C made up is
/// still a valid value: [`tempalloc_error_message`] answers it too.
pub type tempalloc_error = i32;

/// Success.
pub const TEMPALLOC_OK: tempalloc_error = 0;
/// A required pointer argument (a handle or an output struct) was NULL.
pub const TEMPALLOC_ERROR_NULL_ARGUMENT: tempalloc_error = 1;
/// [`Error::InvalidAlignment`]: the alignment is not a power of two.
pub const TEMPALLOC_ERROR_INVALID_ALIGNMENT: tempalloc_error = 2;
/// [`Error::SizeOverflow`]: size rounded up to the alignment exceeds `isize::MAX`.
pub const TEMPALLOC_ERROR_SIZE_OVERFLOW: tempalloc_error = 3;
/// [`Error::OutOfMemory`]: the system allocator could not provide the memory.
pub const TEMPALLOC_ERROR_OUT_OF_MEMORY: tempalloc_error = 4;
/// [`Error::BudgetExceeded`]: the request would pass the hard limit.
pub const TEMPALLOC_ERROR_BUDGET_EXCEEDED: tempalloc_error = 5;
/// [`Error::NoTempAllocator`] (not produced by the C API; mirrored for completeness).
pub const TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR: tempalloc_error = 6;
/// [`Error::StaleCheckpoint`]: [`tempalloc_rewind`] got a checkpoint that a
/// reset or release after it consumed.
pub const TEMPALLOC_ERROR_STALE_CHECKPOINT: tempalloc_error = 7;
/// [`Error::CanaryCorrupted`]: a write ran past the end of a scratch buffer
/// (with `debug_checks`; from [`tempalloc_check`]).
pub const TEMPALLOC_ERROR_CANARY_CORRUPTED: tempalloc_error = 8;
/// A bug in tempalloc: a panic was caught at the boundary.
pub const TEMPALLOC_ERROR_INTERNAL: tempalloc_error = 9;
/// A flag field of a struct holds a value other than 0 or 1.
pub const TEMPALLOC_ERROR_INVALID_ARGUMENT: tempalloc_error = 10;
/// In checked builds (debug, or the `capi-checked` feature): the handle is
/// not a live handle of the expected kind (a destroyed handle, or another
/// kind of handle), where that can be seen.
pub const TEMPALLOC_ERROR_INVALID_HANDLE: tempalloc_error = 11;
/// [`Error::FrameSuspended`] (not produced by the C API, which has no
/// frames; mirrored for completeness).
pub const TEMPALLOC_ERROR_FRAME_SUSPENDED: tempalloc_error = 12;
/// In checked builds (debug, or the `capi-checked` feature): a call that
/// needs the allocator to itself (reset, release, checkpoint, rewind)
/// overlapped another call on it, or a call came while one of those ran;
/// the call refused did nothing.
pub const TEMPALLOC_ERROR_CONCURRENT_USE: tempalloc_error = 13;

/// The C++ adapter's code for a header that does not match the library
/// ([`tempalloc_version`] differs from `TEMPALLOC_VERSION`): the adapter
/// makes no allocator. The library itself never returns it.
pub const TEMPALLOC_ERROR_VERSION_MISMATCH: tempalloc_error = 14;
/// [`Error::ForeignCheckpoint`]: [`tempalloc_rewind`] got a checkpoint of
/// another allocator (or a made-up one, such as a zeroed token).
pub const TEMPALLOC_ERROR_FOREIGN_CHECKPOINT: tempalloc_error = 15;
/// [`Error::CheckpointClosed`]: [`tempalloc_rewind`] got a checkpoint of
/// this allocator, taken since its last reset, that a rewind to it or to an
/// earlier checkpoint already consumed (a second rewind to it, say), or a
/// made-up one.
pub const TEMPALLOC_ERROR_CHECKPOINT_CLOSED: tempalloc_error = 16;

/// The major version of the crate the header was generated from (Cargo.toml's
/// `version`; a test keeps them equal).
pub const TEMPALLOC_VERSION_MAJOR: u32 = 0;
/// The minor version: before 1.0 a new minor version may change the ABI.
pub const TEMPALLOC_VERSION_MINOR: u32 = 1;
/// The patch version.
pub const TEMPALLOC_VERSION_PATCH: u32 = 0;
/// `MAJOR * 10000 + MINOR * 100 + PATCH` of the header, what
/// [`tempalloc_version`] returns for the library (mimalloc's
/// `MI_MALLOC_VERSION` and `mi_version()` convention).
pub const TEMPALLOC_VERSION: u32 = 100;

/// The version of the library linked, `MAJOR * 10000 + MINOR * 100 + PATCH`:
/// compare it with the header's `TEMPALLOC_VERSION` to catch a header that
/// does not match the library (the C++ adapter does at construction).
///
/// Thread safety: any thread, any time.
#[unsafe(no_mangle)]
pub extern "C" fn tempalloc_version() -> u32 {
    // From Cargo.toml, not the constants: a library built from another
    // version than the header says so.
    const fn parse(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut n = 0;
        while i < b.len() {
            n = n * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    const VERSION: u32 = parse(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + parse(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + parse(env!("CARGO_PKG_VERSION_PATCH"));
    VERSION
}

/// The code C sees for `error`.
fn code(error: Error) -> tempalloc_error {
    // No wildcard arm: a new `Error` variant must get its own code here.
    match error {
        Error::InvalidAlignment { .. } => TEMPALLOC_ERROR_INVALID_ALIGNMENT,
        Error::SizeOverflow { .. } => TEMPALLOC_ERROR_SIZE_OVERFLOW,
        Error::OutOfMemory { .. } => TEMPALLOC_ERROR_OUT_OF_MEMORY,
        Error::BudgetExceeded { .. } => TEMPALLOC_ERROR_BUDGET_EXCEEDED,
        Error::NoTempAllocator => TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR,
        Error::StaleCheckpoint { .. } => TEMPALLOC_ERROR_STALE_CHECKPOINT,
        Error::ForeignCheckpoint => TEMPALLOC_ERROR_FOREIGN_CHECKPOINT,
        Error::CheckpointClosed { .. } => TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
        Error::CanaryCorrupted { .. } => TEMPALLOC_ERROR_CANARY_CORRUPTED,
        Error::FrameSuspended { .. } => TEMPALLOC_ERROR_FRAME_SUSPENDED,
    }
}

// The submodules that declare what C sees are named by `#[path]`: cbindgen
// generates `include/tempalloc.h` from this file, and finds a submodule of
// it only through the attribute. They stand where their declarations go in
// the header.

// The structs C fills and reads: config, stats, checkpoint token, error
// detail.
#[path = "capi/types.rs"]
mod types;
pub use types::{
    tempalloc_checkpoint_token, tempalloc_config, tempalloc_config_default, tempalloc_error_detail,
    tempalloc_stats,
};

/// Stores `value` in `*out` when `out` is not NULL.
///
/// # Safety
///
/// `out` is NULL or valid for a write of one `tempalloc_error`.
unsafe fn put(out: *mut tempalloc_error, value: tempalloc_error) {
    if !out.is_null() {
        // SAFETY: non-NULL, and the caller guarantees it is writable.
        unsafe { out.write(value) };
    }
}

/// The value of `result`, or `failed` (NULL, 0) when it failed, with the
/// status stored in `*error`: how every call that returns a handle or a
/// size answers.
///
/// # Safety
///
/// `error` is NULL or valid for a write of one `tempalloc_error`.
unsafe fn answer<T>(
    result: Result<T, tempalloc_error>,
    failed: T,
    error: *mut tempalloc_error,
) -> T {
    let (value, code) = match result {
        Ok(value) => (value, TEMPALLOC_OK),
        Err(code) => (failed, code),
    };
    // SAFETY: by the caller.
    unsafe { put(error, code) };
    value
}

/// Turns a result into its status code, storing the value through `out`.
fn status<T>(result: Result<T, tempalloc_error>, out: Option<&mut T>) -> tempalloc_error {
    match result {
        Ok(value) => {
            if let Some(out) = out {
                *out = value;
            }
            TEMPALLOC_OK
        }
        Err(e) => e,
    }
}

// The functions on a `tempalloc_allocator` handle.
#[path = "capi/allocator.rs"]
mod allocator;
pub use allocator::{
    tempalloc_allocate, tempalloc_allocate_detailed, tempalloc_allocator_create,
    tempalloc_allocator_create_with_cache, tempalloc_allocator_destroy, tempalloc_allocator_stats,
    tempalloc_check, tempalloc_checkpoint, tempalloc_release, tempalloc_reset, tempalloc_rewind,
};

// The functions on a `tempalloc_block_cache` handle.
#[path = "capi/block_cache.rs"]
mod block_cache;
pub use block_cache::{
    tempalloc_block_cache_create, tempalloc_block_cache_destroy, tempalloc_block_cache_evict_idle,
    tempalloc_block_cache_idle_bytes, tempalloc_block_cache_stats,
};

/// Writes the English message for `detail`, with its numbers (the message
/// a Rust caller sees, "budget exceeded: 134217728 bytes requested while 0
/// bytes are held, limit is 67108864 bytes"), into `buf`, as `snprintf`
/// does: at most `len - 1` bytes and a NUL (nothing when `len` is 0 or
/// `buf` NULL). Returns the message's full length without the NUL, so a
/// return of `len` or more means it was cut. A NULL `detail` describes
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`]; a code without numbers gets
/// [`tempalloc_error_message`]'s text.
///
/// Thread safety: any thread, any time.
///
/// # Safety
///
/// `detail` is NULL or valid to read; `buf` is NULL or valid for `len`
/// bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_error_describe(
    detail: *const tempalloc_error_detail,
    buf: *mut c_char,
    len: usize,
) -> usize {
    // SAFETY: the caller guarantees `detail` is NULL or valid to read.
    let detail = unsafe { detail.as_ref() }
        .copied()
        .unwrap_or(tempalloc_error_detail {
            code: TEMPALLOC_ERROR_NULL_ARGUMENT,
            ..tempalloc_error_detail::default()
        });
    let written = guard(|| {
        Ok(match detail.error() {
            Some(e) => e.to_string(),
            None => message(detail.code).to_string_lossy().into_owned(),
        })
    });
    let text = written.unwrap_or_default();
    let bytes = text.as_bytes();
    if !buf.is_null() && len > 0 {
        let n = bytes.len().min(len - 1);
        // SAFETY: the caller guarantees `len` writable bytes at `buf`, and
        // `n + 1 <= len`; `bytes` is a separate allocation.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    bytes.len()
}

/// A static, NUL-terminated English description of `code` (never NULL, never
/// to be freed). Unknown codes get "unknown tempalloc error code".
///
/// Thread safety: any thread, any time.
#[unsafe(no_mangle)]
pub extern "C" fn tempalloc_error_message(code: tempalloc_error) -> *const c_char {
    message(code).as_ptr()
}

/// The static description of `code`.
fn message(code: tempalloc_error) -> &'static CStr {
    match code {
        TEMPALLOC_OK => c"success",
        TEMPALLOC_ERROR_NULL_ARGUMENT => c"a required pointer argument was NULL",
        TEMPALLOC_ERROR_INVALID_ALIGNMENT => c"invalid alignment: must be a power of two",
        TEMPALLOC_ERROR_SIZE_OVERFLOW => c"size overflow: size aligned up exceeds isize::MAX",
        TEMPALLOC_ERROR_OUT_OF_MEMORY => c"out of memory: the system could not provide the memory",
        TEMPALLOC_ERROR_BUDGET_EXCEEDED => {
            c"budget exceeded: the request would pass the hard limit"
        }
        TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR => c"no temp allocator",
        TEMPALLOC_ERROR_STALE_CHECKPOINT => {
            c"stale checkpoint: a reset or release came after it and consumed it"
        }
        TEMPALLOC_ERROR_CANARY_CORRUPTED => {
            c"canary corrupted: a write ran past the end of a scratch buffer"
        }
        TEMPALLOC_ERROR_INTERNAL => c"internal error: a panic was caught in tempalloc (a bug)",
        TEMPALLOC_ERROR_INVALID_ARGUMENT => c"invalid argument: a flag field is neither 0 nor 1",
        TEMPALLOC_ERROR_INVALID_HANDLE => {
            c"invalid handle: destroyed, or not a handle of this kind (checked builds)"
        }
        TEMPALLOC_ERROR_FRAME_SUSPENDED => c"frame suspended: not produced by the C API",
        TEMPALLOC_ERROR_VERSION_MISMATCH => {
            c"version mismatch: tempalloc.h is not the header of the library linked"
        }
        TEMPALLOC_ERROR_CONCURRENT_USE => {
            c"concurrent use: a reset, release, checkpoint or rewind overlapped another call on the allocator (checked builds)"
        }
        TEMPALLOC_ERROR_FOREIGN_CHECKPOINT => {
            c"foreign checkpoint: it was taken on another allocator"
        }
        TEMPALLOC_ERROR_CHECKPOINT_CLOSED => {
            c"closed checkpoint: a rewind to it or to an earlier checkpoint already consumed it"
        }
        _ => c"unknown tempalloc error code",
    }
}

#[cfg(test)]
#[path = "capi/tests.rs"]
mod tests;
