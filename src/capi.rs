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

use core::alloc::Layout;
use core::ffi::{CStr, c_char, c_void};
use core::ptr::{self, NonNull};
use std::sync::Arc;

use handles::{guard, on_cache, on_exclusive, on_shared};
pub use handles::{tempalloc_allocator, tempalloc_block_cache};

use crate::caching::CheckpointParts;
use crate::{BlockCache, CachingAllocator, CachingConfig, Error, Stats, TempAllocator};

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

/// How to build an allocator. Start from [`tempalloc_config_default`] and
/// change the fields you need; zero fields mean "the default".
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct tempalloc_config {
    /// Budget for idle memory of the allocator's own cache, in bytes: what it
    /// keeps for reuse after a release rather than give back to the system.
    /// Ignored with a shared cache.
    pub idle_budget: usize,
    /// Hard limit on all memory the allocator takes from the system; 0
    /// means no limit. Honoured with a shared cache too: the allocator's own
    /// limit within the cache's (a session's cap within the sessions'
    /// budget). See [`CachingConfig::max_bytes`] for the rule it serves.
    pub max_bytes: usize,
    /// The least memory a thread's region makes usable when it takes a
    /// chunk (its first commit, or heap block); 0, the default, means what
    /// the region's first request needs, in whole pages.
    pub min_block_size: usize,
    /// Requests of at least this many bytes get a block of their own; 0
    /// means never.
    pub dedicated_threshold: usize,
    /// 1: touch every page of a new block when it is taken from the system;
    /// 0: don't. Any other value is [`TEMPALLOC_ERROR_INVALID_ARGUMENT`].
    pub prefault: u8,
    /// 1: align reservations (and blocks of a huge page and more) to the
    /// transparent huge page size the kernel reports and ask for huge pages
    /// on them (Linux and Android; 2 MiB at 4 KiB pages); 0: don't. Any
    /// other value is an error.
    pub huge_pages: u8,
    /// 1: canaries after every buffer and poison on reset, checked by
    /// [`tempalloc_check`] and at every reset (slower); 0: off, the default
    /// in every build of the library. Any other value is an error.
    pub debug_checks: u8,
}

/// A C flag: 0 or 1, anything else an error (C may hand us any byte).
fn flag(value: u8) -> Result<bool, tempalloc_error> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(TEMPALLOC_ERROR_INVALID_ARGUMENT),
    }
}

impl tempalloc_config {
    fn to_config(self) -> Result<CachingConfig, tempalloc_error> {
        let default = CachingConfig::default();
        let nonzero = |n: usize| (n != 0).then_some(n);
        Ok(default
            .max_bytes(nonzero(self.max_bytes))
            .min_block_size(nonzero(self.min_block_size).unwrap_or(default.min_block_size))
            .dedicated_threshold(nonzero(self.dedicated_threshold))
            .prefault(flag(self.prefault)?)
            .huge_pages(flag(self.huge_pages)?)
            .debug_checks(flag(self.debug_checks)?))
    }

    /// The configuration `config` points to, or the default for NULL.
    fn read(config: Option<Self>) -> Result<CachingConfig, tempalloc_error> {
        config.map_or_else(|| Ok(CachingConfig::default()), Self::to_config)
    }
}

/// A snapshot of an allocator's (or a block cache's) counters: the fields of
/// [`Stats`], with the same meanings.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct tempalloc_stats {
    /// Scratch requests served.
    pub allocations: u64,
    /// Bytes asked for by those requests.
    pub bytes_requested: u64,
    /// Calls to reset.
    pub resets: u64,
    /// Calls into the system allocator that reserved memory.
    pub system_allocations: u64,
    /// Calls into the system allocator that returned memory.
    pub system_frees: u64,
    /// Bytes currently reserved from the system.
    pub bytes_held: usize,
    /// The most bytes live at once between two resets.
    pub high_water: usize,
    /// Blocks served from a block cache without a system call.
    pub cache_hits: u64,
    /// Blocks that needed a system allocation.
    pub cache_misses: u64,
    /// Bytes live now: 0 right after a reset.
    pub bytes_live: usize,
    /// The most bytes live at once in the last window.
    pub window_high_water: usize,
    /// Buffers found written past their end (with `debug_checks`).
    pub canary_violations: u64,
}

impl From<Stats> for tempalloc_stats {
    fn from(s: Stats) -> Self {
        tempalloc_stats {
            allocations: s.allocations,
            bytes_requested: s.bytes_requested,
            resets: s.resets,
            system_allocations: s.system_allocations,
            system_frees: s.system_frees,
            bytes_held: s.bytes_held,
            high_water: s.high_water,
            cache_hits: s.cache_hits,
            cache_misses: s.cache_misses,
            bytes_live: s.bytes_live,
            window_high_water: s.window_high_water,
            canary_violations: s.canary_violations,
        }
    }
}

