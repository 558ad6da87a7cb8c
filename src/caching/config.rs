//! [`CachingConfig`]: the knobs of a [`CachingAllocator`](crate::CachingAllocator).

use crate::block::BlockOptions;

/// How a [`CachingAllocator`](crate::CachingAllocator) sizes, limits and
/// prepares its blocks. Start from `CachingConfig::default()` and change what
/// your deployment needs:
///
/// ```
/// use tempalloc::{CachingAllocator, CachingConfig};
///
/// let config = CachingConfig::default()
///     .min_block_size(1 << 20)
///     .max_bytes(Some(64 << 20))
///     .prefault(true);
/// let temp = CachingAllocator::with_config(config);
/// assert_eq!(temp.config().get_max_bytes(), Some(64 << 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachingConfig {
    pub(crate) min_block_size: usize,
    pub(crate) dedicated_threshold: Option<usize>,
    pub(crate) max_cached_bytes: usize,
    pub(crate) max_bytes: Option<usize>,
    pub(crate) block: BlockOptions,
    pub(crate) debug_checks: bool,
}

impl Default for CachingConfig {
    /// 64 KiB first blocks, no dedicated blocks, nothing cached idle, no hard
    /// limit, no prefault, no huge pages; debug checks in debug builds only.
    fn default() -> Self {
        CachingConfig {
            min_block_size: 64 << 10,
            dedicated_threshold: None,
            max_cached_bytes: 0,
            max_bytes: None,
            block: BlockOptions::default(),
            debug_checks: cfg!(debug_assertions),
        }
    }
}

impl CachingConfig {
    /// The block size policy: the size of a thread's first block. When a
    /// block fills, the next is twice as large (or as large as the request);
    /// at the reset that follows, the thread's blocks are replaced by one
    /// sized to the most it used in a window, rounded up to a size class
    /// (whole pages, at most 12.5% over). Raise it when the first inference's
    /// system allocations matter (for example, to the expected peak).
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().min_block_size(4 << 20);
    /// assert_eq!(c.get_min_block_size(), 4 << 20);
    /// ```
    pub fn min_block_size(mut self, bytes: usize) -> Self {
        self.min_block_size = bytes;
        self
    }

    /// Requests of at least this many bytes get a block of their own (by size
    /// class, from the cache) instead of growing the thread's bump block,
    /// still recycled at reset and counted against the limits. Use it when a
    /// few rare, very large requests would otherwise make every window hold a
    /// block that large. `None` (the default) bumps everything.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().dedicated_threshold(Some(8 << 20));
    /// assert_eq!(c.get_dedicated_threshold(), Some(8 << 20));
    /// ```
    pub fn dedicated_threshold(mut self, bytes: Option<usize>) -> Self {
        self.dedicated_threshold = bytes;
        self
    }

    /// The budget for idle blocks of the allocator's own [`BlockCache`](crate::BlockCache)
    /// (ignored by [`CachingAllocator::with_cache`](crate::CachingAllocator::with_cache),
    /// where the shared cache's budget rules). The allocator keeps the
    /// blocks its threads use on its own; this budget holds the ones it gave
    /// back (outgrown blocks, dedicated blocks), for reuse. The default, 0,
    /// frees those at once: right for one allocator per process.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().max_cached_bytes(32 << 20);
    /// assert_eq!(c.get_max_cached_bytes(), 32 << 20);
    /// ```
    pub fn max_cached_bytes(mut self, bytes: usize) -> Self {
        self.max_cached_bytes = bytes;
        self
    }

