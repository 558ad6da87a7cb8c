//! A global allocator that counts calls into the system allocator, so the
//! demo measures every allocator (and everything else in the process) the
//! same way instead of trusting each allocator's own `Stats`.

use std::alloc::{GlobalAlloc, Layout, System};
#[cfg(test)]
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// [`System`] plus a counter of the calls that reserve memory.
pub struct CountingAllocator {
    allocations: AtomicU64,
    /// The same calls made on watched threads only: tests run in parallel in
    /// one process, so a test counts the threads it watches, all of them.
    #[cfg(test)]
    watched: AtomicU64,
}

#[cfg(test)]
thread_local! {
    /// Whether this thread's allocations also count in `watched`. A `const`
    /// `Cell<bool>` needs no destructor and no allocation, so the allocator
    /// can read it.
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

/// From now on, count the calling thread's allocations in
/// [`CountingAllocator::watched_allocations`] too.
#[cfg(test)]
pub fn watch_this_thread() {
    WATCHED.set(true);
}

impl CountingAllocator {
    pub const fn new() -> Self {
        CountingAllocator {
            allocations: AtomicU64::new(0),
            #[cfg(test)]
            watched: AtomicU64::new(0),
        }
    }

    /// Calls that reserved memory (`alloc`, `alloc_zeroed`, `realloc`) so far,
    /// on every thread.
    pub fn allocations(&self) -> u64 {
        // Relaxed: a counter read between steps, ordered by the thread joins
        // and the single runtime thread, not by this load.
        self.allocations.load(Ordering::Relaxed)
    }

    /// Like [`Self::allocations`], on the threads that called [`watch_this_thread`].
    #[cfg(test)]
    pub fn watched_allocations(&self) -> u64 {
        self.watched.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // `try_with`: a thread being torn down still allocates, and counts.
        #[cfg(test)]
        if WATCHED.try_with(Cell::get).unwrap_or(false) {
            self.watched.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; counting touches no memory
// the caller sees.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count();
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