impl From<crate::CacheStats> for tempalloc_stats {
    fn from(s: crate::CacheStats) -> Self {
        tempalloc_stats {
            system_allocations: s.system_allocations,
            system_frees: s.system_frees,
            bytes_held: s.bytes_held,
            cache_hits: s.hits,
            cache_misses: s.misses,
            ..tempalloc_stats::default()
        }
    }
}

/// A checkpoint of a [`tempalloc_allocator`], from [`tempalloc_checkpoint`],
/// consumed by [`tempalloc_rewind`]: the fields of the allocator's own
/// [`Checkpoint`](crate::Checkpoint). Plain data: copying or forging one is
/// harmless (the rewind checks every field against the allocator's books of
/// open checkpoints and refuses what they do not hold).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct tempalloc_checkpoint_token {
    /// The allocator it belongs to (never 0).
    pub allocator: u64,
    /// How many checkpoints were open when it was taken.
    pub depth: usize,
    /// Which checkpoint it is.
    pub serial: u64,
    /// The allocator's reset count when it was taken (resets and releases
    /// consume checkpoints): says whether a refused rewind came after a
    /// reset or after an outer rewind.
    pub resets: u64,
}

impl From<crate::Checkpoint> for tempalloc_checkpoint_token {
    fn from(cp: crate::Checkpoint) -> Self {
        let CheckpointParts {
            allocator,
            resets,
            depth,
            serial,
        } = cp.into_parts();
        tempalloc_checkpoint_token {
            allocator,
            depth,
            serial,
            resets,
        }
    }
}

impl From<tempalloc_checkpoint_token> for crate::Checkpoint {
    fn from(token: tempalloc_checkpoint_token) -> Self {
        let tempalloc_checkpoint_token {
            allocator,
            depth,
            serial,
            resets,
        } = token;
        crate::Checkpoint::from_parts(CheckpointParts {
            allocator,
            resets,
            depth,
            serial,
        })
    }
}

/// Why a call failed, with the numbers: what [`tempalloc_allocate_detailed`]
/// fills in, and what [`tempalloc_error_describe`] turns into the message a
/// Rust caller would see. Only the fields of the code's row are set; the
/// others are 0.
///
/// | `code` | fields |
/// |---|---|
/// | `TEMPALLOC_ERROR_BUDGET_EXCEEDED` | `requested`, `held`, `limit` |
/// | `TEMPALLOC_ERROR_OUT_OF_MEMORY` | `size`, `align` (what was asked of the system) |
/// | `TEMPALLOC_ERROR_SIZE_OVERFLOW` | `size`, `align` |
/// | `TEMPALLOC_ERROR_INVALID_ALIGNMENT` | `align` |
/// | any other | none |
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct tempalloc_error_detail {
    /// The status code, the one the plain call returns ([`TEMPALLOC_OK`] on
    /// success).
    pub code: tempalloc_error,
    /// Bytes the request asked for.
    pub requested: usize,
    /// Bytes held against the limit when the request came.
    pub held: usize,
    /// The limit, in bytes.
    pub limit: usize,
    /// Bytes asked (of the system, for an out-of-memory error).
    pub size: usize,
    /// The alignment asked.
    pub align: usize,
}

impl tempalloc_error_detail {
    /// The detail of `error`.
    fn of(error: Error) -> Self {
        let detail = tempalloc_error_detail {
            code: code(error),
            ..Self::default()
        };
        match error {
            Error::BudgetExceeded {
                requested,
                held,
                limit,
            } => tempalloc_error_detail {
                requested,
                held,
                limit,
                ..detail
            },
            Error::OutOfMemory { size, align } | Error::SizeOverflow { size, align } => {
                tempalloc_error_detail {
                    size,
                    align,
                    ..detail
                }
            }
            Error::InvalidAlignment { align } => tempalloc_error_detail { align, ..detail },
            _ => detail,
        }
    }

    /// The Rust error this detail describes, for the codes that carry
    /// numbers.
    fn error(&self) -> Option<Error> {
        let (size, align) = (self.size, self.align);
        Some(match self.code {
            TEMPALLOC_ERROR_BUDGET_EXCEEDED => Error::BudgetExceeded {
                requested: self.requested,
                held: self.held,
                limit: self.limit,
            },
            TEMPALLOC_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { size, align },
            TEMPALLOC_ERROR_SIZE_OVERFLOW => Error::SizeOverflow { size, align },
            TEMPALLOC_ERROR_INVALID_ALIGNMENT => Error::InvalidAlignment { align },
            _ => return None,
        })
    }
}

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

