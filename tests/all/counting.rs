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
    /// Allocations this thread may still make before every later one fails
    /// (`u64::MAX`: none fails).
    static ALLOWED: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// Runs `f` with the calling thread's allocations failing from the
/// `n`th on (1 is the first), as the system's do when memory runs out.
/// Anything that allocates meanwhile (a failing assertion's message
/// included) gets the failure too: assert after it.
#[cfg(feature = "std")]
pub(crate) fn failing_from<R>(n: u64, f: impl FnOnce() -> R) -> R {
    let _failing = NoMemory::from(n);
    f()
}

/// While it lives, the calling thread's allocations fail (null, as when the
/// system has no memory left), so a test can check that code which must
/// not abort then does not. Assert after it.
#[cfg(feature = "std")]
pub(crate) struct NoMemory(());

#[cfg(feature = "std")]
impl NoMemory {
    /// Every allocation fails.
    pub(crate) fn on_this_thread() -> NoMemory {
        NoMemory::from(1)
    }

    /// Allocations fail from the `n`th on.
    fn from(n: u64) -> NoMemory {
        ALLOWED.with(|a| a.set(n.saturating_sub(1)));
        NoMemory(())
    }
}

#[cfg(feature = "std")]
impl Drop for NoMemory {
    fn drop(&mut self) {
        ALLOWED.with(|a| a.set(u64::MAX));
    }
}

/// Whether the system "has no memory" for this allocation.
fn out_of_memory() -> bool {
    let due = |a: &Cell<u64>| match a.get() {
        0 => true,
        u64::MAX => false,
        left => {
            a.set(left - 1);
            false
        }
    };
    ALLOWED.try_with(due).unwrap_or(false)
}

/// Applies `f` to this thread's counts. A thread whose thread-locals are
/// already destroyed (its late destructors still allocate) has none: its
/// allocations go uncounted, so `try_with`'s `AccessError` is dropped.
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
        if out_of_memory() {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        allocated(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if out_of_memory() {
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
        if out_of_memory() {
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
