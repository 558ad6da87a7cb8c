//! [`BumpAllocator`]: a [`TempAllocator`] over `bumpalo::Bump`.

use core::alloc::Layout;
use core::ptr::NonNull;

use std::sync::{Mutex, MutexGuard, PoisonError};

use bumpalo::Bump;

use crate::malloc::next_id;
use crate::temp::dangling;
use crate::{Error, Rewind, Stats, TempAllocator};

/// A [`TempAllocator`] over [`bumpalo::Bump`], for single-threaded users who
/// already use bumpalo.
///
/// `bumpalo::Bump` is not `Sync`, and every `TempAllocator` must be (worker
/// threads share a kernel's context), so the bump sits behind a mutex: each
/// request takes an uncontended lock (about 20 ns). That is what this adapter
/// gives up; threaded kernels and hot paths want
/// [`CachingAllocator`](crate::CachingAllocator).
///
/// An optional byte limit caps the chunks bumpalo may take from the system;
/// a request beyond it is [`Error::BudgetExceeded`] with the request's size.
/// bumpalo takes chunks larger than the request (rounded up, usually
/// doubling), so the limit can refuse a request whose size alone would fit.
///
/// ```
/// use tempalloc::{BumpAllocator, Error, KernelContext, TempAllocator};
///
/// let temp = BumpAllocator::with_limit(64 * 1024);
/// let ctx = KernelContext::new(&temp);
/// assert!(ctx.scratch::<u8>(1024).is_ok());
/// assert!(matches!(
///     ctx.scratch::<u8>(1 << 20),
///     Err(Error::BudgetExceeded { requested: 1048576, limit: 65536, .. })
/// ));
/// ```
///
/// It implements [`Rewind`], so it runs [`Frame`](crate::Frame)s, but
/// bumpalo cannot free the middle of a chunk: a rewind recycles nothing,
/// and every kernel's scratch stays taken until the outermost frame resets.
/// An inference in frames therefore holds the sum of its kernels' scratch,
/// not the most any one kernel used at once:
///
/// ```
/// use tempalloc::{BumpAllocator, Rewind, TempAllocator};
///
/// let mut temp = BumpAllocator::new();
/// temp.frame(|inf| {
///     let act = inf.scratch::<f32>(256)?; // 1 KiB for the whole inference
///     for _kernel in 0..3 {
///         inf.kernel(|ctx| Ok(ctx.scratch_copy(act)?.len()))?;
///     }
///     // The three kernels' copies are still counted: nothing was recycled.
///     assert_eq!(inf.stats().bytes_live, 4 * 1024);
///     Ok(())
/// })?;
/// // The frame's reset recycled everything.
/// assert_eq!(temp.stats().bytes_live, 0);
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
pub struct BumpAllocator {
    inner: Mutex<Inner>,
    limit: Option<usize>,
    /// Tells this allocator's checkpoints from another's.
    id: u64,
}

impl Default for BumpAllocator {
    fn default() -> Self {
        BumpAllocator {
            inner: Mutex::default(),
            limit: None,
            id: next_id(),
        }
    }
}

/// A position in a [`BumpAllocator`]'s window, for [`Rewind`]: only which
/// allocator and which window it belongs to, since a rewind recycles nothing.
///
/// ```
/// use tempalloc::{BumpAllocator, Rewind, TempAllocator};
///
/// let mut temp = BumpAllocator::new();
/// let cp = temp.checkpoint()?;
/// temp.reset();
/// assert!(temp.rewind(cp).is_err()); // a reset came after it
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub struct BumpCheckpoint {
    allocator: u64,
    resets: u64,
}

#[derive(Debug, Default)]
struct Inner {
    bump: Bump,
    stats: Stats,
    /// Chunks bumpalo holds now; each was one system allocation.
    chunks: u64,
    /// The most bytes live in the current window alone.
    window_max: usize,
    /// The newest chunk's size without its footer: bumpalo sizes the next
    /// one from it.
    last_chunk: usize,
}