    /// A hard limit on all bytes the allocator's own cache takes from the
    /// system (ignored by `with_cache`: the shared cache's limit rules). A
    /// request that would pass it is [`Error::BudgetExceeded`](crate::Error::BudgetExceeded).
    /// Use it on devices where the OS kills processes over a memory line.
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().max_bytes(Some(10 << 20));
    /// assert_eq!(c.get_max_bytes(), Some(10 << 20));
    /// ```
    pub fn max_bytes(mut self, bytes: Option<usize>) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Touch every page of a new block when it is taken from the system, so
    /// the first inference does not page-fault inside a kernel (the cost moves
    /// to the slow path, which is where latency-sensitive runtimes want it).
    ///
    /// ```
    /// assert!(tempalloc::CachingConfig::default().prefault(true).get_prefault());
    /// ```
    pub fn prefault(mut self, on: bool) -> Self {
        self.block.prefault = on;
        self
    }

    /// Align blocks of 2 MiB and more to 2 MiB and ask Linux for transparent
    /// huge pages on them (`madvise(MADV_HUGEPAGE)`): fewer TLB misses for
    /// large tiles. A no-op on other systems.
    ///
    /// ```
    /// assert!(tempalloc::CachingConfig::default().huge_pages(true).get_huge_pages());
    /// ```
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.block.huge_pages = on;
        self
    }

    /// Debug checks: 16 bytes of canary after every allocation, checked at
    /// every reset and rewind and by [`CachingAllocator::check`](crate::CachingAllocator::check),
    /// so a kernel writing past the end of its scratch is reported
    /// ([`Error::CanaryCorrupted`](crate::Error::CanaryCorrupted),
    /// [`Stats::canary_violations`](crate::Stats::canary_violations)) instead
    /// of silently corrupting its neighbour; and recycled memory filled with
    /// `0xDD` at reset and rewind, so a kernel reading scratch it did not
    /// write sees garbage at once. Every request then takes the allocator's
    /// lock (the lock-free path is not used), so it is slower; with the
    /// checks off the fast path is exactly as fast as without the option.
    /// On by default in debug builds (`cfg!(debug_assertions)`).
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default().debug_checks(true);
    /// assert!(c.get_debug_checks());
    /// ```
    pub fn debug_checks(mut self, on: bool) -> Self {
        self.debug_checks = on;
        self
    }

    /// See [`debug_checks`](Self::debug_checks).
    ///
    /// ```
    /// let c = tempalloc::CachingConfig::default();
    /// assert_eq!(c.get_debug_checks(), cfg!(debug_assertions));
    /// ```
    pub fn get_debug_checks(&self) -> bool {
        self.debug_checks
    }

    /// See [`min_block_size`](Self::min_block_size).
    ///
    /// ```
    /// assert_eq!(tempalloc::CachingConfig::default().get_min_block_size(), 64 << 10);
    /// ```
    pub fn get_min_block_size(&self) -> usize {
        self.min_block_size
    }

    /// See [`dedicated_threshold`](Self::dedicated_threshold).
    ///
    /// ```
    /// assert_eq!(tempalloc::CachingConfig::default().get_dedicated_threshold(), None);
    /// ```
    pub fn get_dedicated_threshold(&self) -> Option<usize> {
        self.dedicated_threshold
    }

    /// See [`max_cached_bytes`](Self::max_cached_bytes).
    ///
    /// ```
    /// assert_eq!(tempalloc::CachingConfig::default().get_max_cached_bytes(), 0);
    /// ```
    pub fn get_max_cached_bytes(&self) -> usize {
        self.max_cached_bytes
    }

    /// See [`max_bytes`](Self::max_bytes).
    ///
    /// ```
    /// assert_eq!(tempalloc::CachingConfig::default().get_max_bytes(), None);
    /// ```
    pub fn get_max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// See [`prefault`](Self::prefault).
    ///
    /// ```
    /// assert!(!tempalloc::CachingConfig::default().get_prefault());
    /// ```
    pub fn get_prefault(&self) -> bool {
        self.block.prefault
    }

    /// See [`huge_pages`](Self::huge_pages).
    ///
    /// ```
    /// assert!(!tempalloc::CachingConfig::default().get_huge_pages());
    /// ```
    pub fn get_huge_pages(&self) -> bool {
        self.block.huge_pages
    }
}
