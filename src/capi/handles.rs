//! The handles C holds, and how every call reaches what they point to.
//!
//! In release builds a handle is a plain `Box` pointer: a call checks it for
//! NULL and uses it. In checked builds (debug builds, and release builds with
//! the `capi-checked` feature: `cfg(capi_checked)`, set by build.rs) two
//! records turn the misuses C cannot be stopped from into an error code
//! instead of undefined behaviour:
//!
//! - **A registry of live handles** (address and kind). A call looks its
//!   handle up before touching it, under a read lock it holds for the whole
//!   call, so a pointer that is not a live handle of the expected kind (never
//!   made, destroyed, of the other kind, made up) is
//!   [`TEMPALLOC_ERROR_INVALID_HANDLE`](super::TEMPALLOC_ERROR_INVALID_HANDLE) and its memory is never read. A
//!   destroyed handle's memory is not freed (its contents are dropped, its
//!   bytes kept), so no later handle gets its address: a stale handle is
//!   always seen as such, also after the memory allocator has reused the
//!   memory around it. Destroy takes the write lock, so it waits for the
//!   calls in flight on any handle.
//! - **A count of the calls in flight on an allocator.** The calls that may
//!   run concurrently (allocate, stats, check) count up; the ones that need
//!   the handle to themselves (reset, release, checkpoint, rewind) take it
//!   only when nothing is in flight, and the others refuse while they hold
//!   it. Two calls that overlap when they must not get
//!   [`TEMPALLOC_ERROR_CONCURRENT_USE`](super::TEMPALLOC_ERROR_CONCURRENT_USE) (whichever comes second), and
//!   neither runs. Calls that do not overlap in time cannot be told from a
//!   correct program, and are not reported.

use core::alloc::Layout;
use core::mem::ManuallyDrop;
use core::ptr::addr_of_mut;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::{
    TEMPALLOC_ERROR_INTERNAL, TEMPALLOC_ERROR_NULL_ARGUMENT, TEMPALLOC_ERROR_OUT_OF_MEMORY,
    tempalloc_error,
};
use crate::{BlockCache, CachingAllocator};

/// An opaque handle to a [`CachingAllocator`]. Made by
/// [`tempalloc_allocator_create`](super::tempalloc_allocator_create), freed
/// by [`tempalloc_allocator_destroy`](super::tempalloc_allocator_destroy).
pub struct tempalloc_allocator {
    /// Dropped by destroy; in checked builds the rest stays allocated.
    ///
    /// Nothing beside it: C's checkpoints are the allocator's own
    /// ([`CachingAllocator::checkpoint`]), handed to C as plain data and
    /// made [`Checkpoint`](crate::Checkpoint)s again for the rewind, which
    /// checks them against the allocator's records of open checkpoints.
    temp: ManuallyDrop<CachingAllocator>,
    /// Checked builds: the calls in flight (see the module docs).
    #[cfg(capi_checked)]
    in_flight: debug::InFlight,
}

/// An opaque handle to a shared [`BlockCache`]. Made by
/// [`tempalloc_block_cache_create`](super::tempalloc_block_cache_create),
/// freed by [`tempalloc_block_cache_destroy`](super::tempalloc_block_cache_destroy).
/// Allocators made with it keep the cache alive on their own, so the handle
/// may be destroyed before them.
pub struct tempalloc_block_cache {
    /// Dropped by destroy; in checked builds the rest stays allocated.
    cache: ManuallyDrop<Arc<BlockCache>>,
}

/// Runs `f`, turning a panic into [`TEMPALLOC_ERROR_INTERNAL`]. Always
/// inlined, as everything on `tempalloc_allocate`'s path: an out-of-line
/// call there made it 7% slower on x86-64.
#[inline(always)]
pub(super) fn guard<T>(
    f: impl FnOnce() -> Result<T, tempalloc_error>,
) -> Result<T, tempalloc_error> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(TEMPALLOC_ERROR_INTERNAL))
}

