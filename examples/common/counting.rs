//! A counting `#[global_allocator]`: every call into the system allocator that
//! reserves memory (alloc, alloc_zeroed, realloc) bumps one atomic counter.
//!
//! Install it in the binary that includes this file:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: counting::Counting = counting::Counting;
//! ```
//!
//! or, counting calls into another allocator (the demo's mimalloc row):
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: counting::CountingOver<mimalloc::MiMalloc> = counting::CountingOver(mimalloc::MiMalloc);
//! ```
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
#[cfg(test)]
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
/// The same calls made on watched threads only: tests run in parallel in one
/// process, so a test counts the threads it watches, all of them.
#[cfg(test)]
static WATCHED: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
thread_local! {
    /// Whether this thread's allocations also count in `WATCHED`. A `const`
    /// `Cell<bool>` needs no destructor and no allocation, so the allocator
    /// can read it.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

/// From now on, count the calling thread's allocations in
/// [`watched_allocations`] too.
#[cfg(test)]
pub fn watch_this_thread() {
    WATCHING.set(true);
}

/// Like [`allocations`], on the threads that called [`watch_this_thread`].
#[cfg(test)]
pub fn watched_allocations() -> u64 {
    WATCHED.load(Ordering::Relaxed)
}

fn count() {
    // Relaxed: counters read between steps, ordered by the thread joins, not by this.
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: a thread being torn down still allocates, and counts.
    #[cfg(test)]
    if WATCHING.try_with(Cell::get).unwrap_or(false) {
        WATCHED.fetch_add(1, Ordering::Relaxed);
    }
}

/// A global allocator, counting.
pub struct CountingOver<A>(pub A);

/// The system allocator, counting. A type and a constant of one name, as a
/// unit struct is, so `static GLOBAL: Counting = Counting;` reads the same.
pub type Counting = CountingOver<System>;
#[allow(non_upper_case_globals)]
pub const Counting: Counting = CountingOver(System);

/// System allocations (alloc, alloc_zeroed, realloc) so far, all threads.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// System frees so far, all threads.
pub fn frees() -> u64 {
    FREES.load(Ordering::Relaxed)
}

// SAFETY: every method forwards to `self.0` with the caller's arguments
// unchanged, so its guarantees are ours; the counters have no effect on the
// memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingOver<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREES.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` came from `self.0` with `layout`.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}
