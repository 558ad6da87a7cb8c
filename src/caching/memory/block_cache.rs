//! [`BlockCache`]: memory shared by many allocators under one budget.

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::block::{Block, BlockOptions, size_class, size_class_at_most};
use super::chunk::Chunk;
use super::ledger::{Charge, Ledger};
use crate::Error;
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
///   it first gets the cache's idle memory, then the memory of the other
///   allocators sharing the cache that no window of theirs is using (between
///   their inferences, all of it; largest first, never below an allocator's
///   [`retain`](crate::CachingConfig::retain()) cap, its floor); only if
///   that cannot make room is it refused with [`Error::BudgetExceeded`].
///   Nothing in use is disturbed, and an allocator that lost memory grows
///   again at its next inference (its `Stats` show the system allocations).
///   Allocators on such a cache keep no region leased between inferences
///   and take their lock at each reset, so their reset is the full one.
///
/// The limit is charged with one atomic operation, so allocators that grow
/// at once (the first inference) do not serialise on the cache; a request
/// is refused only when no other growth is under way (one that the system
/// may yet refuse), so never for memory that is not taken in the end.
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
    /// Idle chunks, least recently given back first.
    idle: Mutex<VecDeque<Chunk>>,
    idle_budget: usize,
    /// Bytes taken from the system, lent out or idle, under `max_bytes`.
    ledger: Ledger,
    /// Bytes in `idle` (changed under its lock, read without it).
    idle_bytes: AtomicUsize,
    reservations: AtomicU64,
    heap_blocks: AtomicU64,
    refusals: AtomicU64,
    /// System allocations left before an injected failure (0: none armed).
    fail_countdown: AtomicU64,
    /// The allocators taking memory through the cache, where it has a hard
    /// limit: their idle memory makes room before a request is refused.
    sessions: Mutex<Vec<Session>>,
}

/// An allocator whose memory the cache may take back for another's growth
/// under the hard limit: memory no window of it is using, above its floor.
pub(crate) trait Reclaim: Sync {
    /// Bytes it could give back now; 0 while it is busy (its lock held).
    fn reclaimable(&self) -> usize;

    /// Gives back up to `bytes` (largest regions first); returns how many
    /// went back, 0 while it is busy.
    fn reclaim(&self, bytes: usize) -> usize;
}

/// A registered allocator's [`Reclaim`]: alive until it unregisters.
struct Session(NonNull<dyn Reclaim>);

// SAFETY: a `Session` is only dereferenced as `&dyn Reclaim` (`Sync`), under
// the `sessions` lock, while the allocator is registered, and the allocator
// unregisters (taking that lock) before it frees what the pointer names.
unsafe impl Send for Session {}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Session")
    }
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
    /// Address ranges reserved, to grow in place.
    pub reservations: u64,
    /// Heap blocks taken: where nothing could be reserved (or asked for,
    /// with [`CachingConfig::reserve(None)`](crate::CachingConfig::reserve())),
    /// or the system refused to commit a reservation.
    pub heap_blocks: u64,
    /// Commits and decommits the system refused. Nothing changed then: a
    /// refused commit moved the region to other memory, and pages a refused
    /// decommit left stay committed and counted in `bytes_held`.
    pub refusals: u64,
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B held ({} B idle), {} system allocations, {} system frees, {} hits, {} misses, \
             {} reservations, {} heap blocks, {} refusals",
            self.bytes_held,
            self.idle_bytes,
            self.system_allocations,
            self.system_frees,
            self.hits,
            self.misses,
            self.reservations,
            self.heap_blocks,
            self.refusals,
        )
    }
}

