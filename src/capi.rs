//! The C ABI (cargo feature `capi`): a [`CachingAllocator`] and a shared
//! [`BlockCache`] behind opaque handles, for runtimes written in C or C++.
//!
//! The checked-in header `include/tempalloc.h` declares exactly what this
//! module exports (a test keeps the two in step), and `include/tempalloc.hpp`
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

use core::alloc::Layout;
use core::ffi::{CStr, c_char, c_void};
use core::ptr::{self, NonNull};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

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
/// [`Error::StaleCheckpoint`] (not produced by the C API; mirrored for completeness).
pub const TEMPALLOC_ERROR_STALE_CHECKPOINT: tempalloc_error = 7;
/// [`Error::CanaryCorrupted`]: a write ran past the end of a scratch buffer
/// (debug checks; mirrored for completeness, no C API call returns it).
pub const TEMPALLOC_ERROR_CANARY_CORRUPTED: tempalloc_error = 8;
/// A bug in tempalloc: a panic was caught at the boundary.
pub const TEMPALLOC_ERROR_INTERNAL: tempalloc_error = 9;

/// The code C sees for `error`.
fn code(error: Error) -> tempalloc_error {
    // No wildcard arm: a new `Error` variant must get its own code here.
    match error {
        Error::InvalidAlignment { .. } => TEMPALLOC_ERROR_INVALID_ALIGNMENT,
        Error::SizeOverflow { .. } => TEMPALLOC_ERROR_SIZE_OVERFLOW,
        Error::OutOfMemory { .. } => TEMPALLOC_ERROR_OUT_OF_MEMORY,
        Error::BudgetExceeded { .. } => TEMPALLOC_ERROR_BUDGET_EXCEEDED,
        Error::NoTempAllocator => TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR,
        Error::StaleCheckpoint { .. }
        | Error::ForeignCheckpoint
        | Error::CheckpointClosed { .. } => TEMPALLOC_ERROR_STALE_CHECKPOINT,
        Error::CanaryCorrupted { .. } => TEMPALLOC_ERROR_CANARY_CORRUPTED,
    }
}

/// How to build an allocator. Start from [`tempalloc_config_default`] and
/// change the fields you need; zero fields mean "the default".
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct tempalloc_config {
    /// Budget for idle blocks of the allocator's own cache, in bytes
    /// (`CachingConfig::max_cached_bytes`). Ignored with a shared cache.
    pub max_cached_bytes: usize,
    /// Hard limit on the bytes the allocator's own cache takes from the
    /// system; 0 means no limit. Ignored with a shared cache.
    pub max_bytes: usize,
    /// Size of a thread's first block; 0 means the default (64 KiB).
    pub min_block_size: usize,
    /// Requests of at least this many bytes get a block of their own; 0
    /// means never.
    pub dedicated_threshold: usize,
    /// Touch every page of a new block when it is taken from the system.
    pub prefault: bool,
    /// Ask for transparent huge pages on blocks of 2 MiB and more (Linux).
    pub huge_pages: bool,
}

impl tempalloc_config {
    fn to_config(self) -> CachingConfig {
        let default = CachingConfig::default();
        let nonzero = |n: usize| (n != 0).then_some(n);
        default
            .idle_budget(self.max_cached_bytes)
            .max_bytes(nonzero(self.max_bytes))
            .min_block_size(nonzero(self.min_block_size).unwrap_or(default.min_block_size))
            .dedicated_threshold(nonzero(self.dedicated_threshold))
            .prefault(self.prefault)
            .huge_pages(self.huge_pages)
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

/// An opaque handle to a [`CachingAllocator`]. Made by
/// [`tempalloc_allocator_create`], freed by [`tempalloc_allocator_destroy`].
pub struct tempalloc_allocator(CachingAllocator);

/// An opaque handle to a shared [`BlockCache`]. Made by
/// [`tempalloc_block_cache_create`], freed by [`tempalloc_block_cache_destroy`].
/// Allocators made with it keep the cache alive on their own, so the handle
/// may be destroyed before them.
pub struct tempalloc_block_cache(Arc<BlockCache>);

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

/// Runs `f`, turning a panic into [`TEMPALLOC_ERROR_INTERNAL`].
fn guard<T>(f: impl FnOnce() -> Result<T, tempalloc_error>) -> Result<T, tempalloc_error> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(TEMPALLOC_ERROR_INTERNAL))
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
/// limit, 64 KiB first blocks, no dedicated blocks, no prefault, no huge pages.
///
/// Thread safety: any thread, any time.
#[unsafe(no_mangle)]
pub extern "C" fn tempalloc_config_default() -> tempalloc_config {
    let c = CachingConfig::default();
    tempalloc_config {
        max_cached_bytes: c.idle_budget,
        max_bytes: c.max_bytes.unwrap_or(0),
        min_block_size: c.min_block_size,
        dedicated_threshold: c.dedicated_threshold.unwrap_or(0),
        prefault: c.prefaults(),
        huge_pages: c.uses_huge_pages(),
    }
}

/// Creates an allocator with a block cache of its own, limited by
/// `config->max_cached_bytes` and `config->max_bytes`. A NULL `config`
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
        let config = config.map_or_else(CachingConfig::default, tempalloc_config::to_config);
        Ok(Box::into_raw(Box::new(tempalloc_allocator(
            CachingAllocator::with_config(config),
        ))))
    });
    let mut handle = ptr::null_mut();
    let code = status(result, Some(&mut handle));
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { put(error, code) };
    handle
}