/// The configuration [`CachingAllocator::new`] uses: no idle budget, no hard
/// limit, first commits sized to the first request (`min_block_size` 0), no
/// dedicated blocks, no prefault, no huge pages, no debug checks (in every
/// build of the library).
///
/// Thread safety: any thread, any time.
#[unsafe(no_mangle)]
pub extern "C" fn tempalloc_config_default() -> tempalloc_config {
    let c = CachingConfig::default();
    tempalloc_config {
        idle_budget: 0,
        max_bytes: c.max_bytes.unwrap_or(0),
        min_block_size: c.min_block_size,
        dedicated_threshold: c.dedicated_threshold.unwrap_or(0),
        prefault: c.prefaults().into(),
        huge_pages: c.uses_huge_pages().into(),
        debug_checks: c.debug_checks.into(),
    }
}

/// Creates an allocator with a block cache of its own, limited by
/// `config->idle_budget` and `config->max_bytes`. A NULL `config`
/// means [`tempalloc_config_default`]. Returns the handle, or NULL with the
/// code in `*error` (`error` may be NULL). Free it with
/// [`tempalloc_allocator_destroy`].
///
/// Thread safety: any thread, any time.
///
/// # Safety
///
/// `config` is NULL or points to a valid `tempalloc_config`; `error` is NULL
/// or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_allocator_create(
    config: *const tempalloc_config,
    error: *mut tempalloc_error,
) -> *mut tempalloc_allocator {
    // SAFETY: the caller guarantees `config` is NULL or valid to read.
    let config = unsafe { config.as_ref() }.copied();
    let result = guard(|| {
        let idle = config.map_or(0, |c| c.idle_budget);
        let config = tempalloc_config::read(config)?;
        let cache = Arc::new(BlockCache::with_idle_budget(idle));
        handles::new_allocator(
            CachingAllocator::try_with_cache(cache, config)
                .map_err(|_| TEMPALLOC_ERROR_OUT_OF_MEMORY)?,
        )
    });
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { answer(result, ptr::null_mut(), error) }
}

/// Creates an allocator that takes and gives back its blocks through the
/// shared `cache`, under the cache's limits and its own `config->max_bytes`
/// (a session's cap within the shared budget; `config->idle_budget` is
/// the cache's to set, and not used here). A NULL `config` means
/// [`tempalloc_config_default`]. Returns the handle, or NULL with the code in
/// `*error`: [`TEMPALLOC_ERROR_NULL_ARGUMENT`] when `cache` is NULL. The
/// allocator holds its own reference to the cache.
///
/// Thread safety: any thread, any time, also concurrently with other calls
/// on `cache`.
///
/// # Safety
///
/// `cache` is NULL or a live handle from [`tempalloc_block_cache_create`];
/// `config` is NULL or valid to read; `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_allocator_create_with_cache(
    cache: *const tempalloc_block_cache,
    config: *const tempalloc_config,
    error: *mut tempalloc_error,
) -> *mut tempalloc_allocator {
    // SAFETY: the caller guarantees `config` is NULL or valid to read, and
    // `cache` NULL or a live handle, which concurrent calls share. The
    // reference is cloned out, so no lock on the cache handle is held while
    // the new handle is made.
    let (cache, config) = unsafe {
        (
            on_cache(cache, |c| Ok(Arc::clone(c))),
            config.as_ref().copied(),
        )
    };
    let result = guard(|| {
        let cache = cache?;
        let config = tempalloc_config::read(config)?;
        handles::new_allocator(
            CachingAllocator::try_with_cache(cache, config)
                .map_err(|_| TEMPALLOC_ERROR_OUT_OF_MEMORY)?,
        )
    });
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { answer(result, ptr::null_mut(), error) }
}

/// Destroys an allocator: every pointer it handed out becomes invalid and
/// its blocks go back to its cache (or the system). NULL does nothing.
///
/// Thread safety: needs exclusive use — no other call on `alloc` may be in
/// flight or follow.
///
/// # Safety
///
/// `alloc` is NULL or a live handle from `tempalloc_allocator_create*`,
/// not used again afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_allocator_destroy(alloc: *mut tempalloc_allocator) {
    // SAFETY: the caller gives up a handle that is NULL or live (checked in
    // checked builds, where anything else is left alone).
    unsafe { handles::destroy(alloc) };
}

