//! A counting global allocator, installed for the whole test binary. The
//! counts are per thread (tests run in parallel on threads of their own), so
//! a test sees only its own allocations. It can also refuse a thread's
//! allocations ([`NoMemory`]), as a system out of memory does.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting on the calling thread.
struct Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and frees on one thread, in calls and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) allocs: u64,
    pub(crate) frees: u64,
    pub(crate) bytes_allocated: u64,
    pub(crate) bytes_freed: u64,
}

thread_local! {
    /// Const-initialised and without a destructor: usable from the global
    /// allocator at any point of a thread's life, allocation-free.
    static COUNTS: Cell<Counts> = const {
        Cell::new(Counts { allocs: 0, frees: 0, bytes_allocated: 0, bytes_freed: 0 })
    };
}

thread_local! {
    /// Whether this thread's allocations are refused (see [`NoMemory`]).
    static REFUSING: Cell<bool> = const { Cell::new(false) };
}

/// While it lives, every allocation the calling thread asks of the global
/// allocator fails (null, as when the system has no memory left), so a
/// test can check that code which must not abort then does not. Anything
/// that allocates while it lives (a failing assertion's message included)
/// gets the failure too: test with it, assert after it. Only the `std`
/// modules (the recorder's log) use it.
#[cfg(feature = "std")]
pub(crate) struct NoMemory(());

#[cfg(feature = "std")]
impl NoMemory {
    pub(crate) fn on_this_thread() -> NoMemory {
        REFUSING.with(|r| r.set(true));
        NoMemory(())
    }
}

#[cfg(feature = "std")]
impl Drop for NoMemory {
    fn drop(&mut self) {
        REFUSING.with(|r| r.set(false));
    }
}

fn refusing() -> bool {
    REFUSING.try_with(Cell::get).unwrap_or(false)
}

fn count(f: impl FnOnce(&mut Counts)) {
    let _ = COUNTS.try_with(|c| {
        let mut counts = c.get();
        f(&mut counts);
        c.set(counts);
    });
}

pub(crate) fn counts() -> Counts {
    COUNTS.with(Cell::get)
}

/// Counts a block of `size` bytes the system gave (`ptr` non-null).
fn allocated(ptr: *mut u8, size: usize) -> *mut u8 {
    if !ptr.is_null() {
        count(|c| {
            c.allocs += 1;
            c.bytes_allocated += size as u64;
        });
    }
    ptr
}

/// Counts a block of `size` bytes given back.
fn freed(size: usize) {
    count(|c| {
        c.frees += 1;
        c.bytes_freed += size as u64;
    });
}

// SAFETY: every call is forwarded to `System` with the same arguments, or
// refused with null (which `GlobalAlloc` allows: the caller keeps what it
// had); the counting and the refusal touch only thread-local `Cell`s and
// never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if refusing() {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        allocated(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if refusing() {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        allocated(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        freed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if refusing() {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // A move: the old block freed, a new one allocated.
            freed(layout.size());
        }
        allocated(new, new_size)
    }
}
