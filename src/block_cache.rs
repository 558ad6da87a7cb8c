//! [`BlockCache`]: memory shared by many allocators under one budget.

use core::alloc::Layout;
use core::fmt;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::Error;
use crate::block::{Block, BlockOptions, size_class};
use crate::chunk::Chunk;
use crate::os::{Mapping, page_size};

/// The memory behind [`CachingAllocator`](crate::CachingAllocator)s, shared
/// (through `Arc`) by many of them — one per session or model — so memory one
/// session gives back serves another, and all of it stays under one limit.
///
/// Two limits, both in bytes:
///
/// - the **idle budget**: memory given back and kept for reuse. Past it,
///   memory is freed least recently used first, down to the budget, so the
///   cache never frees more than it must (there is no "free everything"
///   cliff).
/// - `max_bytes` (optional), a **hard limit** on everything taken from the
///   system through the cache, idle or lent out. A request that would pass
///   it is refused with [`Error::BudgetExceeded`] after idle memory has been
///   freed to make room; nothing already lent out is disturbed.
///
/// ```
/// use std::sync::Arc;
/// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, KernelContext};
///
/// let cache = Arc::new(BlockCache::with_idle_budget(64 << 20));
/// let mut a = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
/// KernelContext::new(&a).scratch::<u8>(100_000)?;
/// a.release(); // all of `a`'s memory goes back to the cache, idle
/// let b = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
/// KernelContext::new(&b).scratch::<u8>(100_000)?; // served from what `a` gave back
/// assert_eq!((cache.stats().hits, cache.stats().system_allocations), (1, 1));
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
pub struct BlockCache {
    state: Mutex<CacheState>,
    idle_budget: usize,
    max_bytes: Option<usize>,
}

/// A snapshot of a [`BlockCache`]'s counters.
///
/// ```
/// let s = tempalloc::BlockCache::with_idle_budget(0).stats();
/// assert_eq!((s.bytes_held, s.idle_bytes, s.system_allocations), (0, 0, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Bytes taken from the system through the cache now, lent out or idle:
    /// what the hard limit counts.
    pub bytes_held: usize,
    /// Bytes given back and kept for reuse now.
    pub idle_bytes: usize,
    /// System calls that took memory: new blocks, reservations, commits.
    pub system_allocations: u64,
    /// System calls that gave memory back: freed blocks, unmapped or
    /// decommitted pages.
    pub system_frees: u64,
    /// Requests served from idle memory, without a system call.
    pub hits: u64,
    /// Requests that needed new memory from the system.
    pub misses: u64,
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B held ({} B idle), {} system allocations, {} system frees, {} hits, {} misses",
            self.bytes_held,
            self.idle_bytes,
            self.system_allocations,
            self.system_frees,
            self.hits,
            self.misses,
        )
    }
}

#[derive(Debug, Default)]
struct CacheState {
    /// Idle chunks, least recently given back first.
    idle: VecDeque<Chunk>,
    stats: CacheStats,
    /// System allocations left before an injected failure (0: none armed).
    fail_countdown: u64,
}

/// How new memory is taken from the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkOptions {
    pub block: BlockOptions,
    /// Bytes of address space to reserve for a region that grows in place;
    /// `None` takes fixed heap blocks.
    pub reserve: Option<usize>,
}

/// A chunk from [`BlockCache::take`], with the system calls it took.
pub(crate) struct Taken {
    pub chunk: Chunk,
    /// 0 when served from idle memory.
    pub system_allocations: u64,
}

