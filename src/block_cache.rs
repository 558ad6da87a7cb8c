//! [`BlockCache`]: recycled blocks shared by many allocators under one budget.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::block::{Block, BlockOptions, size_class};
use crate::{Error, Stats};

/// Recycled, page-aligned memory blocks, shared (through `Arc`) by many
/// [`CachingAllocator`](crate::CachingAllocator)s — one per session or model —
/// so a block one session gives back serves another.
///
/// Two limits, both in bytes:
///
/// - `max_cached_bytes`, the budget for *idle* blocks. Blocks given back
///   beyond it are freed least recently used first, down to the budget, so
///   the cache never holds more than the budget idle, and never frees more
///   than it must (there is no "free everything" cliff).
/// - `max_bytes` (optional), a hard limit on everything the cache has taken
///   from the system, idle or lent out. A block that would pass it is refused
///   with [`Error::BudgetExceeded`] after idle blocks have been freed to make
///   room; nothing already lent out is disturbed.
///
/// ```
/// use std::sync::Arc;
/// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, KernelContext, TempAllocator};
///
/// let cache = Arc::new(BlockCache::new(64 << 20));
/// let mut a = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
/// KernelContext::new(&a).scratch::<u8>(100_000)?;
/// a.release(); // every block of `a` goes back to the cache, idle
/// let b = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
/// KernelContext::new(&b).scratch::<u8>(100_000)?; // served from `a`'s block
/// assert_eq!((cache.stats().cache_hits, cache.stats().system_allocations), (1, 1));
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
pub struct BlockCache {
    state: Mutex<CacheState>,
    max_cached_bytes: usize,
    max_bytes: Option<usize>,
    /// Block allocations left before an injected failure (0: none armed).
    fail_countdown: AtomicU64,
}

#[derive(Debug, Default)]
struct CacheState {
    /// Idle blocks, least recently given back first.
    idle: VecDeque<Block>,
    idle_bytes: usize,
    stats: Stats,
}

/// What `acquire` hands an allocator.
pub(crate) struct Acquired {
    pub block: Block,
    /// Served from the idle blocks, without a system call.
    pub hit: bool,
}

impl BlockCache {
    /// A cache keeping at most `max_cached_bytes` idle, with no hard limit.
    ///
    /// ```
    /// use tempalloc::BlockCache;
    ///
    /// let cache = BlockCache::new(16 << 20);
    /// assert_eq!((cache.max_cached_bytes(), cache.max_bytes()), (16 << 20, None));
    /// ```
    pub fn new(max_cached_bytes: usize) -> Self {
        Self::with_limits(max_cached_bytes, None)
    }

    /// A cache with an idle budget and an optional hard limit on all bytes
    /// it takes from the system.
    ///
    /// ```
    /// use tempalloc::BlockCache;
    ///
    /// let cache = BlockCache::with_limits(8 << 20, Some(256 << 20));
    /// assert_eq!(cache.max_bytes(), Some(256 << 20));
    /// ```
    pub fn with_limits(max_cached_bytes: usize, max_bytes: Option<usize>) -> Self {
        BlockCache {
            state: Mutex::new(CacheState::default()),
            max_cached_bytes,
            max_bytes,
            fail_countdown: AtomicU64::new(0),
        }
    }

    /// The budget for idle blocks, in bytes.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::new(1 << 20).max_cached_bytes(), 1 << 20);
    /// ```
    pub fn max_cached_bytes(&self) -> usize {
        self.max_cached_bytes
    }

    /// The hard limit on bytes taken from the system, if any.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::new(0).max_bytes(), None);
    /// ```
    pub fn max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// Bytes in idle blocks now.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::new(1 << 20).idle_bytes(), 0);
    /// ```
    pub fn idle_bytes(&self) -> usize {
        self.state().idle_bytes
    }

    /// The cache's counters: system allocations and frees, bytes held (idle
    /// and lent out), hits and misses. Request counts stay zero: those are
    /// the allocators'.
    ///
    /// ```
    /// let s = tempalloc::BlockCache::new(0).stats();
    /// assert_eq!((s.bytes_held, s.system_allocations), (0, 0));
    /// ```
    pub fn stats(&self) -> Stats {
        self.state().stats
    }