/// The smallest chunk (without its footer) bumpalo 3 tries for `layout`
/// after a chunk of `last` bytes: it starts from twice the last chunk and
/// halves while the half still holds the request (at least its first-chunk
/// size), then rounds as bumpalo rounds (with its malloc and footer
/// overhead): to a power of two below a page, to whole pages above.
fn smallest_chunk(layout: Layout, last: usize) -> usize {
    const OVERHEAD: usize = 64;
    const PAGE: usize = 4096;
    const FIRST: usize = 512 - OVERHEAD;
    let min_new = layout.size().max(FIRST);
    let mut base = last.saturating_mul(2).max(min_new);
    while base / 2 >= min_new {
        base /= 2;
    }
    let align = layout.align().max(16);
    let size = layout.size().saturating_add(align - 1) & !(align - 1);
    let size = base.max(size);
    if size < PAGE {
        (size + OVERHEAD).next_power_of_two() - OVERHEAD
    } else {
        (size.saturating_add(OVERHEAD + PAGE - 1) & !(PAGE - 1)) - OVERHEAD
    }
}

impl BumpAllocator {
    /// An allocator with no limit; bumpalo takes its first chunk lazily.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, TempAllocator};
    ///
    /// assert_eq!(BumpAllocator::new().stats().system_allocations, 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// An allocator whose chunks may total at most `limit` bytes.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, KernelContext};
    ///
    /// let temp = BumpAllocator::with_limit(1 << 20);
    /// assert!(KernelContext::new(&temp).scratch::<u8>(4096).is_ok());
    /// ```
    pub fn with_limit(limit: usize) -> Self {
        let mut temp = Self::default();
        temp.bump().set_allocation_limit(Some(limit));
        temp.limit = Some(limit);
        temp
    }

    /// The limit [`with_limit`](Self::with_limit) set, if any.
    ///
    /// ```
    /// use tempalloc::BumpAllocator;
    ///
    /// assert_eq!(BumpAllocator::with_limit(4096).limit(), Some(4096));
    /// assert_eq!(BumpAllocator::new().limit(), None);
    /// ```
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The `bumpalo::Bump` underneath, for code that already speaks bumpalo.
    /// It takes `&mut self`: the bump is not shared while you use it.
    ///
    /// ```
    /// use tempalloc::BumpAllocator;
    ///
    /// let mut temp = BumpAllocator::new();
    /// assert_eq!(*temp.bump().alloc(7u32), 7);
    /// ```
    pub fn bump(&mut self) -> &Bump {
        &self
            .inner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .bump
    }

    /// Resets, then frees the chunk bumpalo keeps across resets: nothing
    /// is held until the next request takes a chunk again. For memory
    /// pressure.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = BumpAllocator::with_limit(1 << 20);
    /// KernelContext::new(&temp).scratch::<u8>(4096)?;
    /// temp.release();
    /// assert_eq!(temp.stats().bytes_held, 0);
    /// assert!(KernelContext::new(&temp).scratch::<u8>(4096).is_ok());
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn release(&mut self) {
        self.reset();
        let limit = self.limit;
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        inner.bump = Bump::new();
        inner.bump.set_allocation_limit(limit);
        inner.stats.system_frees += core::mem::take(&mut inner.chunks);
        inner.stats.bytes_held = 0;
        inner.last_chunk = 0;
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // No code panics while holding the lock, and `Inner` is consistent
        // after every statement, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why bumpalo refused `layout` when it held `held_before` bytes,
    /// decided from the numbers alone.
    ///
    /// Under a limit, when the smallest chunk bumpalo would try for the
    /// request passes the limit, the limit refused; when it fits, bumpalo
    /// asked the system and the system refused.
    #[cold]
    #[inline(never)]
    fn failure(&self, layout: Layout, held_before: usize, last_chunk: usize) -> Error {
        let chunk = smallest_chunk(layout, last_chunk);
        match self.limit {
            Some(limit) if held_before.saturating_add(chunk) > limit => Error::BudgetExceeded {
                requested: layout.size(),
                held: held_before,
                limit,
            },
            _ => Error::out_of_memory(layout),
        }
    }
}

// SAFETY: bumpalo hands out disjoint, aligned memory that stays valid until
// `Bump::reset` or drop; we call `reset` only from `reset(&mut self)`. The
// mutex makes the shared `Bump` usable from several threads, one at a time.
unsafe impl TempAllocator for BumpAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let mut inner = self.inner();
        if layout.size() == 0 {
            inner.stats.allocations += 1;
            return Ok(dangling(layout));
        }
        let held_before = inner.bump.allocated_bytes();
        let ptr = match inner.bump.try_alloc_layout(layout) {
            Ok(ptr) => ptr,
            Err(_) => return Err(self.failure(layout, held_before, inner.last_chunk)),
        };
        let held = inner.bump.allocated_bytes();
        let Inner {
            stats,
            chunks,
            window_max,
            last_chunk,
            ..
        } = &mut *inner;
        if held != held_before {
            *last_chunk = held - held_before;
            stats.system_allocations += 1;
            stats.bytes_held = held;
            *chunks += 1;
        }
        // Counted only once served: a failed request is not an allocation.
        stats.allocations += 1;
        stats.bytes_requested += layout.size() as u64;
        stats.bytes_live += layout.size();
        stats.high_water = stats.high_water.max(stats.bytes_live);
        *window_max = (*window_max).max(stats.bytes_live);
        stats.window_high_water = stats.window_high_water.max(stats.bytes_live);
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    fn reset(&mut self) {
        let Inner {
            bump,
            stats,
            chunks,
            window_max,
            ..
        } = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        // bumpalo keeps its newest (largest) chunk and frees the others.
        bump.reset();
        stats.system_frees += chunks.saturating_sub(1);
        *chunks = (*chunks).min(1);
        stats.bytes_held = bump.allocated_bytes();
        stats.resets += 1;
        // The window that ends here keeps its high water until the next one
        // passes it (see `Stats::window_high_water`).
        stats.window_high_water = core::mem::take(window_max);
        stats.bytes_live = 0;
    }

