//! [`BumpAllocator`]: a [`TempAllocator`] over `bumpalo::Bump`.

use core::alloc::Layout;
use core::ptr::NonNull;

use std::sync::{Mutex, MutexGuard, PoisonError};

use allocator_api2::alloc::Allocator;
use bumpalo::Bump;

use crate::malloc::next_id;
use crate::temp::{dangling, move_to};
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
/// A [`ScratchVec`](crate::ScratchVec) whose buffer is the newest block
/// grows through bumpalo's own `grow` ([`TempAllocator::grow`]): bumpalo
/// bumps downwards, so the buffer takes the room below it and its bytes
/// move down, and it holds about its size. That room is there once a reset
/// kept a chunk as large as the window (bumpalo keeps its largest); in the
/// window that first takes the chunks, each about twice the last, a
/// doubling vector outgrows each chunk and leaves its old buffer behind:
///
/// ```
/// use tempalloc::{with_context, BumpAllocator, Error, ScratchVec, TempAllocator};
///
/// fn push(temp: &mut BumpAllocator) -> Result<(), Error> {
///     with_context(temp, |ctx| {
///         let mut v = ScratchVec::new_in(ctx);
///         for i in 0..16_384u32 {
///             v.push(i); // 64 KiB at the end
///         }
///         Ok(())
///     })
/// }
///
/// let mut temp = BumpAllocator::new();
/// push(&mut temp)?; // takes the chunks: the old buffers stay behind
/// assert!(temp.stats().window_high_water > 65_536 * 3 / 2);
/// push(&mut temp)?; // in the chunk the reset kept: the buffer alone
/// assert_eq!(temp.stats().window_high_water, 65_536);
/// # Ok::<(), Error>(())
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
    /// The address and layout of the block bumpalo last handed out
    /// (`try_alloc_layout` or `Allocator::grow`) since the reset: the only
    /// block whose room `grow` can reuse, and the layout bumpalo must be
    /// given for it.
    newest: Option<(usize, Layout)>,
}

impl Inner {
    /// Counts what bumpalo just served: `live` more bytes live, a new block
    /// (one allocation) when `fresh`, and the chunk it took if it held more
    /// than `held_before`.
    fn served(&mut self, held_before: usize, live: usize, fresh: bool) {
        let held = self.bump.allocated_bytes();
        let stats = &mut self.stats;
        if held != held_before {
            self.last_chunk = held - held_before;
            stats.system_allocations += 1;
            stats.bytes_held = held;
            self.chunks += 1;
        }
        // Counted only once served: a failed request is not an allocation.
        stats.allocations += u64::from(fresh);
        stats.bytes_requested += live as u64;
        stats.bytes_live += live;
        stats.high_water = stats.high_water.max(stats.bytes_live);
        self.window_max = self.window_max.max(stats.bytes_live);
        stats.window_high_water = stats.window_high_water.max(stats.bytes_live);
    }
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
// `Bump::reset` or drop; we call `reset` only from `reset(&mut self)`. Its
// `Allocator::grow` builds the grown block from the block given up to it
// and memory never handed out (below the bump pointer, or a new block), so
// it stays disjoint from every other live allocation. The mutex makes the
// shared `Bump` usable from several threads, one at a time.
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
        inner.served(held_before, layout.size(), true);
        inner.newest = Some((ptr.as_ptr().addr(), layout));
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    /// bumpalo's own `grow` for the newest block: when its chunk has the
    /// room and `new` asks no more alignment than `old`, it takes the
    /// `new.size() - old.size()` bytes below the block, and the bytes move
    /// down (`ptr::copy`) to the new start; the block then counts
    /// `new.size()` bytes live, not `old.size() + new.size()`. Otherwise,
    /// and for any other block, a new block and a copy, and the old block
    /// stays counted until the reset, as after any `allocate` and copy.
    ///
    /// The room is there once a reset kept a chunk as large as the window
    /// (bumpalo keeps its largest): in the window that first takes the
    /// chunks, a vector that doubles outgrows each new chunk, which
    /// bumpalo sizes at about twice the last one, and moves to the next.
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, Error> {
        debug_assert!(new.size() >= old.size());
        let mut inner = self.inner();
        // bumpalo reuses only its newest block's room, and must be given
        // the layout it handed that block out for. Any other block (older,
        // zero-sized, or one a context shrank in place, whose `old` is
        // smaller) is copied, as the trait's default does.
        if inner.newest != Some((ptr.as_ptr().addr(), old)) {
            drop(inner);
            // SAFETY: the caller's contract is `move_to`'s.
            return unsafe { move_to(self, ptr, old, new) };
        }
        let held_before = inner.bump.allocated_bytes();
        // SAFETY: `Allocator::grow`'s contract for `&Bump`:
        // - `ptr` is a block currently allocated by this `Bump`, and `old`
        //   fits it: `newest` says bumpalo handed the block at `ptr` out
        //   for `old` (`try_alloc_layout(old)`, which is what its
        //   `Allocator::allocate` does, or `Allocator::grow` to `old`) since
        //   the last reset, which clears it; bumpalo frees a block only in
        //   `Bump::reset` or the drop, which only `reset(&mut self)`,
        //   `release(&mut self)` (which resets first) and our drop call, and
        //   we never `deallocate`; `bump()` lends the `Bump` out shared only,
        //   which cannot reset it.
        // - `new.size() >= old.size()`: the caller's.
        // - The block's bytes are the caller's alone (we handed the block
        //   out once, to the caller, which gives it up to this call), and
        //   the lock keeps every other thread out of the `Bump`.
        let grown = unsafe { Allocator::grow(&&inner.bump, ptr, old, new) };
        let Ok(to) = grown else {
            // bumpalo copied nothing: the block is as it was, for `old`.
            return Err(self.failure(new, held_before, inner.last_chunk));
        };
        // Where bumpalo reused the block's room, the new block overlaps the
        // old one; a new allocation is disjoint from it.
        let (at, from) = (to.cast::<u8>().as_ptr().addr(), ptr.as_ptr().addr());
        let reused = at < from + old.size() && from < at + new.size();
        if reused {
            inner.served(held_before, new.size() - old.size(), false);
        } else {
            inner.served(held_before, new.size(), true);
        }
        inner.newest = Some((at, new));
        Ok(to)
    }

    fn reset(&mut self) {
        let Inner {
            bump,
            stats,
            chunks,
            window_max,
            newest,
            ..
        } = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        // bumpalo keeps its newest (largest) chunk and frees the others.
        bump.reset();
        *newest = None;
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
//   `try_alloc_layout`, `Allocator::grow`, which reuses only the block it
//   is given, `reset` and the drop on the `Bump`, and `bump()` lends it
//   out through `&mut self` only); a stale, foreign or closed
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