    /// Frees idle blocks, least recently used first, until at most
    /// `target_bytes` are idle. Returns the bytes freed. For memory pressure
    /// (a phone's memory warning).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, KernelContext};
    ///
    /// let cache = Arc::new(BlockCache::new(64 << 20));
    /// let mut temp = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
    /// KernelContext::new(&temp).scratch::<u8>(1 << 20)?;
    /// temp.release();
    /// assert!(cache.idle_bytes() >= 1 << 20);
    /// cache.trim(0);
    /// assert_eq!(cache.idle_bytes(), 0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn trim(&self, target_bytes: usize) -> usize {
        self.state().evict_to(target_bytes)
    }

    /// Frees every idle block. Returns the bytes freed.
    ///
    /// ```
    /// let cache = tempalloc::BlockCache::new(1 << 20);
    /// assert_eq!(cache.release_all(), 0);
    /// ```
    pub fn release_all(&self) -> usize {
        self.trim(0)
    }

    /// Makes the `n`th system block allocation from now (1 = the next) fail
    /// with [`Error::OutOfMemory`], once; `0` disarms. A test hook for
    /// checking that out-of-memory leaves everything usable.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, Error, KernelContext};
    ///
    /// let cache = Arc::new(BlockCache::new(0));
    /// let temp = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
    /// cache.fail_nth_allocation(1);
    /// let ctx = KernelContext::new(&temp);
    /// assert!(matches!(ctx.scratch::<u8>(64), Err(Error::OutOfMemory { .. })));
    /// assert!(ctx.scratch::<u8>(64).is_ok()); // usable afterwards
    /// ```
    #[doc(hidden)]
    pub fn fail_nth_allocation(&self, n: u64) {
        self.fail_countdown.store(n, Relaxed);
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        // Nothing panics while the lock is held and every statement leaves
        // the state consistent, so a poisoned lock is still good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A block of at least `min_size` bytes: an idle one of a close size
    /// (at most a quarter above its size class, so held memory stays near what
    /// is used),
    /// else a new one of `min_size`'s size class.
    pub(crate) fn acquire(
        &self,
        min_size: usize,
        options: BlockOptions,
    ) -> Result<Acquired, Error> {
        let size = size_class(min_size).ok_or(Error::SizeOverflow {
            size: min_size,
            align: crate::block::PAGE,
        })?;
        let mut state = self.state();
        let fits = |b: &Block| {
            b.size() >= min_size
                && b.size() <= size + size / 4
                && b.is_huge() == (options.huge_pages && size >= crate::block::HUGE_PAGE)
        };
        // Best fit; among equals the most recently given back (warm in cache).
        let best = (0..state.idle.len())
            .rev()
            .filter(|&i| fits(&state.idle[i]))
            .min_by_key(|&i| state.idle[i].size());
        if let Some(block) = best.and_then(|i| state.idle.remove(i)) {
            state.idle_bytes -= block.size();
            state.stats.cache_hits += 1;
            return Ok(Acquired { block, hit: true });
        }
        if let Some(limit) = self.max_bytes {
            if state.stats.bytes_held.saturating_add(size) > limit {
                // Make room by freeing idle blocks before refusing.
                let over = state.stats.bytes_held.saturating_add(size) - limit;
                let target = state.idle_bytes.saturating_sub(over);
                state.evict_to(target);
            }
            if state.stats.bytes_held.saturating_add(size) > limit {
                return Err(Error::BudgetExceeded {
                    requested: min_size,
                    held: state.stats.bytes_held,
                    limit,
                });
            }
        }
        let injected = self
            .fail_countdown
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok_and(|n| n == 1);
        if injected {
            return Err(Error::OutOfMemory {
                size,
                align: crate::block::PAGE,
            });
        }
        let block = Block::allocate(size, options)?;
        state.stats.cache_misses += 1;
        state.stats.system_allocations += 1;
        state.stats.bytes_held += block.size();
        Ok(Acquired { block, hit: false })
    }

    /// Takes a block back, idle. Frees least recently used idle blocks past
    /// the budget; returns how many system frees that took.
    pub(crate) fn release(&self, block: Block) -> u64 {
        let mut state = self.state();
        state.idle_bytes += block.size();
        state.idle.push_back(block);
        let frees = state.stats.system_frees;
        state.evict_to(self.max_cached_bytes);
        state.stats.system_frees - frees
    }
}

impl CacheState {
    /// Frees least recently used idle blocks until at most `target` bytes
    /// are idle; returns the bytes freed.
    fn evict_to(&mut self, target: usize) -> usize {
        let mut freed = 0;
        while self.idle_bytes > target {
            let Some(block) = self.idle.pop_front() else {
                break;
            };
            self.idle_bytes -= block.size();
            self.stats.bytes_held -= block.size();
            self.stats.system_frees += 1;
            freed += block.size();
            drop(block);
        }
        debug_assert!(self.idle_bytes <= self.stats.bytes_held);
        freed
    }
}