    fn stats(&self) -> Stats {
        self.inner().stats
    }
}

/// A rewind checks the checkpoint and recycles nothing (see
/// [`BumpAllocator`]): the scratch stays counted in
/// [`bytes_live`](Stats::bytes_live) until the next reset.
///
/// ```
/// use tempalloc::{BumpAllocator, Error, KernelContext, Rewind, TempAllocator};
///
/// let mut temp = BumpAllocator::new();
/// let cp = temp.checkpoint()?;
/// KernelContext::new(&temp).scratch::<u8>(64)?;
/// temp.rewind(cp)?;
/// assert_eq!(temp.stats().bytes_live, 64);
/// let other = BumpAllocator::new();
/// assert_eq!(temp.rewind(other.checkpoint()?), Err(Error::ForeignCheckpoint));
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
///
/// [`Error::ForeignCheckpoint`] for another allocator's checkpoint and
/// [`Error::StaleCheckpoint`] when a reset came after it. A checkpoint that a
/// rewind to an earlier one closed is accepted: there is nothing to recycle.
// SAFETY: `rewind` never touches the bump, so:
// - it recycles nothing: everything handed out stays valid and untouched
//   until `reset(&mut self)` or the drop, the only places where this type
//   lets bumpalo reuse or free chunk memory (we only ever call
//   `try_alloc_layout`, `reset` and the drop on the `Bump`, and `bump()`
//   lends it out through `&mut self` only); a stale, foreign or closed
//   checkpoint cannot change that, whether refused or accepted;
// - an error recycles nothing either;
// - bumpalo's chunks are separate allocations from the global allocator
//   (`Bump::new_chunk`); the `Bump` value inside our mutex holds only a
//   `Cell` pointing at the newest chunk's footer (which sits at the end of
//   that chunk) and the limit. Zero-sized requests get a dangling pointer.
//   So no memory we hand out is inside the `BumpAllocator` value, and the
//   `&mut self` a rewind takes does not invalidate it.
unsafe impl Rewind for BumpAllocator {
    type Checkpoint = BumpCheckpoint;

    /// Never fails: the checkpoint names the allocator and its window.
    fn checkpoint(&self) -> Result<BumpCheckpoint, Error> {
        Ok(BumpCheckpoint {
            allocator: self.id,
            resets: self.inner().stats.resets,
        })
    }

    fn rewind(&mut self, checkpoint: BumpCheckpoint) -> Result<(), Error> {
        if checkpoint.allocator != self.id {
            return Err(Error::ForeignCheckpoint);
        }
        let now = self
            .inner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .resets;
        if checkpoint.resets != now {
            return Err(Error::StaleCheckpoint {
                taken_at: checkpoint.resets,
                now,
            });
        }
        Ok(())
    }
}