/// How new memory is taken from the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkOptions {
    pub block: BlockOptions,
    /// Bytes of address space to reserve for a region that grows in place;
    /// `None` takes fixed heap blocks.
    pub reserve: Option<usize>,
    /// The most a heap block may hold (an allocator's own limit leaves no
    /// more room), unless the request needs more.
    pub most: usize,
    /// Whether a reservation commits ahead of `need`, up to `want`: not
    /// under a limit, where pages committed ahead could be room another
    /// thread's request needs at the same moment.
    pub ahead: bool,
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
            idle: Mutex::new(VecDeque::new()),
            idle_budget,
            ledger: Ledger::new(max_bytes),
            idle_bytes: AtomicUsize::new(0),
            reservations: AtomicU64::new(0),
            heap_blocks: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            fail_countdown: AtomicU64::new(0),
            sessions: Mutex::new(Vec::new()),
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
        self.ledger.limit()
    }

    /// Bytes idle now.
    ///
    /// ```
    /// assert_eq!(tempalloc::BlockCache::with_idle_budget(1 << 20).idle_bytes(), 0);
    /// ```
    pub fn idle_bytes(&self) -> usize {
        self.idle_bytes.load(Relaxed)
    }

    /// The cache's counters now.
    ///
    /// ```
    /// let s = tempalloc::BlockCache::with_idle_budget(0).stats();
    /// assert_eq!((s.bytes_held, s.hits, s.misses), (0, 0, 0));
    /// ```
    pub fn stats(&self) -> CacheStats {
        let ledger = &self.ledger;
        CacheStats {
            bytes_held: ledger.held(),
            idle_bytes: self.idle_bytes.load(Relaxed),
            system_allocations: ledger.system_allocations.load(Relaxed),
            system_frees: ledger.system_frees.load(Relaxed),
            hits: ledger.hits.load(Relaxed),
            misses: ledger.misses.load(Relaxed),
            reservations: self.reservations.load(Relaxed),
            heap_blocks: self.heap_blocks.load(Relaxed),
            refusals: self.refusals.load(Relaxed),
        }
    }

    /// Frees idle memory, least recently given back first, until at most
    /// `target_bytes` are idle. Returns the bytes freed. For memory pressure
    /// (a phone's memory warning); `evict_idle(0)` frees all of it.
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
    /// cache.evict_idle(0);
    /// assert_eq!(cache.idle_bytes(), 0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn evict_idle(&self, target_bytes: usize) -> usize {
        self.evict_to(&mut self.idle(), target_bytes)
    }

    /// Arms fault injection: see [`crate::testing::fail_nth_allocation`].
    #[cfg(feature = "test-util")]
    pub(crate) fn fail_nth_allocation(&self, n: u64) {
        self.fail_countdown.store(n, Relaxed);
    }

    /// Bytes held now, for a [`BudgetExceeded`](Error::BudgetExceeded).
    pub(crate) fn held(&self) -> usize {
        self.ledger.held()
    }

    /// [`Error::BudgetExceeded`] for `request` with what is held now, if
    /// the cache has a hard limit.
    pub(crate) fn over(&self, request: Layout) -> Option<Error> {
        self.ledger.over(request)
    }

    /// Registers `session` (an allocator's), so that a growth refused by
    /// the hard limit takes back the memory it does not use first.
    ///
    /// # Errors
    ///
    /// When there is no memory for the entry.
    ///
    /// # Safety
    ///
    /// `session` stays valid until [`unregister`](Self::unregister)
    /// removes it.
    pub(crate) unsafe fn register(&self, session: NonNull<dyn Reclaim>) -> Result<(), ()> {
        let mut sessions = self.sessions();
        sessions.try_reserve(1).map_err(|_| ())?;
        sessions.push(Session(session));
        Ok(())
    }

    /// Removes `session`; once this returns, the cache does not reach it.
    pub(crate) fn unregister(&self, session: NonNull<dyn Reclaim>) {
        self.sessions()
            .retain(|s| !core::ptr::addr_eq(s.0.as_ptr(), session.as_ptr()));
    }

    fn sessions(&self) -> MutexGuard<'_, Vec<Session>> {
        // Nothing panics under it, as for `idle`.
        super::counted(self.sessions.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Takes back, largest first, up to `bytes` of the memory the
    /// registered allocators do not use, when together they can give at
    /// least `bytes`; else takes nothing. Returns what went back.
    fn reclaim(&self, bytes: usize) -> usize {
        let sessions = self.sessions();
        // SAFETY: registered, hence valid (`register`'s contract), and the
        // lock keeps it registered while the reference lives.
        let each = || sessions.iter().map(|s| unsafe { s.0.as_ref() });
        if each().map(Reclaim::reclaimable).sum::<usize>() < bytes {
            return 0;
        }
        let mut given = 0;
        for _ in 0..sessions.len() {
            let Some(largest) = each().max_by_key(|s| s.reclaimable()) else {
                break;
            };
            given += largest.reclaim(bytes - given);
            if given >= bytes {
                break;
            }
        }
        given
    }

    fn idle(&self) -> MutexGuard<'_, VecDeque<Chunk>> {
        // Nothing panics while the lock is held and every statement leaves
        // the list consistent, so a poisoned lock is still good.
        super::counted(self.idle.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Charges between `need` and `want` bytes to the hard limit (`want`
    /// shrinks to the room left and then to what `fit` makes of it; `need`
    /// does not), freeing idle memory first if that makes room.
    ///
    /// # Errors
    ///
    /// [`Error::BudgetExceeded`] (with `request`'s size) when `need` does
    /// not fit; nothing is charged then.
    fn charge(
        &self,
        need: usize,
        want: usize,
        fit: impl Fn(usize) -> usize,
        request: Layout,
    ) -> Result<Charge<'_>, Error> {
        let (mut evicted, mut reclaimed) = (false, false);
        loop {
            let refused = match self.ledger.charge(need, want, &fit, request) {
                Err(refused) => refused,
                charged => return charged,
            };
            let short = need.saturating_sub(self.ledger.room());
            let idle = self.idle_bytes();
            if evicted || short > idle {
                // Then memory no window of a session is using, which goes
                // back idle (or is freed past the idle budget).
                if reclaimed || self.reclaim(short - idle.min(short)) == 0 {
                    return Err(refused);
                }
                reclaimed = true;
                evicted = false;
                continue;
            }
            // Idle memory goes before a request is refused.
            self.evict_idle(idle - short);
            evicted = true;
        }
    }

    /// Commits `mapping` so that at least `need` bytes (whole pages) are
    /// usable, about `want` if the limit allows. Lock-free: the charge is
    /// one atomic operation. `Ok(None)` when the system refused the range
    /// (nothing charged: the caller moves to other memory).
    ///
    /// # Errors
    ///
    /// [`Error::BudgetExceeded`] when `need` does not fit the limit, and
    /// [`Error::OutOfMemory`] for an injected failure.
    pub(crate) fn commit(
        &self,
        mapping: &mut Mapping,
        need: usize,
        want: usize,
        prefault: bool,
        request: Layout,
    ) -> Result<Option<usize>, Error> {
        let page = page_size();
        let now = mapping.committed();
        let pages = |bytes: usize| bytes.next_multiple_of(page).min(mapping.reserved());
        let (need, want) = (pages(need), pages(want.max(need)));
        debug_assert!(need > now);
        let whole = |bytes: usize| bytes & !(page - 1);
        let charge = self.charge(need - now, want - now, whole, request)?;
        if self.injected_failure() {
            return Err(Error::out_of_memory(request));
        }
        let bytes = charge.bytes();
        if mapping.commit(now + bytes, prefault).is_err() {
            self.refusals.fetch_add(1, Relaxed);
            return Ok(None);
        }
        charge.keep_all();
        self.ledger.system_allocations.fetch_add(1, Relaxed);
        Ok(Some(bytes))
    }

    /// Gives the pages of `mapping` from `to` bytes on (rounded up to a
    /// page) back to the system. Returns the bytes given back, or `None`
    /// when the system refused: the pages stay committed and counted.
    pub(crate) fn decommit(&self, mapping: &mut Mapping, to: usize) -> Option<usize> {
        let to = to.next_multiple_of(page_size());
        let before = mapping.committed();
        if to >= before {
            return Some(0);
        }
        if mapping.decommit(to).is_err() {
            self.refusals.fetch_add(1, Relaxed);
            return None;
        }
        self.ledger.release(before - to);
        self.ledger.system_frees.fetch_add(1, Relaxed);
        Some(before - to)
    }

    /// A chunk that can serve `need` bytes at once (for `request`), with
    /// about `want` usable: idle memory if some fits, else new memory — a
    /// reservation with `want` committed, or a heap block of `want`'s size
    /// class where nothing can be reserved or the system refuses to commit.
    /// Never more than the hard limit allows: `want` shrinks to fit, `need`
    /// does not.
    pub(crate) fn take(
        &self,
        need: usize,
        want: usize,
        options: ChunkOptions,
        request: Layout,
    ) -> Result<Taken, Error> {
        let oom = Error::out_of_memory(request);
        // What a reservation commits.
        let to = if options.ahead { want } else { need };
        if let Some(mut chunk) = self.take_idle(need, want, options) {
            // Only a reservation comes back smaller than `need`: it grows,
            // or (the system refused that range) new memory serves instead.
            let grown = match &mut chunk {
                Chunk::Mapped(m) if m.committed() < need => {
                    self.commit(m, need, to, options.block.prefault, request)
                }
                _ => Ok(Some(0)),
            };
            match grown {
                Ok(Some(bytes)) => {
                    self.ledger.hits.fetch_add(1, Relaxed);
                    return Ok(Taken {
                        chunk,
                        system_allocations: u64::from(bytes != 0),
                    });
                }
                // Refused (new memory serves instead), or an error.
                grown => {
                    self.give_back(chunk);
                    grown?;
                }
            }
        }
        self.ledger.misses.fetch_add(1, Relaxed);
        // Within the limit before anything is reserved: a request over it is
        // over budget whatever its size. (A charge taken back at once, which
        // a growth at the same moment waits for rather than be refused.)
        drop(self.charge(need, need, |bytes| bytes, request)?);
        let page = page_size();
        let at_least = need.checked_next_multiple_of(page).ok_or(oom)?;
        let reserved = options
            .reserve
            .and_then(|bytes| Mapping::reserve(bytes, at_least, options.block.huge_pages));
        if let Some(mut m) = reserved {
            self.reservations.fetch_add(1, Relaxed);
            // Dropping `m` (an error, or the system refused that range and
            // a heap block serves instead) unmaps it.
            let committed = self.commit(&mut m, need, to, options.block.prefault, request);
            if let Ok(Some(_)) = committed {
                return Ok(Taken {
                    chunk: Chunk::Mapped(m),
                    system_allocations: 1,
                });
            }
            self.ledger.system_frees.fetch_add(1, Relaxed);
            committed?;
        }
        let least = size_class(need).ok_or(oom)?;
        let size = size_class(want.max(need)).ok_or(oom)?;
        let size = size.min(size_class_at_most(options.most).max(least));
        let charge = self.charge(least, size, size_class_at_most, request)?;
        let size = charge.bytes();
        if self.injected_failure() {
            return Err(oom);
        }
        let block = Block::allocate(size, options.block).map_err(|_| oom)?;
        charge.keep_all();
        self.ledger.system_allocations.fetch_add(1, Relaxed);
        self.heap_blocks.fetch_add(1, Relaxed);
        Ok(Taken {
            chunk: Chunk::Heap(block),
            system_allocations: 1,
        })
    }

    /// Takes `chunk` back, idle; frees least recently used idle memory past
    /// the idle budget, and a reservation with nothing committed at once (it
    /// holds only address space). Returns how many system frees that took.
    pub(crate) fn give_back(&self, chunk: Chunk) -> u64 {
        let frees = &self.ledger.system_frees;
        if chunk.usable() == 0 {
            drop(chunk);
            frees.fetch_add(1, Relaxed);
            return 1;
        }
        let before = frees.load(Relaxed);
        let mut idle = self.idle();
        if idle.try_reserve(1).is_err() {
            // No room in the idle list: freed rather than kept (never an abort).
            self.ledger.release(chunk.usable());
            frees.fetch_add(1, Relaxed);
            return 1;
        }
        self.idle_bytes.fetch_add(chunk.usable(), Relaxed);
        idle.push_back(chunk);
        self.evict_to(&mut idle, self.idle_budget);
        frees.load(Relaxed) - before
    }

    /// The idle chunk that best serves `need` bytes with about `want`
    /// usable: the smallest that is large enough and at most a quarter above
    /// `want`'s size class (so held memory stays near what is used), no heap
    /// block above `options.most`, and, among equals, the most recently
    /// given back (warm in cache); else, if regions grow in place (the
    /// options reserve), the largest reservation that can grow to `need`.
    fn take_idle(&self, need: usize, want: usize, options: ChunkOptions) -> Option<Chunk> {
        let class = size_class(want.max(need))?;
        let huge = options.block.align(class) > page_size();
        // A heap block cannot shrink: never one larger than the caller's
        // room (`most`), which it would have to refuse.
        let most = (class + class / 4).min(options.most);
        let fits = |c: &Chunk| match c {
            Chunk::Heap(b) => b.is_huge() == huge && c.holds(need, most),
            Chunk::Mapped(_) => options.reserve.is_some() && c.holds(need, usize::MAX),
        };
        let mut idle = self.idle();
        let best = (0..idle.len())
            .rev()
            .filter(|&i| fits(&idle[i]))
            .min_by_key(|&i| {
                let usable = idle[i].usable();
                // Large enough first (smallest of them), then the largest.
                if usable >= need {
                    (0, usable)
                } else {
                    (1, usize::MAX - usable)
                }
            })?;
        let chunk = idle.remove(best)?;
        self.idle_bytes.fetch_sub(chunk.usable(), Relaxed);
        Some(chunk)
    }

    /// Whether an injected failure is due now.
    fn injected_failure(&self) -> bool {
        let due = self
            .fail_countdown
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        due == Ok(1)
    }

    /// Frees least recently used idle chunks until at most `target` bytes
    /// are idle; returns the bytes freed.
    fn evict_to(&self, idle: &mut VecDeque<Chunk>, target: usize) -> usize {
        let mut freed = 0;
        while self.idle_bytes() > target {
            let Some(chunk) = idle.pop_front() else {
                break;
            };
            let bytes = chunk.usable();
            self.idle_bytes.fetch_sub(bytes, Relaxed);
            self.ledger.release(bytes);
            self.ledger.system_frees.fetch_add(1, Relaxed);
            freed += bytes;
            drop(chunk);
        }
        freed
    }
}
