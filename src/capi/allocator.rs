//! The C functions on a `tempalloc_allocator` handle: create, allocate,
//! reset, release, stats, checkpoint, rewind, check, destroy.

// The docs link to the C API's other items by their bare names, not by
// paths: cbindgen copies these comments into include/tempalloc.h, where a
// C reader would see `crate::capi::` in every link. Docs builds only: the
// code imports what it uses.
#[cfg(doc)]
#[allow(unused_imports)]
use super::*;

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::{self, NonNull};
use std::sync::Arc;

use super::{
    TEMPALLOC_ERROR_NULL_ARGUMENT, TEMPALLOC_ERROR_OUT_OF_MEMORY, TEMPALLOC_OK, answer, code,
    guard, handles, on_cache, on_exclusive, on_shared, put, status, tempalloc_allocator,
    tempalloc_block_cache, tempalloc_checkpoint_token, tempalloc_config, tempalloc_error,
    tempalloc_error_detail, tempalloc_stats,
};
use crate::{BlockCache, CachingAllocator, Error, TempAllocator};

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
    // SAFETY: `allocate_cold`'s contract is this function's, which the
    // caller keeps (`alloc` NULL or live, `error` NULL or writable).
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
            // SAFETY: the caller guarantees `error` is NULL or writable.
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
        // SAFETY: `allocate` asks what `fast` does of the caller: `alloc`
        // NULL or a live allocator handle.
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

/// Takes a checkpoint of `alloc` into `*out`: a later [`tempalloc_rewind`]
/// with it recycles everything allocated after this call and keeps what
/// came before (per-kernel recycling inside an inference). Checkpoints nest;
/// rewinding to one consumes it and every checkpoint taken after it. A reset
/// or release consumes them all. Makes no system allocation up to 8 open
/// checkpoints. Returns [`TEMPALLOC_OK`], [`TEMPALLOC_ERROR_NULL_ARGUMENT`], or
/// [`TEMPALLOC_ERROR_OUT_OF_MEMORY`] when the records of open checkpoints must
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