/// Creates an allocator that takes and gives back its blocks through the
/// shared `cache`, under the cache's limits (`config->max_cached_bytes` and
/// `config->max_bytes` are not used). A NULL `config` means
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
    // SAFETY: the caller guarantees both are NULL or valid to read; the
    // cache handle is only read through `&`, which concurrent calls share.
    let (cache, config) = unsafe { (cache.as_ref(), config.as_ref().copied()) };
    let result = guard(|| {
        let cache = cache.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?;
        let config = config.map_or_else(CachingConfig::default, tempalloc_config::to_config);
        Ok(Box::into_raw(Box::new(tempalloc_allocator(
            CachingAllocator::with_cache(Arc::clone(&cache.0), config),
        ))))
    });
    let mut handle = ptr::null_mut();
    let code = status(result, Some(&mut handle));
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { put(error, code) };
    handle
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
    if alloc.is_null() {
        return;
    }
    // SAFETY: non-NULL, made by `Box::into_raw` in a create function, and the
    // caller gives up the handle, so this is the only owner.
    let alloc = unsafe { Box::from_raw(alloc) };
    // A panic in a drop would be a bug; it must still not unwind into C.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(alloc)));
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
    // SAFETY: the caller guarantees `alloc` is NULL or live; concurrent
    // allocations only share it through `&`, which `CachingAllocator` (Sync)
    // supports.
    let alloc = unsafe { alloc.as_ref() };
    let result = guard(|| {
        let alloc = alloc.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?;
        let layout = Layout::from_size_align(size, alignment)
            .map_err(|_| code(Error::layout(size, alignment)))?;
        alloc.0.allocate(layout).map_err(code)
    });
    let mut out = ptr::null_mut();
    let code = status(
        result.map(|p: NonNull<[u8]>| p.cast::<c_void>().as_ptr()),
        Some(&mut out),
    );
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { put(error, code) };
    out
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
    // elsewhere during the call, so a unique reference is sound.
    let alloc = unsafe { alloc.as_mut() };
    status(
        guard(|| {
            alloc.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?.0.reset();
            Ok(())
        }),
        None,
    )
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
    let alloc = unsafe { alloc.as_mut() };
    status(
        guard(|| {
            alloc.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?.0.release();
            Ok(())
        }),
        None,
    )
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
    let (alloc, out) = unsafe { (alloc.as_ref(), out.as_mut()) };
    let Some(out) = out else {
        return TEMPALLOC_ERROR_NULL_ARGUMENT;
    };
    status(
        guard(|| Ok(alloc.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?.0.stats().into())),
        Some(out),
    )
}

/// Creates a block cache for several allocators (one per session or model)
/// to share: at most `max_cached_bytes` idle, and at most `max_bytes` taken
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
    max_cached_bytes: usize,
    max_bytes: usize,
    error: *mut tempalloc_error,
) -> *mut tempalloc_block_cache {
    let result = guard(|| {
        let limit = (max_bytes != 0).then_some(max_bytes);
        let cache = BlockCache::with_limits(max_cached_bytes, limit);
        Ok(Box::into_raw(Box::new(tempalloc_block_cache(Arc::new(
            cache,
        )))))
    });
    let mut handle = ptr::null_mut();
    let code = status(result, Some(&mut handle));
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { put(error, code) };
    handle
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
    if cache.is_null() {
        return;
    }
    // SAFETY: non-NULL, made by `Box::into_raw` in the create function, and
    // the caller gives up the handle, so this is the only owner of the box.
    let cache = unsafe { Box::from_raw(cache) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(cache)));
}

/// Frees idle blocks, least recently used first, until at most
/// `target_bytes` are idle. Returns the bytes freed and stores the status in
/// `*error` (`error` may be NULL): [`TEMPALLOC_ERROR_NULL_ARGUMENT`] (and 0)
/// for a NULL `cache`.
///
/// Thread safety: any thread, concurrently with anything but the handle's
/// destroy (the cache locks internally).
///
/// # Safety
///
/// `cache` is NULL or a live handle; `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_trim(
    cache: *const tempalloc_block_cache,
    target_bytes: usize,
    error: *mut tempalloc_error,
) -> usize {
    // SAFETY: the caller guarantees `cache` is NULL or live; shared use is fine.
    let cache = unsafe { cache.as_ref() };
    let result = guard(|| {
        Ok(cache
            .ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?
            .0
            .trim(target_bytes))
    });
    let mut freed = 0;
    let code = status(result, Some(&mut freed));
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { put(error, code) };
    freed
}