/// Hands out `size` bytes aligned to `alignment` (a power of two), valid
/// until the next [`tempalloc_reset`], [`tempalloc_release`] or
/// [`tempalloc_allocator_destroy`] on `alloc`. Never free it yourself. A
/// zero `size` gives a non-NULL, aligned pointer that must not be
/// dereferenced.
///
/// Returns the pointer and stores [`TEMPALLOC_OK`] in `*error`, or returns
/// NULL and stores the reason: [`TEMPALLOC_ERROR_NULL_ARGUMENT`] (NULL
/// `alloc`), [`TEMPALLOC_ERROR_INVALID_ALIGNMENT`],
/// [`TEMPALLOC_ERROR_SIZE_OVERFLOW`], [`TEMPALLOC_ERROR_OUT_OF_MEMORY`] or
/// [`TEMPALLOC_ERROR_BUDGET_EXCEEDED`]. `error` may be NULL.
///
/// Thread safety: may be called concurrently from several threads on one
/// allocator (each thread bump-allocates in a block of its own), and
/// concurrently with [`tempalloc_allocator_stats`]; not concurrently with reset,
/// release or destroy of the same allocator.
///
/// # Safety
///
/// `alloc` is NULL or a live handle; `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_allocate(
    alloc: *const tempalloc_allocator,
    size: usize,
    alignment: usize,
    error: *mut tempalloc_error,
) -> *mut c_void {
    // SAFETY: the caller's guarantees are `fast`'s.
    if let Some(p) = unsafe { fast(alloc, size, alignment) } {
        // SAFETY: the caller guarantees `error` is NULL or writable.
        unsafe { put(error, TEMPALLOC_OK) };
        return p;
    }
    // SAFETY: as above.
    unsafe { allocate_cold(alloc, size, alignment, error) }
}

/// [`tempalloc_allocate`] past its fast path. Apart, and a tail call, so
/// that the fast path saves no register and sets up no frame: the handle
/// check, the layout and the error are made here.
///
/// # Safety
///
/// As [`tempalloc_allocate`].
#[cold]
#[inline(never)]
unsafe fn allocate_cold(
    alloc: *const tempalloc_allocator,
    size: usize,
    alignment: usize,
    error: *mut tempalloc_error,
) -> *mut c_void {
    // SAFETY: the caller's guarantees are `allocate`'s.
    match unsafe { allocate(alloc, size, alignment) } {
        Ok(p) => {
            // SAFETY: the caller guarantees `error` is NULL or writable.
            unsafe { put(error, TEMPALLOC_OK) };
            p
        }
        Err(e) => {
            // SAFETY: as above.
            unsafe { put(error, e.map_or_else(|code| code, code)) };
            ptr::null_mut()
        }
    }
}

/// The request when the calling thread's region serves it at once, as a
/// `KernelContext` makes it: no lock, no layout, nothing that can fail.
/// `None` sends it to [`allocate`] (and always does in checked builds).
///
/// # Safety
///
/// `alloc` is NULL or a live handle.
#[inline(always)]
unsafe fn fast(
    alloc: *const tempalloc_allocator,
    size: usize,
    alignment: usize,
) -> Option<*mut c_void> {
    // SAFETY: the caller guarantees `alloc` is NULL or live.
    let temp = unsafe { handles::fast_shared(alloc) }?;
    if alignment & alignment.wrapping_sub(1) != 0 {
        return None;
    }
    // SAFETY: `alignment` is 0 or a power of two.
    unsafe { temp.fast(size, alignment) }.map(|p| p.cast::<c_void>().as_ptr())
}

/// The request of [`tempalloc_allocate`] and
/// [`tempalloc_allocate_detailed`] past [`fast`]: the pointer, or the Rust
/// error (`Ok`) or the C code (`Err`) of a failure.
///
/// # Safety
///
/// `alloc` is NULL or a live handle.
unsafe fn allocate(
    alloc: *const tempalloc_allocator,
    size: usize,
    alignment: usize,
) -> Result<*mut c_void, Result<Error, tempalloc_error>> {
    // SAFETY: the caller guarantees `alloc` is NULL or live; concurrent
    // allocations only share it through `&`, which `CachingAllocator` (Sync)
    // supports.
    let result = unsafe { on_shared(alloc, |alloc| Ok(allocate_slow(alloc, size, alignment))) };
    match result {
        Ok(Ok(p)) => Ok(p.cast::<c_void>().as_ptr()),
        Ok(Err(e)) => Err(Ok(e)),
        Err(code) => Err(Err(code)),
    }
}

/// What the fast path of [`tempalloc_allocate`] does not serve: bad input
/// gets its error here, a valid request goes to `allocate`.
#[cold]
#[inline(never)]
fn allocate_slow(
    alloc: &CachingAllocator,
    size: usize,
    alignment: usize,
) -> Result<NonNull<[u8]>, Error> {
    let layout =
        Layout::from_size_align(size, alignment).map_err(|_| Error::layout(size, alignment))?;
    alloc.allocate(layout)
}

