//! [`MallocAllocator`]: every request is a system allocation. The baseline.

use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::temp::dangling;
use crate::{Error, Rewind, Stats, TempAllocator};

/// Sends every request to the system allocator (`std::alloc`) and frees all
/// of it at [`reset`](TempAllocator::reset) and on drop.
///
/// The honest baseline, and the simplest correct implementation: use it to
/// check a kernel under a memory checker, or to measure what caching buys.
/// Its [`Stats`] are exact. It is `Sync`; one mutex serialises requests.
///
/// ```
/// use tempalloc::{KernelContext, MallocAllocator, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// KernelContext::new(&temp).scratch::<f32>(1024)?;
/// assert_eq!(temp.stats().system_allocations, 1);
/// temp.reset();
/// assert_eq!(temp.stats().system_frees, 1);
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
pub struct MallocAllocator {
    state: Mutex<State>,
    /// Tells this allocator's checkpoints from another's.
    id: u64,
}

impl Default for MallocAllocator {
    fn default() -> Self {
        MallocAllocator {
            state: Mutex::default(),
            id: next_id(),
        }
    }
}

/// A new id for an allocator whose checkpoints carry one (this one and
/// [`BumpAllocator`](crate::BumpAllocator)), so that another allocator can
/// tell its checkpoints from its own.
pub(crate) fn next_id() -> u64 {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    NEXT_ID.fetch_add(1, Relaxed)
}

/// A position in a [`MallocAllocator`]'s window, for [`Rewind`].
///
/// ```
/// use tempalloc::{MallocAllocator, Rewind};
///
/// let mut temp = MallocAllocator::new();
/// let cp = temp.checkpoint()?;
/// temp.rewind(cp)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub struct MallocCheckpoint {
    allocator: u64,
    resets: u64,
    live: usize,
}

#[derive(Debug, Default)]
struct State {
    live: Vec<Live>,
    stats: Stats,
    /// The most bytes live in the current window alone.
    window_max: usize,
}

/// One system allocation, kept to be freed at reset.
#[derive(Debug)]
struct Live {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: `Live` is an owned system allocation with no thread affinity;
// moving it (and freeing it) on another thread is what `std::alloc` allows.
unsafe impl Send for Live {}

impl State {
    fn note_live(&mut self, size: usize) {
        let stats = &mut self.stats;
        stats.bytes_live += size;
        stats.high_water = stats.high_water.max(stats.bytes_live);
        self.window_max = self.window_max.max(stats.bytes_live);
        stats.window_high_water = stats.window_high_water.max(stats.bytes_live);
    }

    /// Frees every allocation after the first `keep`.
    fn free_from(&mut self, keep: usize) {
        for Live { ptr, layout } in self.live.drain(keep..) {
            // SAFETY: `ptr` came from `std::alloc::alloc(layout)` and is freed
            // once (drained); callers hold `&mut MallocAllocator`, so no borrow
            // of it survives, or have proved it is no longer reachable.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            self.stats.system_frees += 1;
            self.stats.bytes_held -= layout.size();
            self.stats.bytes_live -= layout.size();
        }
    }
}

impl MallocAllocator {
    /// An allocator holding nothing.
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, TempAllocator};
    ///
    /// assert_eq!(MallocAllocator::new().stats().bytes_held, 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, and `State` is consistent
        // after every statement anyway, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// SAFETY: each non-zero request is a fresh `std::alloc::alloc` of exactly
// `layout`, so it is aligned, large enough and disjoint from every other; it
// is freed only in `reset` and `drop`, both of which take `&mut self`.
unsafe impl TempAllocator for MallocAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let mut state = self.state();
        if layout.size() == 0 {
            state.stats.allocations += 1;
            return Ok(dangling(layout));
        }
        // Reserve the bookkeeping slot first: if that fails we have not yet
        // taken memory we could not record.
        if state.live.try_reserve(1).is_err() {
            return Err(Error::out_of_memory(layout));
        }
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })
            .ok_or(Error::out_of_memory(layout))?;
        state.live.push(Live { ptr, layout });
        // Counted only once served: a failed request is not an allocation.
        state.stats.allocations += 1;
        state.stats.bytes_requested += layout.size() as u64;
        state.stats.system_allocations += 1;
        state.stats.bytes_held += layout.size();
        state.note_live(layout.size());
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    fn reset(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        state.free_from(0);
        state.stats.bytes_held = 0;
        state.stats.resets += 1;
        state.stats.bytes_live = 0;
        // The window that ends here keeps its high water until the next one
        // passes it (see `Stats::window_high_water`).
        state.stats.window_high_water = core::mem::take(&mut state.window_max);
    }

    fn stats(&self) -> Stats {
        self.state().stats
    }
}

impl Drop for MallocAllocator {
    fn drop(&mut self) {
        self.reset();
    }
}

// SAFETY: a rewind frees only the system allocations made after the
// checkpoint (the tail of `live`), checks the checkpoint first and changes
// nothing when it is stale or foreign, and every allocation is a separate
// heap block, never inside the `MallocAllocator` value.
unsafe impl Rewind for MallocAllocator {
    type Checkpoint = MallocCheckpoint;

    /// Never fails: the checkpoint is the length of the list of live blocks.
    fn checkpoint(&self) -> Result<MallocCheckpoint, Error> {
        let state = self.state();
        Ok(MallocCheckpoint {
            allocator: self.id,
            resets: state.stats.resets,
            live: state.live.len(),
        })
    }

    fn rewind(&mut self, checkpoint: MallocCheckpoint) -> Result<(), Error> {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let now = state.stats.resets;
        if checkpoint.allocator != self.id {
            return Err(Error::ForeignCheckpoint);
        }
        if checkpoint.resets != now || checkpoint.live > state.live.len() {
            return Err(Error::StaleCheckpoint {
                taken_at: checkpoint.resets,
                now,
            });
        }
        state.free_from(checkpoint.live);
        Ok(())
    }
}