/// Frees every idle block; [`tempalloc_block_cache_trim`] with a target of 0.
/// Returns the bytes freed; the status goes to `*error` as there.
///
/// Thread safety: as [`tempalloc_block_cache_trim`].
///
/// # Safety
///
/// `cache` is NULL or a live handle; `error` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tempalloc_block_cache_release_all(
    cache: *const tempalloc_block_cache,
    error: *mut tempalloc_error,
) -> usize {
    // SAFETY: the caller's guarantees are this function's.
    unsafe { tempalloc_block_cache_trim(cache, 0, error) }
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
    let (cache, out) = unsafe { (cache.as_ref(), out.as_mut()) };
    let Some(out) = out else {
        return TEMPALLOC_ERROR_NULL_ARGUMENT;
    };
    status(
        guard(|| Ok(cache.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?.0.stats().into())),
        Some(out),
    )
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
    let cache = unsafe { cache.as_ref() };
    let result = guard(|| Ok(cache.ok_or(TEMPALLOC_ERROR_NULL_ARGUMENT)?.0.idle_bytes()));
    let mut idle = 0;
    let code = status(result, Some(&mut idle));
    // SAFETY: the caller guarantees `error` is NULL or writable.
    unsafe { put(error, code) };
    idle
}

/// A static, NUL-terminated English description of `code` (never NULL, never
/// to be freed). Unknown codes get "unknown tempalloc error code".
///
/// Thread safety: any thread, any time.
#[unsafe(no_mangle)]
pub extern "C" fn tempalloc_error_message(code: tempalloc_error) -> *const c_char {
    let message: &'static CStr = match code {
        TEMPALLOC_OK => c"success",
        TEMPALLOC_ERROR_NULL_ARGUMENT => c"a required pointer argument was NULL",
        TEMPALLOC_ERROR_INVALID_ALIGNMENT => c"invalid alignment: must be a power of two",
        TEMPALLOC_ERROR_SIZE_OVERFLOW => c"size overflow: size aligned up exceeds isize::MAX",
        TEMPALLOC_ERROR_OUT_OF_MEMORY => c"out of memory: the system could not provide the memory",
        TEMPALLOC_ERROR_BUDGET_EXCEEDED => {
            c"budget exceeded: the request would pass the hard limit"
        }
        TEMPALLOC_ERROR_NO_TEMP_ALLOCATOR => c"no temp allocator",
        TEMPALLOC_ERROR_STALE_CHECKPOINT => c"stale checkpoint",
        TEMPALLOC_ERROR_CANARY_CORRUPTED => {
            c"canary corrupted: a write ran past the end of a scratch buffer"
        }
        TEMPALLOC_ERROR_INTERNAL => c"internal error: a panic was caught in tempalloc (a bug)",
        _ => c"unknown tempalloc error code",
    };
    message.as_ptr()
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
            (
                Error::CanaryCorrupted {
                    addr: 64,
                    size: 8,
                    byte: 0,
                },
                TEMPALLOC_ERROR_CANARY_CORRUPTED,
            ),
        ];
        let mut seen = Vec::new();
        for (error, expected) in cases {
            assert_eq!(code(error), expected, "{error}");
            assert!(!seen.contains(&expected), "code {expected} used twice");
            seen.push(expected);
        }
        for c in TEMPALLOC_OK..=TEMPALLOC_ERROR_INTERNAL {
            assert_ne!(message(c), "unknown tempalloc error code", "code {c}");
        }
        assert_eq!(message(-1), "unknown tempalloc error code");
        assert_eq!(message(i32::MAX), "unknown tempalloc error code");
    }

    #[test]
    fn config_default_round_trips() {
        let c = tempalloc_config_default();
        assert_eq!(c.to_config(), CachingConfig::default());
        let zeroed = tempalloc_config {
            max_cached_bytes: 0,
            max_bytes: 0,
            min_block_size: 0,
            dedicated_threshold: 0,
            prefault: false,
            huge_pages: false,
        };
        assert_eq!(zeroed.to_config(), CachingConfig::default());
        let custom = tempalloc_config {
            max_bytes: 1 << 20,
            dedicated_threshold: 8 << 20,
            prefault: true,
            ..c
        };
        let config = custom.to_config();
        assert_eq!(config.max_bytes, Some(1 << 20));
        assert_eq!(config.dedicated_threshold, Some(8 << 20));
        assert!(config.prefaults());
    }
}