/// [`tempalloc_allocate`], with the numbers of a failure in `*detail`
/// (`detail` may be NULL): a request over the limit says how many bytes it
/// asked for, how many were held and what the limit is. On success
/// `*detail` is all zeros ([`TEMPALLOC_OK`]). The same cost as
/// [`tempalloc_allocate`] on success; [`tempalloc_error_describe`] writes
/// the message with the numbers.
///
/// Thread safety: as [`tempalloc_allocate`].
///
/// # Safety
///
/// `alloc` is NULL or a live handle; `detail` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_allocate_detailed(
    alloc: *const tempalloc_allocator,
    size: usize,
    alignment: usize,
    detail: *mut tempalloc_error_detail,
) -> *mut c_void {
    // SAFETY: the caller's guarantees are `fast`'s and `allocate`'s.
    let result = match unsafe { fast(alloc, size, alignment) } {
        Some(p) => Ok(p),
        // SAFETY: as above.
        None => unsafe { allocate(alloc, size, alignment) },
    };
    let (p, d) = match result {
        Ok(p) => (p, tempalloc_error_detail::default()),
        Err(Ok(e)) => (ptr::null_mut(), tempalloc_error_detail::of(e)),
        Err(Err(code)) => (
            ptr::null_mut(),
            tempalloc_error_detail {
                code,
                ..tempalloc_error_detail::default()
            },
        ),
    };
    if !detail.is_null() {
        // SAFETY: non-NULL, and the caller guarantees it is writable.
        unsafe { detail.write(d) };
    }
    p
}

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

/// Recycles everything `alloc` handed out since the last reset: every such
/// pointer becomes invalid. Keeps the blocks for the next inference.
/// Returns [`TEMPALLOC_OK`], or [`TEMPALLOC_ERROR_NULL_ARGUMENT`] for NULL.
///
/// Thread safety: needs exclusive use of `alloc` — no allocate, stats or
/// other call on it may be in flight.
///
/// # Safety
///
/// `alloc` is NULL or a live handle, used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_reset(alloc: *mut tempalloc_allocator) -> tempalloc_error {
    // SAFETY: the caller guarantees `alloc` is NULL or live and not used
    // elsewhere during the call (refused in checked builds).
    let result = unsafe {
        on_exclusive(alloc, |alloc| {
            alloc.reset();
            Ok(())
        })
    };
    status(result, None)
}

/// Resets `alloc`, then gives every block back to its cache, which keeps
/// them idle within its budget or frees them (for memory pressure). The next
/// request takes a block again. Returns [`TEMPALLOC_OK`], or
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`] for NULL.
///
/// Thread safety: needs exclusive use of `alloc`, like [`tempalloc_reset`].
///
/// # Safety
///
/// `alloc` is NULL or a live handle, used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_release(alloc: *mut tempalloc_allocator) -> tempalloc_error {
    // SAFETY: as in `tempalloc_reset`: NULL or live, and exclusive.
    let result = unsafe {
        on_exclusive(alloc, |alloc| {
            alloc.release();
            Ok(())
        })
    };
    status(result, None)
}

/// Writes `alloc`'s counters to `*out`. Returns [`TEMPALLOC_OK`], or
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`] when either pointer is NULL (then `*out`
/// is untouched).
///
/// Thread safety: may run concurrently with [`tempalloc_allocate`] and other
/// stats calls on the same allocator; not with reset, release or destroy.
///
/// # Safety
///
/// `alloc` is NULL or a live handle; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_allocator_stats(
    alloc: *const tempalloc_allocator,
    out: *mut tempalloc_stats,
) -> tempalloc_error {
    // SAFETY: the caller guarantees `alloc` is NULL or live (shared use is
    // fine) and `out` is NULL or writable and not aliased during the call.
    let Some(out) = (unsafe { out.as_mut() }) else {
        return TEMPALLOC_ERROR_NULL_ARGUMENT;
    };
    // SAFETY: the caller guarantees `alloc` is NULL or live; shared use is fine.
    let result = unsafe { on_shared(alloc, |alloc| Ok(alloc.stats().into())) };
    status(result, Some(out))
}

/// Creates a block cache for several allocators (one per session or model)
/// to share: at most `idle_budget` idle, and at most `max_bytes` taken
/// from the system in all (0 means no limit). Returns the handle, or NULL
/// with the code in `*error` (`error` may be NULL). Free it with
/// [`tempalloc_block_cache_destroy`].
///
/// Thread safety: any thread, any time.
///
/// # Safety
///
/// `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_create(
    idle_budget: usize,
    max_bytes: usize,
    error: *mut tempalloc_error,
) -> *mut tempalloc_block_cache {
    let result = guard(|| {
        let limit = (max_bytes != 0).then_some(max_bytes);
        let cache = BlockCache::with_limits(idle_budget, limit);
        handles::new_cache(Arc::new(cache))
    });
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { answer(result, ptr::null_mut(), error) }
}

