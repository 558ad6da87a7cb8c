//! How a region grows — in place, into a chunk a rewind left, or into a new
//! chunk — and the one budget rule; [`Books`], the counters of the memory
//! the allocator takes through its cache, kept without a lock.

use core::alloc::Layout;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::region::{Region, before_next};
use super::{CachingAllocator, CachingConfig, Shared};
use crate::block::{size_class, size_class_at_most};
use crate::block_cache::{BlockCache, ChunkOptions};
use crate::chunk::Chunk;
use crate::os::{Mapping, page_size};
use crate::Error;

/// The lease a thread takes on a FREE region to give its memory back.
const RECLAIMING: u64 = u64::MAX;

/// The allocator's cache and what it took through it, under the
/// allocator's own limit. Atomics, so that a region grows without the
/// allocator's lock.
pub(super) struct Books {
    pub cache: Arc<BlockCache>,
    /// `CachingConfig::max_bytes`: on this allocator, within the cache's.
    limit: Option<usize>,
    pub held: AtomicUsize,
    pub system_allocations: AtomicU64,
    pub system_frees: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl Books {
    pub(super) fn new(cache: Arc<BlockCache>, limit: Option<usize>) -> Self {
        Books {
            cache,
            limit,
            held: AtomicUsize::new(0),
            system_allocations: AtomicU64::new(0),
            system_frees: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The allocator's own limit, if any.
    pub(super) fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Counts between `need` and `want` more bytes as held, under the
    /// allocator's own limit (`want` shrinks to the room left, in whole
    /// pages; `need` does not). Returns the bytes counted, which the caller
    /// corrects to what it took.
    ///
    /// # Errors
    ///
    /// [`Error::BudgetExceeded`] (with `request`'s size) when `need` does
    /// not fit; nothing is counted then.
    fn admit(&self, need: usize, want: usize, request: Layout) -> Result<usize, Error> {
        let want = want.max(need);
        let Some(limit) = self.limit else {
            self.held.fetch_add(want, Relaxed);
            return Ok(want);
        };
        let page = page_size();
        let mut held = self.held.load(Relaxed);
        loop {
            let room = limit.saturating_sub(held) & !(page - 1);
            if need > room {
                let requested = request.size();
                return Err(Error::BudgetExceeded { requested, held, limit });
            }
            let admitted = want.min(room);
            match self.held.compare_exchange_weak(held, held + admitted, Relaxed, Relaxed) {
                Ok(_) => return Ok(admitted),
                Err(now) => held = now,
            }
        }
    }

    /// The error for a request no limit could admit, if there is a limit:
    /// the allocator's own, or the cache's.
    fn over_limit(&self, request: Layout) -> Option<Error> {
        let requested = request.size();
        let own = self.limit.map(|limit| (self.held.load(Relaxed), limit));
        let (held, limit) = own.or(self.cache.max_bytes().map(|l| (self.cache.held(), l)))?;
        Some(Error::BudgetExceeded { requested, held, limit })
    }

    /// A chunk from the cache (see [`BlockCache::take`]), counted.
    pub(super) fn take(&self, need: usize, want: usize, options: ChunkOptions, request: Layout) -> Result<Chunk, Error> {
        let (Some(least), Some(most)) = (size_class(need), size_class(want.max(need))) else {
            // Past any block size: over a limit if there is one.
            return Err(self.over_limit(request).unwrap_or(Error::out_of_memory(request)));
        };
        // A block size the limit allows: a class, so the cache takes no more.
        let admitted = self.admit(least, most, request)?;
        let want = size_class_at_most(admitted).max(least);
        self.held.fetch_sub(admitted - want, Relaxed);
        let taken = match self.cache.take(need, want, options, request) {
            Ok(taken) => taken,
            Err(e) => {
                self.held.fetch_sub(want, Relaxed);
                return Err(e);
            }
        };
        let usable = taken.chunk.usable();
        // An idle chunk may hold a little more than asked: counted too.
        if usable > want {
            if let Err(e) = self.admit(usable - want, usable - want, request) {
                self.held.fetch_sub(want, Relaxed);
                self.cache.give_back(taken.chunk);
                return Err(e);
            }
        } else {
            self.held.fetch_sub(want - usable, Relaxed);
        }
        let counter = if taken.system_allocations == 0 { &self.hits } else { &self.misses };
        counter.fetch_add(1, Relaxed);
        self.system_allocations.fetch_add(taken.system_allocations, Relaxed);
        Ok(taken.chunk)
    }

    /// Commits `m` to at least `need` bytes, about `want`: `Ok(false)` when
    /// the system refused the range.
    fn commit(&self, m: &mut Mapping, need: usize, want: usize, prefault: bool, request: Layout) -> Result<bool, Error> {
        let (now, page) = (m.committed(), page_size());
        let to = |bytes: usize| bytes.next_multiple_of(page).min(m.reserved());
        let admitted = self.admit(to(need) - now, to(want) - now, request)?;
        let committed = self.cache.commit(m, need, now + admitted, prefault, request);
        let bytes = committed.as_ref().map_or(0, |c| c.unwrap_or(0));
        self.held.fetch_sub(admitted - bytes, Relaxed);
        if committed?.is_none() {
            return Ok(false);
        }
        self.system_allocations.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// Decommits `m` from `to` on; returns the bytes given back (0 when the
    /// system refused: the pages stay committed and counted).
    pub(super) fn decommit(&self, m: &mut Mapping, to: usize) -> usize {
        let freed = self.cache.decommit(m, to).unwrap_or(0);
        if freed != 0 {
            self.held.fetch_sub(freed, Relaxed);
            self.system_frees.fetch_add(1, Relaxed);
        }
        freed
    }

    /// Gives `chunk` back to the cache; returns the system frees that took.
    pub(super) fn give_back(&self, chunk: Chunk) -> u64 {
        self.held.fetch_sub(chunk.usable(), Relaxed);
        let frees = self.cache.give_back(chunk);
        self.system_frees.fetch_add(frees, Relaxed);
        frees
    }

    /// Gives back the chunks from index `from` on.
    pub(super) fn give_back_all(&self, chunks: &mut Vec<Chunk>, from: usize) -> u64 {
        chunks.drain(from.min(chunks.len())..).map(|c| self.give_back(c)).sum()
    }
}

/// What a request that did not fit needs of a chunk that serves it from
/// its start: chunks start page-aligned, so only alignment above a page
/// pads.
struct Need(usize);

impl Need {
    fn new(layout: Layout) -> Need {
        // No overflow: `Layout` keeps `size + align` within `isize::MAX`.
        Need(layout.size() + layout.align().saturating_sub(page_size()))
    }

    /// Whether `chunk` serves the request from its start, as it is.
    fn fits(&self, chunk: &Chunk) -> bool {
        chunk.usable() >= self.0
    }
}

/// Where a request for `layout` at `cursor` in `m` would end, padding
/// included.
fn end_in(m: &Mapping, cursor: usize, layout: Layout) -> usize {
    let pad = m.base().as_ptr().addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
    // No overflow: `cursor <= isize::MAX` and `Layout` keeps `size + align`
    // within `isize::MAX`.
    cursor + pad + layout.size()
}

/// What a region that must reach `need` bytes in place commits: 12.5% more
/// than it has, and at least a page, so that committing takes few system
/// calls while what it holds stays within 12.5% (and a page) of its use.
fn growth(now: usize, need: usize) -> usize {
    now.saturating_add((now / 8).max(page_size())).max(need)
}

impl Region {
    /// Makes room for `layout`: commits more of the current reservation;
    /// else moves to a later chunk of the region that serves it (one a
    /// rewind left) or to a new chunk from the cache. A region with nothing
    /// in use starts over instead, giving its chunks back. A range the
    /// system refuses to commit is passed over, not an error.
    ///
    /// # Safety
    ///
    /// The caller holds the region's lease (as for [`Region::cold`]).
    pub(super) unsafe fn grow(&self, books: &Books, config: &CachingConfig, layout: Layout) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let (current, cursor) = hot.position();
        let prefault = config.prefaults();
        let peak = cold.peak();
        let chunks = cold.chunks();
        if let Some(Chunk::Mapped(m)) = chunks.get_mut(current) {
            let end = end_in(m, cursor, layout);
            if end <= m.reserved() && books.commit(m, end, growth(m.committed(), end), prefault, layout)? {
                hot.set_limit(m.committed());
                hot.sync_held(cold);
                return Ok(());
            }
        }
        let need = Need::new(layout);
        let oom = Error::out_of_memory(layout);
        chunks.try_reserve(1).map_err(|_| oom)?;
        let fresh = current == 0 && cursor == 0;
        // A heap region that fills doubles, so a window chains few blocks.
        let double = match chunks.get(current) {
            Some(Chunk::Heap(b)) if !fresh => 2 * b.size(),
            _ => 0,
        };
        if fresh {
            // Nothing in use: start over, and stay consistent (empty) if
            // what follows fails.
            books.give_back_all(chunks, 0);
            hot.install(None, 0, 0, 0);
            hot.sync_held(cold);
        }
        let chunks = cold.chunks();
        let next = if fresh { 0 } else { current + 1 };
        match (next..chunks.len()).find(|&i| need.fits(&chunks[i])) {
            Some(i) => chunks.swap(next, i),
            None => {
                let used = before_next(hot, layout) + need.0;
                let reserve = config.reserve.map(|bytes| {
                    let bytes = bytes.max(used.saturating_mul(4));
                    let limit = books.limit().into_iter().chain(books.cache.max_bytes()).min();
                    limit.map_or(bytes, |limit| bytes.min(limit))
                });
                let want = need.0.max(config.min_block_size).max(peak).max(double);
                let options = ChunkOptions { block: config.block, reserve };
                let chunk = books.take(need.0, want, options, layout)?;
                chunks.insert(next, chunk);
            }
        }
        let before = if next == 0 { 0 } else { before_next(hot, layout) };
        hot.install(chunks.get(next), next, 0, before);
        hot.sync_held(cold);
        Ok(())
    }

    /// The least that growing for `layout` can cost: the pages to commit in
    /// place, or a new chunk as a heap block of the request's size class
    /// (where a refused reservation falls back to).
    ///
    /// # Safety
    ///
    /// As for [`grow`](Self::grow).
    unsafe fn least(&self, layout: Layout) -> usize {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let (current, cursor) = hot.position();
        if let Some(Chunk::Mapped(m)) = cold.chunks().get(current) {
            let end = end_in(m, cursor, layout);
            if end <= m.reserved() {
                return end.next_multiple_of(page_size()) - m.committed();
            }
        }
        size_class(Need::new(layout).0).unwrap_or(usize::MAX)
    }

    /// Gives back all of the region's memory but its first reservation,
    /// which keeps its address range with nothing committed, and forgets its
    /// peak: for the budget rule and the retain cap.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator, or a reclaiming lease.
    pub(super) unsafe fn shed(&self, books: &Books) {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        cold.forget_peak();
        let chunks = cold.chunks();
        let keep = matches!(chunks.first(), Some(Chunk::Mapped(_)));
        books.give_back_all(chunks, usize::from(keep));
        if let Some(Chunk::Mapped(m)) = chunks.first_mut() {
            books.decommit(m, 0);
        }
        hot.install(chunks.first(), 0, 0, 0);
        hot.sync_held(cold);
    }
}

impl CachingAllocator {
    /// Makes room for `layout` in `region`, which the calling thread leases.
    ///
    /// The one budget rule: when growing would pass `max_bytes`, and the
    /// memory of the allocator's FREE regions plus the cache's idle bytes
    /// would make room, FREE regions give their memory back (largest first)
    /// and the growth is tried once more; otherwise the request is
    /// [`Error::BudgetExceeded`].
    ///
    /// # Safety
    ///
    /// The caller holds `region`'s lease.
    pub(super) unsafe fn grow(
        &self,
        region: &Region,
        layout: Layout,
        shared: Option<&mut Shared>,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract, for every call on `region`.
        let grown = unsafe { region.grow(&self.books, &self.config, layout) };
        let Err(Error::BudgetExceeded { .. }) = grown else {
            return grown;
        };
        // SAFETY: as above.
        let least = unsafe { region.least(layout) };
        let made = match shared {
            Some(shared) => self.make_room(shared, least),
            None => self.make_room(&mut self.lock(), least),
        };
        if !made {
            return grown;
        }
        // SAFETY: as above.
        unsafe { region.grow(&self.books, &self.config, layout) }
    }

    /// Gives back the memory of FREE regions, largest first, until `least`
    /// more bytes fit under the limit; does nothing (and says `false`) when
    /// even all of it would not make room, so that a request that cannot fit
    /// does not strip the regions for nothing.
    #[cold]
    #[inline(never)]
    fn make_room(&self, shared: &mut Shared, least: usize) -> bool {
        let (books, cache) = (&self.books, &self.books.cache);
        if books.limit().is_none() && cache.max_bytes().is_none() {
            return false;
        }
        let regions = || super::regions(&shared.regions).filter(|r| r.is_free());
        // The room under the tighter of the two limits.
        let room = || {
            let own = books.limit().map_or(usize::MAX, |l| l.saturating_sub(books.held.load(Relaxed)));
            let shared = cache.max_bytes().map_or(usize::MAX, |l| {
                l.saturating_sub(cache.held()) + cache.idle_bytes()
            });
            own.min(shared)
        };
        let free: usize = regions().map(Region::held).sum();
        if free == 0 || room() + free < least {
            return false;
        }
        for _ in 0..shared.regions.len() {
            if room() >= least {
                break;
            }
            let Some(largest) = regions().filter(|r| r.held() != 0).max_by_key(|r| r.held()) else {
                break;
            };
            // A thread may lease it meanwhile, lock-free: then it is not ours
            // to empty.
            if largest.lease(RECLAIMING) {
                // SAFETY: the reclaiming lease was just taken.
                unsafe { largest.shed(&self.books) };
                largest.unlease();
            }
        }
        true
    }
}
