//! The C functions on a `tempalloc_block_cache` handle, which several
//! allocators share under one budget.

// The docs link to the C API's other items by their bare names, not by
// paths: cbindgen copies these comments into include/tempalloc.h, where a
// C reader would see `crate::capi::` in every link. Docs builds only: the
// code imports what it uses.
#[cfg(doc)]
#[allow(unused_imports)]
use super::*;

use core::ptr;
use std::sync::Arc;

use super::{
    TEMPALLOC_ERROR_NULL_ARGUMENT, answer, guard, handles, on_cache, status, tempalloc_block_cache,
    tempalloc_error, tempalloc_stats,
};
use crate::BlockCache;

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