/// Drops this handle's reference to the cache. Allocators made with it keep
/// working; the memory goes back to the system when the last of them is
/// destroyed too. NULL does nothing.
///
/// Thread safety: needs exclusive use of the handle (no other call on
/// `cache` in flight or following); allocators made with it may keep
/// running on other threads.
///
/// # Safety
///
/// `cache` is NULL or a live handle from [`tempalloc_block_cache_create`],
/// not used again afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_destroy(cache: *mut tempalloc_block_cache) {
    // SAFETY: the caller gives up a handle that is NULL or live (checked in
    // checked builds, where anything else is left alone).
    unsafe { handles::destroy(cache) };
}

/// Evicts idle memory ([`BlockCache::evict_idle`]): frees what the cache
/// keeps idle, least recently given back first, until at most
/// `target_bytes` are idle (0: all of it, for a memory warning). Memory the
/// allocators hold is not touched. Returns the bytes freed and stores the
/// status in `*error` (`error` may be NULL):
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`] (and 0) for a NULL `cache`.
///
/// Thread safety: any thread, concurrently with anything but the handle's
/// destroy (the cache locks internally).
///
/// # Safety
///
/// `cache` is NULL or a live handle; `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_evict_idle(
    cache: *const tempalloc_block_cache,
    target_bytes: usize,
    error: *mut tempalloc_error,
) -> usize {
    // SAFETY: the caller guarantees `cache` is NULL or live; shared use is fine.
    let result = unsafe { on_cache(cache, |cache| Ok(cache.evict_idle(target_bytes))) };
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { answer(result, 0, error) }
}

/// Writes the cache's counters to `*out`: system allocations and frees,
/// bytes held (idle and lent out), hits and misses; request counts stay 0.
/// Returns [`TEMPALLOC_OK`], or [`TEMPALLOC_ERROR_NULL_ARGUMENT`] when either
/// pointer is NULL (then `*out` is untouched).
///
/// Thread safety: any thread, concurrently with anything but the handle's
/// destroy.
///
/// # Safety
///
/// `cache` is NULL or a live handle; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_stats(
    cache: *const tempalloc_block_cache,
    out: *mut tempalloc_stats,
) -> tempalloc_error {
    // SAFETY: the caller guarantees `cache` is NULL or live (shared use is
    // fine) and `out` is NULL or writable and not aliased during the call.
    let Some(out) = (unsafe { out.as_mut() }) else {
        return TEMPALLOC_ERROR_NULL_ARGUMENT;
    };
    // SAFETY: the caller guarantees `cache` is NULL or live; shared use is fine.
    let result = unsafe { on_cache(cache, |cache| Ok(cache.stats().into())) };
    status(result, Some(out))
}

/// Bytes in the cache's idle blocks now; 0 (and
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`] in `*error`) for a NULL `cache`.
///
/// Thread safety: any thread, concurrently with anything but the handle's
/// destroy.
///
/// # Safety
///
/// `cache` is NULL or a live handle; `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_idle_bytes(
    cache: *const tempalloc_block_cache,
    error: *mut tempalloc_error,
) -> usize {
    // SAFETY: the caller guarantees `cache` is NULL or live; shared use is fine.
    let result = unsafe { on_cache(cache, |cache| Ok(cache.idle_bytes())) };
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { answer(result, 0, error) }
}

/// Takes a checkpoint of `alloc` into `*out`: a later [`tempalloc_rewind`]
/// with it recycles everything allocated after this call and keeps what
/// came before (per-kernel recycling inside an inference). Checkpoints nest;
/// rewinding to one consumes it and every checkpoint taken after it. A reset
/// or release consumes them all. Makes no system allocation up to 8 open
/// checkpoints. Returns [`TEMPALLOC_OK`], [`TEMPALLOC_ERROR_NULL_ARGUMENT`], or
/// [`TEMPALLOC_ERROR_OUT_OF_MEMORY`] when the books of open checkpoints must
/// grow and the system has no memory (then `*out` is untouched and no
/// checkpoint is taken).
///
/// Thread safety: needs exclusive use of `alloc`, like [`tempalloc_reset`]:
/// take it between kernels, not while workers allocate.
///
/// # Safety
///
/// `alloc` is NULL or a live handle, used by no other thread during the
/// call; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_checkpoint(
    alloc: *mut tempalloc_allocator,
    out: *mut tempalloc_checkpoint_token,
) -> tempalloc_error {
    // SAFETY: the caller guarantees `alloc` is NULL or live and exclusive,
    // and `out` NULL or writable and not aliased during the call.
    let Some(out) = (unsafe { out.as_mut() }) else {
        return TEMPALLOC_ERROR_NULL_ARGUMENT;
    };
    // SAFETY: the caller guarantees `alloc` is NULL or live and exclusive.
    let result = unsafe {
        on_exclusive(alloc, |alloc| {
            let cp = alloc.checkpoint().map_err(code)?;
            Ok(tempalloc_checkpoint_token::from(cp))
        })
    };
    status(result, Some(out))
}