impl BlockCache {
    /// A cache keeping at most `idle_budget` bytes idle, with no hard limit.
    ///
    /// ```
    /// use tempalloc::BlockCache;
    ///
    /// let cache = BlockCache::with_idle_budget(16 << 20);
    /// assert_eq!((cache.idle_budget(), cache.max_bytes()), (16 << 20, None));
    /// ```
    pub fn with_idle_budget(idle_budget: usize) -> Self {
        Self::with_limits(idle_budget, None)
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
    pub fn with_limits(idle_budget: usize, max_bytes: Option<usize>) -> Self {
        BlockCache {
            state: Mutex::new(CacheState::default()),
            idle_budget,
            max_bytes,
        }
    }

    /// The budget for idle memory, in bytes.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::with_idle_budget(1 << 20).idle_budget(), 1 << 20);
    /// ```
    pub fn idle_budget(&self) -> usize {
        self.idle_budget
    }

    /// The hard limit on bytes taken from the system, if any.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::with_idle_budget(0).max_bytes(), None);
    /// ```
    pub fn max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// Bytes idle now.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::with_idle_budget(1 << 20).idle_bytes(), 0);
    /// ```
    pub fn idle_bytes(&self) -> usize {
        self.state().stats.idle_bytes
    }

    /// The cache's counters now.
    ///
    /// ```
    /// let s = tempalloc::BlockCache::with_idle_budget(0).stats();
    /// assert_eq!((s.bytes_held, s.hits, s.misses), (0, 0, 0));
    /// ```
    pub fn stats(&self) -> CacheStats {
        self.state().stats
    }

    /// Frees idle memory, least recently used first, until at most
    /// `target_bytes` are idle. Returns the bytes freed. For memory pressure
    /// (a phone's memory warning).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, KernelContext};
    ///
    /// let cache = Arc::new(BlockCache::with_idle_budget(64 << 20));
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

    /// Frees all idle memory. Returns the bytes freed.
    ///
    /// ```
    /// let cache = tempalloc::BlockCache::with_idle_budget(1 << 20);
    /// assert_eq!(cache.release_all(), 0);
    /// ```
    pub fn release_all(&self) -> usize {
        self.trim(0)
    }

    /// Arms fault injection: see [`crate::testing::fail_nth_allocation`].
    pub(crate) fn fail_nth_allocation(&self, n: u64) {
        self.state().fail_countdown = n;
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        // Nothing panics while the lock is held and every statement leaves
        // the state consistent, so a poisoned lock is still good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A chunk that can serve `need` bytes at once (for `request`), with
    /// about `want` usable: idle memory if some fits, else new memory — a
    /// reservation with `want` committed, or a heap block of `want`'s size
    /// class where nothing can be reserved. Never more than the hard limit
    /// allows: `want` shrinks to fit, `need` does not.
    pub(crate) fn take(
        &self,
        need: usize,
        want: usize,
        options: ChunkOptions,
        request: Layout,
    ) -> Result<Taken, Error> {
        let mut state = self.state();
        if let Some(mut chunk) = state.take_idle(need, want, options) {
            state.stats.hits += 1;
            let mut system_allocations = 0;
            // Only a reservation comes back smaller than `need`: it grows.
            if let Chunk::Mapped(m) = &mut chunk {
                if m.committed() < need {
                    if let Err(e) = self.commit(&mut state, m, need, want, options, request) {
                        state.give_back(chunk, self.idle_budget);
                        return Err(e);
                    }
                    system_allocations = 1;
                }
            }
            return Ok(Taken {
                chunk,
                system_allocations,
            });
        }
        state.stats.misses += 1;
        let oom = Error::out_of_memory(request);
        let reserved = options
            .reserve
            .and_then(|bytes| Mapping::reserve(bytes.max(need), need, options.block.huge_pages));
        let chunk = match reserved {
            Some(mut m) => {
                self.commit(&mut state, &mut m, need, want, options, request)?;
                Chunk::Mapped(m)
            }
            None => {
                let size = size_class(want.max(need)).ok_or(oom)?;
                let size = self.fit(&mut state, size_class(need).ok_or(oom)?, size, request)?;
                let block = state
                    .injected_failure(oom)
                    .and_then(|()| Block::allocate(size, options.block).map_err(|_| oom));
                let Ok(block) = block else {
                    state.stats.bytes_held -= size;
                    return Err(oom);
                };
                state.stats.system_allocations += 1;
                Chunk::Heap(block)
            }
        };
        Ok(Taken {
            chunk,
            system_allocations: 1,
        })
    }

    /// Commits more of `mapping` so that at least `need` bytes are usable,
    /// about `want` if the hard limit allows (for `request`).
    pub(crate) fn grow(
        &self,
        mapping: &mut Mapping,
        need: usize,
        want: usize,
        options: ChunkOptions,
        request: Layout,
    ) -> Result<(), Error> {
        self.commit(&mut self.state(), mapping, need, want, options, request)
    }

    fn commit(
        &self,
        state: &mut CacheState,
        mapping: &mut Mapping,
        need: usize,
        want: usize,
        options: ChunkOptions,
        request: Layout,
    ) -> Result<(), Error> {
        let oom = Error::out_of_memory(request);
        let round = |bytes: usize| {
            bytes
                .checked_next_multiple_of(page_size())
                .map(|b| b.min(mapping.reserved()))
        };
        let need = round(need).ok_or(oom)?;
        let want = round(want.max(need)).ok_or(oom)?;
        let now = mapping.committed();
        if need <= now {
            return Ok(());
        }
        let to = now + self.fit(state, need - now, want - now, request)?;
        if state.injected_failure(oom).is_err() || mapping.commit(to, options.block.prefault).is_err() {
            state.stats.bytes_held -= to - now;
            return Err(oom);
        }
        state.stats.system_allocations += 1;
        Ok(())
    }

    /// Charges between `need` and `want` more bytes (whole pages, both) to
    /// the hard limit, freeing idle memory to make room; returns the bytes
    /// charged, whole pages too.
    fn fit(
        &self,
        state: &mut CacheState,
        need: usize,
        want: usize,
        request: Layout,
    ) -> Result<usize, Error> {
        let Some(limit) = self.max_bytes else {
            state.stats.bytes_held += want;
            return Ok(want);
        };
        let held = state.stats.bytes_held;
        if held.saturating_add(need) > limit {
            let over = held.saturating_add(need) - limit;
            state.evict_to(state.stats.idle_bytes.saturating_sub(over));
        }
        let held = state.stats.bytes_held;
        let page = page_size();
        let room = limit.saturating_sub(held) / page * page;
        if need > room {
            return Err(Error::BudgetExceeded {
                requested: request.size(),
                held,
                limit,
            });
        }
        let charged = want.min(room);
        state.stats.bytes_held += charged;
        Ok(charged)
    }

    /// Gives the pages of `mapping` from `to` bytes on back to the system;
    /// the books change only if the system did so.
    pub(crate) fn decommit(&self, mapping: &mut Mapping, to: usize) {
        let to = to.next_multiple_of(page_size());
        let before = mapping.committed();
        if to < before && mapping.decommit(to).is_ok() {
            let mut state = self.state();
            state.stats.bytes_held -= before - to;
            state.stats.system_frees += 1;
        }
    }

    /// Takes `chunk` back, idle; frees least recently used idle memory past
    /// the idle budget. Returns how many system frees that took.
    pub(crate) fn give_back(&self, chunk: Chunk) -> u64 {
        self.state().give_back(chunk, self.idle_budget)
    }
}

impl CacheState {
    /// The idle chunk that best serves `need` bytes with about `want`
    /// usable: the smallest that is large enough and at most a quarter above
    /// `want`'s size class (so held memory stays near what is used) and, among
    /// equals, the most recently given back (warm in cache); else, if
    /// regions grow in place, the largest reservation that can grow to `need`.
    fn take_idle(&mut self, need: usize, want: usize, options: ChunkOptions) -> Option<Chunk> {
        let class = size_class(want.max(need))?;
        let huge = options.block.align(class) > page_size();
        let fits = |c: &Chunk| match c {
            Chunk::Heap(b) => {
                b.size() >= need && b.size() <= class + class / 4 && b.is_huge() == huge
            }
            Chunk::Mapped(m) => options.reserve.is_some() && m.reserved() >= need,
        };
        let best = (0..self.idle.len())
            .rev()
            .filter(|&i| fits(&self.idle[i]))
            .min_by_key(|&i| {
                let usable = self.idle[i].usable();
                // Large enough first (smallest of them), then the largest.
                if usable >= need {
                    (0, usable)
                } else {
                    (1, usize::MAX - usable)
                }
            })?;
        let chunk = self.idle.remove(best)?;
        self.stats.idle_bytes -= chunk.usable();
        Some(chunk)
    }

    fn give_back(&mut self, chunk: Chunk, idle_budget: usize) -> u64 {
        self.stats.idle_bytes += chunk.usable();
        self.idle.push_back(chunk);
        let frees = self.stats.system_frees;
        self.evict_to(idle_budget);
        self.stats.system_frees - frees
    }

    /// `Err(oom)` if an injected failure is due now.
    fn injected_failure(&mut self, oom: Error) -> Result<(), Error> {
        match self.fail_countdown {
            0 => Ok(()),
            1 => {
                self.fail_countdown = 0;
                Err(oom)
            }
            n => {
                self.fail_countdown = n - 1;
                Ok(())
            }
        }
    }

    /// Frees least recently used idle chunks until at most `target` bytes
    /// are idle; returns the bytes freed.
    fn evict_to(&mut self, target: usize) -> usize {
        let mut freed = 0;
        while self.stats.idle_bytes > target {
            let Some(chunk) = self.idle.pop_front() else {
                break;
            };
            let bytes = chunk.usable();
            self.stats.idle_bytes -= bytes;
            self.stats.bytes_held -= bytes;
            self.stats.system_frees += 1;
            freed += bytes;
            drop(chunk);
        }
        debug_assert!(self.stats.idle_bytes <= self.stats.bytes_held);
        freed
    }
}
