//! Counters every allocator keeps, so users can measure instead of guess.

use core::fmt;

/// A snapshot of an allocator's counters.
///
/// Counts are cumulative since the allocator was created, except
/// `bytes_held` (now) and `high_water` (the largest window seen). A *window*
/// is the time between two resets (or a rewind and the next reset).
///
/// ```
/// use tempalloc::{KernelContext, MallocAllocator, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// let ctx = KernelContext::new(&temp);
/// ctx.allocate_temp(100, 64)?;
/// let s = temp.stats();
/// assert_eq!((s.allocations, s.bytes_requested, s.system_allocations), (1, 100, 1));
/// temp.reset();
/// assert_eq!((temp.stats().resets, temp.stats().high_water), (1, 100));
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Scratch requests served (zero-sized ones included).
    pub allocations: u64,
    /// Bytes asked for by those requests (sizes, not padding).
    pub bytes_requested: u64,
    /// Calls to `reset`.
    pub resets: u64,
    /// Calls into the system allocator that reserved memory.
    pub system_allocations: u64,
    /// Calls into the system allocator that returned memory.
    pub system_frees: u64,
    /// Bytes currently reserved from the system on this allocator's behalf.
    pub bytes_held: usize,
    /// The most bytes live (requested) at once between two resets, over the
    /// allocator's life.
    pub high_water: usize,
    /// Bytes live (requested and not yet recycled) now: 0 right after a reset.
    pub bytes_live: usize,
    /// The most bytes live at once in the last window: the one that ended at
    /// the last reset, or the current one if it already went higher.
    pub window_high_water: usize,
    /// Blocks served from a block cache without a system call.
    pub cache_hits: u64,
    /// Blocks that needed a system allocation.
    pub cache_misses: u64,
    /// Allocations whose canary was found overwritten (a write past their
    /// end), with [`CachingConfig::debug_checks`](crate::CachingConfig::debug_checks)
    /// on; each counted once.
    pub canary_violations: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} allocations ({} B requested), {} resets, {} system allocations, {} system frees, \
             {} B held, {} B live, {} B high water ({} B window high water), {} cache hits, \
             {} cache misses, {} canary violations",
            self.allocations,
            self.bytes_requested,
            self.resets,
            self.system_allocations,
            self.system_frees,
            self.bytes_held,
            self.bytes_live,
            self.high_water,
            self.window_high_water,
            self.cache_hits,
            self.cache_misses,
            self.canary_violations,
        )
    }
}
