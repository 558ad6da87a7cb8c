//! Helpers for tests that force error paths: a request
//! ([`FailAt`]), a system allocation ([`fail_nth_allocation`]) or a system
//! call ([`refuse_system_calls`]) made to fail; the page size the
//! allocators use ([`page_size`]), for expectations in whole pages; and the
//! locks a thread took ([`locks_taken`]), for the fast path's promise.
//!
//! Behind the `test-util` feature, so a production build has none of it.
//! Turn it on where the tests are, in `[dev-dependencies]` (as with tokio's
//! `test-util`); cargo adds the feature only to builds of tests, examples
//! and benchmarks:
//!
//! ```toml
//! [dependencies]
//! tempalloc = "0.1"
//!
//! [dev-dependencies]
//! tempalloc = { version = "0.1", features = ["test-util"] }
//! ```

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub use crate::os::SystemCall;
use crate::{BlockCache, Error, Rewind, Stats, TempAllocator};

/// Wraps an allocator and fails its `n`th request (counted from 1 since the
/// wrapper was made, across resets) with a chosen [`Error`]; every other
/// request goes to `inner`. A test can then drive a kernel or runtime into
/// any error path without an `unsafe impl`.
///
/// ```
/// use tempalloc::testing::FailAt;
/// use tempalloc::{with_context, Error, MallocAllocator};
///
/// let oom = Error::OutOfMemory { size: 64, align: 8 };
/// let mut temp = FailAt::new(MallocAllocator::new(), 2).with_error(oom);
/// let r = with_context(&mut temp, |ctx| {
///     ctx.scratch::<u8>(64)?; // request 1: served
///     ctx.scratch::<u8>(64)?; // request 2: fails
///     Ok(())
/// });
/// assert_eq!(r, Err(oom));
/// assert_eq!(temp.requests(), 2);
/// ```
#[derive(Debug)]
pub struct FailAt<A> {
    inner: A,
    n: u64,
    error: Error,
    requests: AtomicU64,
}

impl<A: TempAllocator> FailAt<A> {
    /// Fails request `n` (1 is the first) with
    /// [`Error::OutOfMemory`] for the request's layout, until
    /// [`with_error`](Self::with_error) picks another error. `n == 0` fails
    /// nothing.
    ///
    /// ```
    /// use tempalloc::testing::FailAt;
    /// use tempalloc::{Error, KernelContext, MallocAllocator};
    ///
    /// let temp = FailAt::new(MallocAllocator::new(), 1);
    /// let e = KernelContext::new(&temp).allocate_temp(32, 16).unwrap_err();
    /// assert_eq!(e, Error::OutOfMemory { size: 32, align: 16 });
    /// ```
    pub fn new(inner: A, n: u64) -> Self {
        FailAt {
            inner,
            n,
            error: Error::OutOfMemory { size: 0, align: 0 },
            requests: AtomicU64::new(0),
        }
    }

    /// The error the `n`th request gets.
    ///
    /// ```
    /// use tempalloc::testing::FailAt;
    /// use tempalloc::{Error, KernelContext, MallocAllocator};
    ///
    /// let e = Error::BudgetExceeded { requested: 8, held: 0, limit: 0 };
    /// let temp = FailAt::new(MallocAllocator::new(), 1).with_error(e);
    /// assert_eq!(KernelContext::new(&temp).scratch::<u64>(1), Err(e));
    /// ```
    #[must_use]
    pub fn with_error(mut self, error: Error) -> Self {
        self.error = error;
        self
    }

    /// Requests seen so far, the failed one included.
    ///
    /// ```
    /// use tempalloc::testing::FailAt;
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = FailAt::new(MallocAllocator::new(), 0);
    /// KernelContext::new(&temp).scratch::<u8>(1)?;
    /// assert_eq!(temp.requests(), 1);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }

    /// The wrapped allocator.
    ///
    /// ```
    /// use tempalloc::testing::FailAt;
    /// use tempalloc::{MallocAllocator, TempAllocator};
    ///
    /// let temp = FailAt::new(MallocAllocator::new(), 1);
    /// assert_eq!(temp.inner().stats().allocations, 0);
    /// ```
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: every request that is not failed goes to `inner`, which upholds
// the contract; a failed request hands out nothing.
unsafe impl<A: TempAllocator> TempAllocator for FailAt<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if self.requests.fetch_add(1, Relaxed) + 1 == self.n {
            return Err(match self.error {
                Error::OutOfMemory { size: 0, align: 0 } => Error::OutOfMemory {
                    size: layout.size(),
                    align: layout.align(),
                },
                e => e,
            });
        }
        self.inner.allocate(layout)
    }

    fn reset(&mut self) {
        self.inner.reset();
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

/// Frames and checkpoints over a `FailAt` go to the inner allocator, so a
/// test can fail the nth request inside a frame.
///
/// ```
/// use tempalloc::testing::FailAt;
/// use tempalloc::{Error, MallocAllocator, Rewind};
///
/// let mut temp = FailAt::new(MallocAllocator::new(), 3);
/// let r = temp.frame(|inf| {
///     let act = inf.scratch::<f32>(8)?; // request 1
///     for _ in 0..2 {
///         inf.kernel(|ctx| Ok(ctx.scratch_copy(act)?.len()))?; // requests 2 and 3
///     }
///     Ok(())
/// });
/// assert_eq!(r, Err(Error::OutOfMemory { size: 32, align: 4 }));
/// ```
// SAFETY: every call goes to `inner`, which upholds `Rewind`'s contract; the
// memory it hands out is not inside `inner`, so not inside this wrapper.
unsafe impl<A: Rewind> Rewind for FailAt<A> {
    type Checkpoint = A::Checkpoint;

    fn checkpoint(&self) -> Result<A::Checkpoint, Error> {
        self.inner.checkpoint()
    }

    fn rewind(&mut self, checkpoint: A::Checkpoint) -> Result<(), Error> {
        self.inner.rewind(checkpoint)
    }
}

/// Makes the `n`th system allocation of `cache` from now (1 = the next) fail
/// with [`Error::OutOfMemory`], once; `0` disarms. For tests that check that
/// running out of memory inside an allocator leaves everything usable. It
/// costs nothing when not armed: the counter lives under the lock the
/// cache's slow path already holds.
///
/// ```
/// use std::sync::Arc;
/// use tempalloc::testing::fail_nth_allocation;
/// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, Error, KernelContext};
///
/// let cache = Arc::new(BlockCache::with_idle_budget(0));
/// let temp = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
/// fail_nth_allocation(&cache, 1);
/// let ctx = KernelContext::new(&temp);
/// assert!(matches!(ctx.scratch::<u8>(64), Err(Error::OutOfMemory { .. })));
/// assert!(ctx.scratch::<u8>(64).is_ok()); // usable afterwards
/// ```
pub fn fail_nth_allocation(cache: &BlockCache, n: u64) {
    cache.fail_nth_allocation(n);
}

/// Makes the OS layer's `call`s on **this thread** fail, as a system that
/// says no would: the next `skip` succeed, then `times` fail (`u32::MAX`:
/// every one until cleared), then they succeed again. `times == 0` clears.
/// Other threads are not affected, so tests running in parallel do not see
/// each other's refusals; an allocator's calls are made on the thread whose
/// request (or `reset`, `trim`, ...) needs them.
///
/// Where the platform has no reservations (wasm, Miri) there is nothing to
/// refuse: regions use heap blocks, which [`fail_nth_allocation`] fails.
///
/// Every reservation refused: regions fall back to heap blocks, and every
/// request is still served.
///
/// ```
/// use tempalloc::testing::{SystemCall, refuse_system_calls};
/// use tempalloc::{CachingAllocator, KernelContext};
///
/// refuse_system_calls(SystemCall::Reserve, 0, u32::MAX);
/// let temp = CachingAllocator::new();
/// let tile = KernelContext::new(&temp).scratch::<f32>(1 << 18)?;
/// assert_eq!(tile.len(), 1 << 18);
/// refuse_system_calls(SystemCall::Reserve, 0, 0); // cleared
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// The next decommit refused, once: a `trim` that meets it gives nothing
/// back, counts nothing as given back, and the memory stays usable.
///
/// ```
/// use tempalloc::testing::{SystemCall, refuse_system_calls};
/// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
///
/// let mut temp = CachingAllocator::new();
/// KernelContext::new(&temp).scratch::<u8>(4 << 20)?;
/// temp.reset();
/// let held = temp.stats().bytes_held;
/// refuse_system_calls(SystemCall::Decommit, 0, 1);
/// temp.trim();
/// assert_eq!(temp.stats().bytes_held, held);
/// KernelContext::new(&temp).scratch::<u8>(4 << 20)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
pub fn refuse_system_calls(call: SystemCall, skip: u32, times: u32) {
    crate::os::refuse(call, skip, times);
}

/// The page size the allocators use: the system's, or `TEMPALLOC_PAGE_SIZE`
/// (README, "Platforms"). For tests whose expectations are whole pages.
///
/// ```
/// let page = tempalloc::testing::page_size();
/// assert!(page.is_power_of_two() && page >= 4096);
/// ```
pub fn page_size() -> usize {
    crate::os::page_size()
}

std::thread_local! {
    /// Locks of the caching allocator and its cache this thread took.
    static LOCKS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// Counts a lock the calling thread takes (`CachingAllocator`'s or its
/// `BlockCache`'s mutexes).
#[inline]
pub(crate) fn count_lock() {
    LOCKS.with(|locks| locks.set(locks.get() + 1));
}

/// How many locks of a `CachingAllocator` or its `BlockCache` the calling
/// thread has taken so far: once warm, a thread's requests after its first
/// in a window take none. (A region that grows may take the cache's lock:
/// on heap blocks, where nothing is reserved, it chains blocks through the
/// cache in the first window.)
///
/// ```
/// use tempalloc::testing::locks_taken;
/// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
///
/// let mut temp = CachingAllocator::new();
/// for window in 0..2 {
///     let ctx = KernelContext::new(&temp);
///     ctx.scratch::<f32>(64)?; // the first: the thread takes its region
///     let before = locks_taken();
///     for _ in 0..100 {
///         ctx.scratch::<f32>(64)?;
///     }
///     if window == 1 {
///         assert_eq!(locks_taken(), before); // warm: no lock
///     }
///     temp.reset();
/// }
/// # Ok::<(), tempalloc::Error>(())
/// ```
pub fn locks_taken() -> u64 {
    LOCKS.with(core::cell::Cell::get)
}