/// Recycles everything `alloc` handed out since `checkpoint` was taken:
/// those pointers become invalid, earlier ones stay valid. Consumes
/// `checkpoint` and every checkpoint taken after it. Returns
/// [`TEMPALLOC_OK`], or, and then nothing changes:
/// [`TEMPALLOC_ERROR_FOREIGN_CHECKPOINT`] when the checkpoint belongs to
/// another allocator; [`TEMPALLOC_ERROR_STALE_CHECKPOINT`] when a reset or
/// release consumed it; [`TEMPALLOC_ERROR_CHECKPOINT_CLOSED`] when a rewind
/// to it or to an earlier checkpoint did. The checks come in that order; a
/// made-up token is refused by one of them unless its four fields are
/// exactly those of an open checkpoint. [`TEMPALLOC_ERROR_NULL_ARGUMENT`]
/// for NULL.
///
/// Thread safety: needs exclusive use of `alloc`, like [`tempalloc_reset`].
///
/// # Safety
///
/// `alloc` is NULL or a live handle, used by no other thread during the
/// call. `checkpoint` may be any value.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_rewind(
    alloc: *mut tempalloc_allocator,
    checkpoint: tempalloc_checkpoint_token,
) -> tempalloc_error {
    // SAFETY: as in `tempalloc_reset`: NULL or live, and exclusive.
    let result =
        unsafe { on_exclusive(alloc, |alloc| alloc.rewind(checkpoint.into()).map_err(code)) };
    status(result, None)
}

