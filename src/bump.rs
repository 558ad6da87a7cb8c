//! [`BumpAllocator`]: a [`TempAllocator`] over `bumpalo::Bump`.

use core::alloc::Layout;
use core::cell::Cell;
use core::ptr::NonNull;

use bumpalo::Bump;

use crate::temp::dangling;
use crate::{Error, Stats, TempAllocator};

/// A [`TempAllocator`] over [`bumpalo::Bump`], for single-threaded users who
/// already use bumpalo. `Send`, not `Sync`.
///
/// An optional byte limit caps the chunks bumpalo may take from the system;
/// a request beyond it is [`Error::BudgetExceeded`], whose `requested` is the
/// bytes held plus the request. bumpalo takes chunks larger than the request
/// (rounded up, usually doubling), so the limit can refuse a request even when
/// `requested` is still under it.
///
/// ```
/// use tempalloc::{BumpAllocator, Error, KernelContext, TempAllocator};
///
/// let temp = BumpAllocator::with_limit(64 * 1024);
/// let ctx = KernelContext::new(&temp);
/// assert!(ctx.scratch::<u8>(1024).is_ok());
/// assert!(matches!(ctx.scratch::<u8>(1 << 20), Err(Error::BudgetExceeded { .. })));
/// ```
#[derive(Debug, Default)]
pub struct BumpAllocator {
    bump: Bump,
    limit: Option<usize>,
    stats: Cell<Stats>,
    /// Chunks bumpalo holds now; each was one system allocation.
    chunks: Cell<u64>,
    live_bytes: Cell<usize>,
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
        let bump = Bump::new();
        bump.set_allocation_limit(Some(limit));
        BumpAllocator {
            bump,
            limit: Some(limit),
            ..Self::default()
        }
    }

    /// The `bumpalo::Bump` underneath, for code that already speaks bumpalo.
    ///
    /// ```
    /// use tempalloc::BumpAllocator;
    ///
    /// let temp = BumpAllocator::new();
    /// assert_eq!(*temp.bump().alloc(7u32), 7);
    /// ```
    pub fn bump(&self) -> &Bump {
        &self.bump
    }

    /// Why bumpalo refused `layout` when it held `held_before` bytes.
    ///
    /// A new chunk is larger than the request (bumpalo rounds it up and may
    /// double it), so the limit can refuse a request even when `held_before`
    /// plus its size is within the limit. Under a limit, the refusal is the
    /// system's only if the system cannot provide the request's bytes now.
    #[cold]
    #[inline(never)]
    fn failure(&self, layout: Layout, held_before: usize) -> Error {
        match self.limit {
            Some(limit)
                if held_before.saturating_add(layout.size()) > limit
                    || system_can_provide(layout) =>
            {
                Error::BudgetExceeded {
                    requested: layout.size(),
                    held: held_before,
                    limit,
                }
            }
            _ => Error::OutOfMemory {
                size: layout.size(),
                align: layout.align(),
            },
        }
    }

    /// Counts a chunk bumpalo took from the system since the last look.
    fn note_chunks(&self, held_before: usize) {
        let held = self.bump.allocated_bytes();
        if held != held_before {
            let mut stats = self.stats.get();
            stats.system_allocations += 1;
            stats.bytes_held = held;
            self.stats.set(stats);
            self.chunks.set(self.chunks.get() + 1);
        }
    }
}

// SAFETY: bumpalo hands out disjoint, aligned memory that stays valid until
// `Bump::reset` or drop; we call `reset` only from `reset(&mut self)`.
unsafe impl TempAllocator for BumpAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if layout.size() == 0 {
            let mut stats = self.stats.get();
            stats.allocations += 1;
            self.stats.set(stats);
            return Ok(dangling(layout));
        }
        let held_before = self.bump.allocated_bytes();
        let ptr = self
            .bump
            .try_alloc_layout(layout)
            .map_err(|_| self.failure(layout, held_before))?;
        self.note_chunks(held_before);
        let live = self.live_bytes.get() + layout.size();
        self.live_bytes.set(live);
        // Counted only once served: a failed request is not an allocation.
        let mut stats = self.stats.get();
        stats.allocations += 1;
        stats.bytes_requested += layout.size() as u64;
        stats.high_water = stats.high_water.max(live);
        self.stats.set(stats);
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    fn reset(&mut self) {
        // bumpalo keeps its newest (largest) chunk and frees the others.
        self.bump.reset();
        let stats = self.stats.get_mut();
        let chunks = self.chunks.get_mut();
        stats.system_frees += chunks.saturating_sub(1);
        *chunks = (*chunks).min(1);
        stats.bytes_held = self.bump.allocated_bytes();
        stats.resets += 1;
        *self.live_bytes.get_mut() = 0;
    }

    fn stats(&self) -> Stats {
        self.stats.get()
    }
}

/// Whether the system allocator can provide `layout` right now (the memory is
/// returned at once, untouched).
fn system_can_provide(layout: Layout) -> bool {
    // SAFETY: `layout` has a non-zero size: zero-sized requests never reach
    // bumpalo, so never reach here.
    let ptr = unsafe { std::alloc::alloc(layout) };
    if ptr.is_null() {
        return false;
    }
    // SAFETY: `ptr` was just allocated with `layout` and is not used again.
    unsafe { std::alloc::dealloc(ptr, layout) };
    true
}
