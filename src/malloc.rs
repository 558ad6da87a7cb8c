//! [`MallocAllocator`]: every request is a system allocation. The baseline.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::temp::dangling;
use crate::{Error, Stats, TempAllocator};

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
#[derive(Debug, Default)]
pub struct MallocAllocator {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    live: Vec<Live>,
    live_bytes: usize,
    stats: Stats,
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
            return Err(Error::OutOfMemory {
                size: layout.size(),
                align: layout.align(),
            });
        }
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) }).ok_or(Error::OutOfMemory {
            size: layout.size(),
            align: layout.align(),
        })?;
        state.live.push(Live { ptr, layout });
        // Counted only once served: a failed request is not an allocation.
        state.stats.allocations += 1;
        state.stats.bytes_requested += layout.size() as u64;
        state.live_bytes += layout.size();
        state.stats.system_allocations += 1;
        state.stats.bytes_held += layout.size();
        state.stats.high_water = state.stats.high_water.max(state.live_bytes);
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    fn reset(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for Live { ptr, layout } in state.live.drain(..) {
            // SAFETY: `ptr` came from `std::alloc::alloc(layout)` and is freed
            // once; `&mut self` means no borrow of it survives.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            state.stats.system_frees += 1;
        }
        state.stats.bytes_held = 0;
        state.stats.resets += 1;
        state.live_bytes = 0;
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