/// Checks every buffer `alloc` handed out since the last reset for a write
/// past its end, when the allocator was made with `debug_checks` = 1.
/// Returns [`TEMPALLOC_OK`] (always, with the checks off), the first
/// violation as [`TEMPALLOC_ERROR_CANARY_CORRUPTED`] (also counted in
/// `tempalloc_stats::canary_violations`), or
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`].
///
/// Thread safety: may run concurrently with [`tempalloc_allocate`]; not with
/// reset, release, rewind or destroy.
///
/// # Safety
///
/// `alloc` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_check(alloc: *const tempalloc_allocator) -> tempalloc_error {
    // SAFETY: the caller guarantees `alloc` is NULL or live; shared use is fine.
    let result = unsafe { on_shared(alloc, |alloc| alloc.check().map_err(code)) };
    status(result, None)
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
mod tests {
    use super::*;

    fn message(code: tempalloc_error) -> &'static str {
        // SAFETY: `tempalloc_error_message` returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(tempalloc_error_message(code)) }
            .to_str()
            .unwrap_or("")
    }

    #[test]
    fn every_error_maps_to_its_code_and_a_message() {
        let cases = [
            (
                Error::InvalidAlignment { align: 3 },
                TEMPALLOC_ERROR_INVALID_ALIGNMENT,
            ),
            (
                Error::SizeOverflow { size: 1, align: 1 },
                TEMPALLOC_ERROR_SIZE_OVERFLOW,
            ),
            (
                Error::OutOfMemory { size: 1, align: 1 },
                TEMPALLOC_ERROR_OUT_OF_MEMORY,
            ),
            (
                Error::BudgetExceeded {
                    requested: 2,
                    held: 0,
                    limit: 1,
                },
                TEMPALLOC_ERROR_BUDGET_EXCEEDED,
            ),
            (Error::NoTempAllocator, TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR),
            (
                Error::StaleCheckpoint {
                    taken_at: 0,
                    now: 1,
                },
                TEMPALLOC_ERROR_STALE_CHECKPOINT,
            ),
            (Error::ForeignCheckpoint, TEMPALLOC_ERROR_FOREIGN_CHECKPOINT),
            (
                Error::CheckpointClosed { depth: 1, open: 0 },
                TEMPALLOC_ERROR_CHECKPOINT_CLOSED,
            ),
            (
                Error::CanaryCorrupted {
                    addr: 64,
                    size: 8,
                    byte: 0,
                },
                TEMPALLOC_ERROR_CANARY_CORRUPTED,
            ),
            (
                Error::FrameSuspended { depth: 1, open: 2 },
                TEMPALLOC_ERROR_FRAME_SUSPENDED,
            ),
        ];
        let mut seen = Vec::new();
        for (error, expected) in cases {
            assert_eq!(code(error), expected, "{error}");
            assert!(!seen.contains(&expected), "code {expected} used twice");
            seen.push(expected);
        }
        for c in TEMPALLOC_OK..=TEMPALLOC_ERROR_CHECKPOINT_CLOSED {
            assert_ne!(message(c), "unknown tempalloc error code", "code {c}");
        }
        assert_eq!(message(-1), "unknown tempalloc error code");
        assert_eq!(message(i32::MAX), "unknown tempalloc error code");
    }

    /// Issue 31, item 10: a C token is the allocator's own checkpoint as
    /// plain data, so a refused rewind has the allocator's reason and
    /// numbers (no books of the handle's own, no made-up reset count), and
    /// each reason its own code.
    #[test]
    fn a_refused_rewind_says_why() {
        let mut error = TEMPALLOC_OK;
        // SAFETY: NULL config (the default) and a writable error.
        let (a, b) = unsafe {
            (
                tempalloc_allocator_create(ptr::null(), &mut error),
                tempalloc_allocator_create(ptr::null(), &mut error),
            )
        };
        assert!(!a.is_null() && !b.is_null());
        let take = |alloc| {
            let mut cp = tempalloc_checkpoint_token::default();
            // SAFETY: a live handle, used by this thread only.
            let code = unsafe { tempalloc_checkpoint(alloc, &mut cp) };
            assert_eq!(code, TEMPALLOC_OK);
            cp
        };
        // Why the allocator refuses to rewind to `cp` (it is never open
        // here), and that C gets that reason's code for it.
        let why = |alloc, cp: tempalloc_checkpoint_token| {
            // SAFETY: a live handle, used by this thread only.
            let error = unsafe { on_exclusive(alloc, |temp| Ok(temp.rewind(cp.into()).err())) };
            let error = error.unwrap();
            // SAFETY: a live handle, used by this thread only. The rewind
            // above was refused, so this one meets the same books.
            let c_code = unsafe { tempalloc_rewind(alloc, cp) };
            assert_eq!(error.map_or(TEMPALLOC_OK, code), c_code);
            error
        };
        let theirs = take(b);
        assert_eq!(why(a, theirs), Some(Error::ForeignCheckpoint));
        assert_eq!(
            why(a, tempalloc_checkpoint_token::default()),
            Some(Error::ForeignCheckpoint)
        );
        let outer = take(a);
        let inner = take(a);
        assert_eq!((outer.depth, inner.depth), (0, 1));
        // SAFETY: live, this thread only.
        assert_eq!(unsafe { tempalloc_rewind(a, outer) }, TEMPALLOC_OK);
        assert_eq!(
            why(a, inner),
            Some(Error::CheckpointClosed { depth: 1, open: 0 })
        );
        assert_eq!(
            why(a, outer),
            Some(Error::CheckpointClosed { depth: 0, open: 0 })
        );
        let before = take(a);
        // The same depth as `outer`, another serial: `outer` stays closed.
        assert_eq!(before.depth, outer.depth);
        assert_eq!(
            why(a, outer),
            Some(Error::CheckpointClosed { depth: 0, open: 1 })
        );
        // SAFETY: live, this thread only.
        unsafe {
            assert_eq!(tempalloc_reset(a), TEMPALLOC_OK);
            assert_eq!(tempalloc_release(a), TEMPALLOC_OK);
        }
        assert_eq!(
            why(a, before),
            Some(Error::StaleCheckpoint {
                taken_at: before.resets,
                now: before.resets + 2
            })
        );
        // SAFETY: live, given up here.
        unsafe {
            tempalloc_allocator_destroy(a);
            tempalloc_allocator_destroy(b);
        }
    }

    #[test]
    fn config_default_round_trips() {
        let c = tempalloc_config_default();
        assert_eq!(c.to_config(), Ok(CachingConfig::default()));
        let zeroed = tempalloc_config {
            idle_budget: 0,
            max_bytes: 0,
            min_block_size: 0,
            dedicated_threshold: 0,
            prefault: 0,
            huge_pages: 0,
            debug_checks: c.debug_checks,
        };
        assert_eq!(zeroed.to_config(), Ok(CachingConfig::default()));
        let custom = tempalloc_config {
            max_bytes: 1 << 20,
            dedicated_threshold: 8 << 20,
            prefault: 1,
            ..c
        };
        let config = custom.to_config().unwrap();
        assert_eq!(config.max_bytes, Some(1 << 20));
        assert_eq!(config.dedicated_threshold, Some(8 << 20));
        assert!(config.prefaults());
    }
}