/// Runs `f` (a drop), keeping a panic from unwinding into C: one would be
/// a bug, and there is no error to return it as.
fn contain(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// What both kinds of handle have: contents that destroy drops in place.
trait Handle: Sized {
    /// The kind the debug registry knows it as.
    #[cfg(capi_checked)]
    const KIND: debug::Kind;

    /// Drops the handle's contents, leaving its memory allocated.
    ///
    /// # Safety
    ///
    /// `p` is a live handle that nothing uses any more; called once.
    unsafe fn drop_contents(p: *mut Self);
}

impl Handle for tempalloc_allocator {
    #[cfg(capi_checked)]
    const KIND: debug::Kind = debug::Kind::Allocator;

    unsafe fn drop_contents(p: *mut Self) {
        // SAFETY: by the caller, live, unused and dropped once; only the
        // `ManuallyDrop` field is touched.
        unsafe { ManuallyDrop::drop(&mut *addr_of_mut!((*p).temp)) }
    }
}

impl Handle for tempalloc_block_cache {
    #[cfg(capi_checked)]
    const KIND: debug::Kind = debug::Kind::Cache;

    unsafe fn drop_contents(p: *mut Self) {
        // SAFETY: as for the allocator.
        unsafe { ManuallyDrop::drop(&mut *addr_of_mut!((*p).cache)) }
    }
}

/// Boxes `handle` for C (and registers it in checked builds): out of memory
/// is an error, not an abort.
fn hand_out<H: Handle>(handle: H) -> Result<*mut H, tempalloc_error> {
    // SAFETY: handles are not zero-sized.
    let p = unsafe { std::alloc::alloc(Layout::new::<H>()) }.cast::<H>();
    if p.is_null() {
        return Err(TEMPALLOC_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: fresh memory with `H`'s layout, as `Box::new` would allocate
    // it, so `free` can give it back with `Box::from_raw`.
    unsafe { p.write(handle) };
    #[cfg(capi_checked)]
    if let Err(e) = debug::register(p.addr(), H::KIND) {
        // SAFETY: made just above, never handed out.
        unsafe { free(p) };
        return Err(e);
    }
    Ok(p)
}

/// A new allocator handle over `temp`.
pub(super) fn new_allocator(
    temp: CachingAllocator,
) -> Result<*mut tempalloc_allocator, tempalloc_error> {
    hand_out(tempalloc_allocator {
        temp: ManuallyDrop::new(temp),
        #[cfg(capi_checked)]
        in_flight: debug::InFlight::new(),
    })
}

/// A new block cache handle over `cache`.
pub(super) fn new_cache(
    cache: Arc<BlockCache>,
) -> Result<*mut tempalloc_block_cache, tempalloc_error> {
    hand_out(tempalloc_block_cache {
        cache: ManuallyDrop::new(cache),
    })
}

/// What every call on a handle checks first: NULL is
/// [`TEMPALLOC_ERROR_NULL_ARGUMENT`]; in checked builds, a pointer that is not
/// a live handle of its kind is [`TEMPALLOC_ERROR_INVALID_HANDLE`](super::TEMPALLOC_ERROR_INVALID_HANDLE), and the
/// returned guard holds the registry's read lock for the call (so no
/// destroy runs meanwhile).
#[inline(always)]
#[allow(private_bounds, reason = "`Handle` is sealed: the two handle types")]
fn check<H: Handle>(p: *const H) -> Result<impl Sized, tempalloc_error> {
    if p.is_null() {
        return Err(TEMPALLOC_ERROR_NULL_ARGUMENT);
    }
    #[cfg(capi_checked)]
    return debug::live(p.addr(), H::KIND);
    #[cfg(not(capi_checked))]
    Ok(())
}

/// Runs `f` on the allocator behind `p`, for a call that may run
/// concurrently with the other such calls on it (allocate, stats, check),
/// after [`check`] (see the module docs). A panic in `f` is
/// [`TEMPALLOC_ERROR_INTERNAL`].
///
/// # Safety
///
/// `p` is NULL or a live allocator handle that no call needing it
/// exclusively uses meanwhile (in checked builds: or any pointer at all).
#[inline(always)]
pub(super) unsafe fn on_shared<T>(
    p: *const tempalloc_allocator,
    f: impl FnOnce(&CachingAllocator) -> Result<T, tempalloc_error>,
) -> Result<T, tempalloc_error> {
    let _live = check(p)?;
    #[cfg(capi_checked)]
    // SAFETY: a live handle (checked just above, under the read lock held
    // until the end of the call); the counter is shared by design.
    let _shared = unsafe { &(*p).in_flight }.enter_shared()?;
    // SAFETY: by the caller (in checked builds: checked above, and no
    // exclusive call can start while this one is counted in), a live
    // allocator handle whose allocator nothing mutates meanwhile; only the
    // allocator field is borrowed.
    let temp = unsafe { &*(*p).temp };
    guard(|| f(temp))
}

/// The allocator behind `p` for the request's fast path, which takes no
/// lock and cannot fail or panic: `None` for NULL, and always in checked
/// builds, where every call goes through [`on_shared`] and its books.
///
/// # Safety
///
/// As [`on_shared`]'s: `p` is NULL or a live allocator handle that no call
/// needing it exclusively uses for `'a`.
#[inline(always)]
pub(super) unsafe fn fast_shared<'a>(
    p: *const tempalloc_allocator,
) -> Option<&'a CachingAllocator> {
    if cfg!(capi_checked) || p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, so by the caller a live allocator handle shared
    // with concurrent calls only through `&`; only the allocator field is
    // borrowed.
    Some(unsafe { &*(*p).temp })
}

/// Runs `f` on the allocator behind `p`, for a call that needs it to itself
/// (reset, release, checkpoint, rewind); errors as [`on_shared`].
///
/// # Safety
///
/// `p` is NULL or a live allocator handle that no other call uses
/// meanwhile (in checked builds: or any pointer at all, and calls that
/// overlap are refused).
#[inline]
pub(super) unsafe fn on_exclusive<T>(
    p: *mut tempalloc_allocator,
    f: impl FnOnce(&mut CachingAllocator) -> Result<T, tempalloc_error>,
) -> Result<T, tempalloc_error> {
    let _live = check(p)?;
    #[cfg(capi_checked)]
    // SAFETY: a live handle (checked just above, under the read lock held
    // until the end of the call); the counter is shared by design.
    let _exclusive = unsafe { &(*p).in_flight }.enter_exclusive()?;
    // SAFETY: a live allocator handle that, by the caller (in checked builds:
    // by the counter just taken), no other call uses meanwhile; the `&mut`
    // covers the allocator field only, not the counter other calls may read.
    let temp = unsafe { &mut *addr_of_mut!((*p).temp) };
    guard(|| f(temp))
}

/// Runs `f` on the block cache behind `p`; every cache call may run
/// concurrently with the others. Errors as [`on_shared`].
///
/// # Safety
///
/// `p` is NULL or a live block cache handle (in checked builds: or any
/// pointer at all).
#[inline]
pub(super) unsafe fn on_cache<T>(
    p: *const tempalloc_block_cache,
    f: impl FnOnce(&Arc<BlockCache>) -> Result<T, tempalloc_error>,
) -> Result<T, tempalloc_error> {
    let _live = check(p)?;
    // SAFETY: by the caller (checked in checked builds, under the read lock
    // held until the end of the call), a live cache handle, only read.
    let cache = unsafe { &*(*p).cache };
    guard(|| f(cache))
}

/// Destroys the handle behind `p`; NULL, and in checked builds anything but
/// a live handle of its kind, does nothing. In checked builds the contents are
/// dropped and the memory kept, so that no later handle gets its address.
///
/// # Safety
///
/// `p` is NULL or a live handle that no other call uses meanwhile or
/// afterwards (in checked builds: or any pointer at all).
#[allow(private_bounds, reason = "`Handle` is sealed: the two handle types")]
pub(super) unsafe fn destroy<H: Handle>(p: *mut H) {
    if p.is_null() {
        return;
    }
    #[cfg(capi_checked)]
    debug::retire(p.cast(), H::KIND, || {
        // SAFETY: a live handle, taken out of the registry under its write
        // lock, so no call is using it or can start to; its contents are
        // dropped once, here, and its memory kept (never freed).
        contain(|| unsafe { H::drop_contents(p) });
    });
    #[cfg(not(capi_checked))]
    // SAFETY: by the caller, a live handle that nothing uses any more.
    unsafe {
        free(p);
    }
}

/// Drops a handle's contents and frees it.
///
/// # Safety
///
/// `p` came from [`hand_out`]'s `Box` and nothing uses it any more.
unsafe fn free<H: Handle>(p: *mut H) {
    // A panic in a drop would be a bug; it must still not unwind into C.
    // SAFETY: by the caller; dropped once, here.
    contain(|| unsafe { H::drop_contents(p) });
    // SAFETY: by the caller, the only owner of the box; its fields left to
    // drop have no drop glue (`ManuallyDrop`, an atomic).
    drop(unsafe { Box::from_raw(p) });
}

/// The checked builds' records: the registry of live handles and the counter
/// of calls in flight.
#[cfg(capi_checked)]
mod debug {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{PoisonError, RwLock, RwLockReadGuard};

    use super::super::{
        TEMPALLOC_ERROR_CONCURRENT_USE, TEMPALLOC_ERROR_INVALID_HANDLE,
        TEMPALLOC_ERROR_OUT_OF_MEMORY, tempalloc_error,
    };

    /// What a handle is a handle to.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Kind {
        Allocator,
        Cache,
    }

    /// Every live handle, and the retired ones.
    pub(super) struct Registry {
        /// Live handles by address, sorted.
        live: Vec<(usize, Kind)>,
        /// Destroyed handles, whose memory is kept so that no handle gets
        /// their address again: pointers, so that leak checkers (Miri,
        /// LeakSanitizer) see the memory reachable. Never dereferenced.
        retired: Vec<*mut u8>,
    }

    // SAFETY: the registry's pointers are never dereferenced (they only keep
    // their memory reachable), so sharing them between threads is harmless.
    unsafe impl Send for Registry {}
    // SAFETY: the registry is reached only through its `RwLock`, and its
    // pointers are never dereferenced, so `&Registry` on two threads reads
    // plain integers.
    unsafe impl Sync for Registry {}

    static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
        live: Vec::new(),
        retired: Vec::new(),
    });

    impl Registry {
        fn find(&self, addr: usize) -> Result<usize, usize> {
            self.live.binary_search_by_key(&addr, |&(a, _)| a)
        }
    }

    /// Adds a new handle; [`TEMPALLOC_ERROR_OUT_OF_MEMORY`] when the
    /// registry cannot grow (the handle is then not handed out).
    pub(super) fn register(addr: usize, kind: Kind) -> Result<(), tempalloc_error> {
        let mut registry = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
        registry
            .live
            .try_reserve(1)
            .map_err(|_| TEMPALLOC_ERROR_OUT_OF_MEMORY)?;
        // A live address is never handed out twice, and a retired one never
        // again: the allocator does not reuse memory that is still allocated.
        let at = registry.find(addr).unwrap_err();
        registry.live.insert(at, (addr, kind));
        Ok(())
    }

    /// A read lock held while `addr` is used, if it is a live handle of
    /// `kind`; else [`TEMPALLOC_ERROR_INVALID_HANDLE`].
    pub(super) fn live(
        addr: usize,
        kind: Kind,
    ) -> Result<RwLockReadGuard<'static, Registry>, tempalloc_error> {
        let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        match registry.find(addr) {
            Ok(i) if registry.live[i].1 == kind => Ok(registry),
            _ => Err(TEMPALLOC_ERROR_INVALID_HANDLE),
        }
    }

    /// Takes `handle` out of the registry and runs `drop_contents`, if it
    /// is a live handle of `kind`; else does nothing. The memory stays
    /// allocated.
    pub(super) fn retire(handle: *mut u8, kind: Kind, drop_contents: impl FnOnce()) {
        let mut registry = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
        let Ok(i) = registry.find(handle.addr()) else {
            return;
        };
        if registry.live[i].1 != kind {
            return;
        }
        registry.live.remove(i);
        drop_contents();
        // Without room the address is still never freed, only unlisted.
        if registry.retired.try_reserve(1).is_ok() {
            registry.retired.push(handle);
        }
    }

    /// The calls in flight on one allocator: a count of shared calls, and
    /// [`EXCLUSIVE`] while an exclusive one runs.
    #[derive(Debug)]
    pub(super) struct InFlight(AtomicUsize);

    /// The bit an exclusive call holds; shared calls never count that high.
    const EXCLUSIVE: usize = 1 << (usize::BITS - 1);

    impl InFlight {
        pub(super) const fn new() -> Self {
            InFlight(AtomicUsize::new(0))
        }

        /// Counts a shared call in, or refuses while an exclusive one runs.
        pub(super) fn enter_shared(&self) -> Result<Shared<'_>, tempalloc_error> {
            if self.0.fetch_add(1, Ordering::Acquire) & EXCLUSIVE != 0 {
                self.0.fetch_sub(1, Ordering::Release);
                return Err(TEMPALLOC_ERROR_CONCURRENT_USE);
            }
            Ok(Shared(self))
        }

        /// Takes the handle for an exclusive call, or refuses while any
        /// other call is in flight.
        pub(super) fn enter_exclusive(&self) -> Result<Exclusive<'_>, tempalloc_error> {
            self.0
                .compare_exchange(0, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
                .map_err(|_| TEMPALLOC_ERROR_CONCURRENT_USE)?;
            Ok(Exclusive(self))
        }
    }

    /// A shared call in flight; counted out when dropped.
    pub(super) struct Shared<'a>(&'a InFlight);

    impl Drop for Shared<'_> {
        fn drop(&mut self) {
            self.0.0.fetch_sub(1, Ordering::Release);
        }
    }

    /// An exclusive call in flight; gives the handle back when dropped.
    pub(super) struct Exclusive<'a>(&'a InFlight);

    impl Drop for Exclusive<'_> {
        fn drop(&mut self) {
            // A subtraction, not a store of 0: a shared call refused
            // meanwhile may not have taken its count back yet.
            self.0.0.fetch_sub(EXCLUSIVE, Ordering::Release);
        }
    }
}

#[cfg(all(test, capi_checked))]
mod tests {
    use super::super::TEMPALLOC_ERROR_CONCURRENT_USE;
    use super::debug::InFlight;

    #[test]
    fn exclusive_calls_wait_for_no_one_and_refuse_overlap_both_ways() {
        let calls = InFlight::new();
        let a = calls.enter_shared().expect("shared calls overlap");
        let b = calls.enter_shared().expect("shared calls overlap");
        // A reset while two allocations are in flight.
        assert_eq!(
            calls.enter_exclusive().err(),
            Some(TEMPALLOC_ERROR_CONCURRENT_USE)
        );
        drop((a, b));
        let reset = calls.enter_exclusive().expect("nothing in flight");
        // An allocation, and another reset, during the reset.
        assert_eq!(
            calls.enter_shared().err(),
            Some(TEMPALLOC_ERROR_CONCURRENT_USE)
        );
        assert_eq!(
            calls.enter_exclusive().err(),
            Some(TEMPALLOC_ERROR_CONCURRENT_USE)
        );
        drop(reset);
        // The refused calls left nothing behind.
        drop(calls.enter_exclusive().expect("nothing in flight"));
        drop(calls.enter_shared().expect("nothing exclusive"));
    }
}
