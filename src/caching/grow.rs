//! How a region grows — in place, into a chunk a rewind left, or into a new
//! chunk — and the one budget rule; [`Books`]: what the allocator took
//! through its cache, under its own limit, kept without a lock.

use core::alloc::Layout;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::region::{FREE, Region, before_next};
use super::{CachingAllocator, CachingConfig, Shared};
use crate::Error;
use crate::block::{size_class, size_class_at_most};
use crate::block_cache::{BlockCache, ChunkOptions};
use crate::chunk::Chunk;
use crate::os::{Mapping, page_size};

/// The lease a thread takes on a FREE region to give its memory back.
const RECLAIMING: u64 = u64::MAX;

/// The allocator's account at its cache. Atomics, so that a region grows
/// without the allocator's lock.
pub(super) struct Books {
    pub cache: Arc<BlockCache>,
    /// `CachingConfig::max_bytes`: this allocator's, within the cache's.
    pub limit: Option<usize>,
    pub held: AtomicUsize,
    pub system_allocations: AtomicU64,
    pub system_frees: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl Books {
    pub(super) fn new(cache: Arc<BlockCache>, limit: Option<usize>) -> Self {
        let zero = || AtomicU64::new(0);
        Books {
            cache,
            limit,
            held: AtomicUsize::new(0),
            system_allocations: zero(),
            system_frees: zero(),
            hits: zero(),
            misses: zero(),
        }
    }

    /// Counts between `need` and `want` more bytes as held under the
    /// allocator's limit (`want` shrinks to the room left, in whole pages)
    /// and returns them; the caller takes back what it did not use.
    ///
    /// # Errors
    ///
    /// [`Error::BudgetExceeded`] when `need` does not fit; nothing counted.
    fn admit(&self, need: usize, want: usize, request: Layout) -> Result<usize, Error> {
        let want = want.max(need);
        let Some(limit) = self.limit else {
            self.held.fetch_add(want, Relaxed);
            return Ok(want);
        };
        let mut held = self.held.load(Relaxed);
        loop {
            let room = limit.saturating_sub(held) & !(page_size() - 1);
            if need > room {
                let requested = request.size();
                return Err(Error::BudgetExceeded { requested, held, limit });
            }
            let admitted = want.min(room);
            match (self.held).compare_exchange_weak(held, held + admitted, Relaxed, Relaxed) {
                Ok(_) => return Ok(admitted),
                Err(now) => held = now,
            }
        }
    }

    /// The error for a request past any block size: over the allocator's
    /// limit or the cache's if there is one, else `otherwise`.
    pub(super) fn past_any_size(&self, request: Layout, otherwise: Error) -> Error {
        let own = self.limit.map(|l| (self.held.load(Relaxed), l));
        let limit = own.or(self.cache.max_bytes().map(|l| (self.cache.held(), l)));
        let over = |(held, limit)| Error::BudgetExceeded { requested: request.size(), held, limit };
        limit.map_or(otherwise, over)
    }

    /// A chunk from the cache (see [`BlockCache::take`]), counted.
    pub(super) fn take(&self, need: usize, want: usize, options: ChunkOptions, request: Layout) -> Result<Chunk, Error> {
        let reserving = options.reserve.is_some();
        // At least the request's pages (a reservation) or size class (a heap
        // block); at most `want`'s size class, so that a reservation falling
        // back to a heap block still gets one that holds `want`.
        let (Some(least), Some(most)) = (chunk_size(need, reserving), size_class(want.max(need))) else {
            return Err(self.past_any_size(request, Error::out_of_memory(request)));
        };
        // A size the limit allows: whole pages of a reservation, or a size
        // class of a block, so the cache takes no more.
        let admitted = self.admit(least, most, request)?;
        let want = if reserving { admitted } else { size_class_at_most(admitted).max(least) };
        self.held.fetch_sub(admitted - want, Relaxed);
        // A heap block (where a reservation falls back to) within the room.
        let most = if self.limit.is_some() { want } else { usize::MAX };
        let options = ChunkOptions { most, ..options };
        let mut taken = self.cache.take(need, want, options, request).inspect_err(|_| {
            self.held.fetch_sub(want, Relaxed);
        })?;
        // An idle chunk may hold more than asked: counted too, or, if that
        // does not fit and it is a reservation, decommitted down to `want`.
        let extra = taken.chunk.usable().saturating_sub(want);
        if extra > 0 && self.admit(extra, extra, request).is_err() {
            if let Chunk::Mapped(m) = &mut taken.chunk {
                self.cache.decommit(m, want);
            }
            let extra = taken.chunk.usable().saturating_sub(want);
            if let Err(e) = self.admit(extra, extra, request) {
                self.held.fetch_sub(want, Relaxed);
                self.cache.give_back(taken.chunk);
                return Err(e);
            }
        }
        self.held.fetch_sub(want.saturating_sub(taken.chunk.usable()), Relaxed);
        let counter = if taken.system_allocations == 0 { &self.hits } else { &self.misses };
        counter.fetch_add(1, Relaxed);
        self.system_allocations.fetch_add(taken.system_allocations, Relaxed);
        Ok(taken.chunk)
    }

    /// Commits `m` to at least `need` bytes, about `want`: `Ok(false)` when
    /// the system refused the range.
    fn commit(&self, m: &mut Mapping, need: usize, want: usize, prefault: bool, request: Layout) -> Result<bool, Error> {
        let now = m.committed();
        let to = |bytes: usize| bytes.next_multiple_of(page_size()).min(m.reserved());
        let admitted = self.admit(to(need) - now, to(want) - now, request)?;
        let committed = self.cache.commit(m, need, now + admitted, prefault, request);
        let bytes = committed.as_ref().map_or(0, |c| c.unwrap_or(0));
        self.held.fetch_sub(admitted - bytes, Relaxed);
        self.system_allocations.fetch_add(u64::from(bytes != 0), Relaxed);
        Ok(committed?.is_some())
    }

    /// Decommits `m` from `to` on; a refusal leaves the pages committed and
    /// counted.
    pub(super) fn decommit(&self, m: &mut Mapping, to: usize) {
        let freed = self.cache.decommit(m, to).unwrap_or(0);
        self.held.fetch_sub(freed, Relaxed);
        self.system_frees.fetch_add(u64::from(freed != 0), Relaxed);
    }

    /// Gives back the chunks from index `from` on.
    pub(super) fn give_back_all(&self, chunks: &mut Vec<Chunk>, from: usize) {
        for chunk in chunks.drain(from.min(chunks.len())..) {
            self.give_back(chunk);
        }
    }

    /// Gives `chunk` back to the cache.
    pub(super) fn give_back(&self, chunk: Chunk) {
        self.held.fetch_sub(chunk.usable(), Relaxed);
        let frees = self.cache.give_back(chunk);
        self.system_frees.fetch_add(frees, Relaxed);
    }
}

/// What one request needs of its region, reckoned once: for growing, and
/// for the budget rule's question of what growing can cost.
pub(super) struct Need {
    layout: Layout,
    /// Bytes a chunk must make usable from its start to serve the request:
    /// chunks start page-aligned, so only alignment above a page pads.
    bytes: usize,
    /// Where the request ends in the current chunk, if that is a
    /// reservation that can hold it: the region grows in place.
    end: Option<usize>,
    /// What a new chunk should hold: the region's peak, its doubled heap
    /// block, the configured least.
    want: usize,
    /// The least growing can cost against a limit: the pages to commit in
    /// place, or a new chunk's pages (a reservation) or size class (a heap
    /// block).
    least: usize,
    /// Nothing in use in the region: a move gives its chunks back, so under
    /// a limit its memory counts as room.
    fresh: bool,
}

/// What a new chunk of `bytes` costs against a limit: whole pages of a
/// reservation, or a block's size class. `None` past any size.
fn chunk_size(bytes: usize, reserving: bool) -> Option<usize> {
    if reserving { bytes.checked_next_multiple_of(page_size()) } else { size_class(bytes) }
}

/// What a region that must reach `need` bytes in place commits: 12.5% more
/// than it has, at least a page, so it grows in few system calls and holds
/// within 12.5% (and a page) of its use.
fn growth(now: usize, need: usize) -> usize {
    now.saturating_add((now / 8).max(page_size())).max(need)
}

impl Need {
    /// Whether the region grows in place (commits more of its reservation)
    /// to serve it, rather than moving to another chunk.
    pub(super) fn in_place(&self) -> bool {
        self.end.is_some()
    }
}

impl Region {
    /// What `layout` needs of this region now.
    ///
    /// # Safety
    ///
    /// As for [`Region::cold`].
    pub(super) unsafe fn need(&self, layout: Layout, config: &CachingConfig) -> Need {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let (current, cursor) = hot.position();
        let fresh = current == 0 && cursor == 0;
        // No overflow: `Layout` keeps `size + align` within `isize::MAX`.
        let bytes = layout.size() + layout.align().saturating_sub(page_size());
        let (mut end, mut in_place, mut double) = (None, 0, 0);
        match cold.chunks.get(current) {
            Some(Chunk::Mapped(m)) => {
                let pad = m.base().as_ptr().addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
                // No overflow, as above.
                end = Some(cursor + pad + layout.size()).filter(|&end| end <= m.reserved());
                in_place = end.map_or(0, |end| end.next_multiple_of(page_size()) - m.committed());
            }
            // A heap region that fills doubles, so a window chains few blocks.
            Some(Chunk::Heap(b)) if !fresh => double = 2 * b.size(),
            _ => {}
        }
        let new_chunk = || chunk_size(bytes, config.reserve.is_some()).unwrap_or(usize::MAX);
        Need {
            layout,
            bytes,
            end,
            want: bytes.max(config.min_block_size).max(cold.peak).max(double),
            least: if end.is_some() { in_place } else { new_chunk() },
            fresh,
        }
    }

    /// Makes room for `need`: commits more of the current reservation;
    /// else moves to a later chunk of its own that serves it (one a rewind
    /// left), or to a new chunk from the cache, giving its chunks back if
    /// nothing in it is in use. A range the system refuses to commit is
    /// passed over, not an error.
    ///
    /// # Safety
    ///
    /// As for [`Region::cold`].
    pub(super) unsafe fn grow(&self, books: &Books, config: &CachingConfig, need: &Need) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let (current, _) = hot.position();
        let layout = need.layout;
        if let (Some(end), Some(Chunk::Mapped(m))) = (need.end, cold.chunks.get_mut(current)) {
            if books.commit(m, end, growth(m.committed(), end), config.prefaults(), layout)? {
                hot.set_limit(m.committed());
                hot.sync_held(cold);
                return Ok(());
            }
        }
        cold.chunks.try_reserve(1).map_err(|_| Error::out_of_memory(layout))?;
        let next = if need.fresh { 0 } else { current + 1 };
        match (next..cold.chunks.len()).find(|&i| cold.chunks[i].usable() >= need.bytes) {
            Some(i) => cold.chunks.swap(next, i),
            None => {
                // A reservation four times what the window uses, so a region
                // that outgrew one moves rarely; never past a limit.
                let used = before_next(hot, layout) + need.bytes;
                let limits = books.limit.into_iter().chain(books.cache.max_bytes()).min();
                let reserve = config.reserve.map(|bytes| {
                    let bytes = bytes.max(used.saturating_mul(4));
                    limits.map_or(bytes, |limit| bytes.min(limit))
                });
                let options = ChunkOptions { block: config.block, reserve, most: usize::MAX };
                cold.chunks.insert(next, books.take(need.bytes, need.want, options, layout)?);
                if need.fresh {
                    // Nothing in use and nothing that served: start over.
                    books.give_back_all(&mut cold.chunks, 1);
                }
            }
        }
        let before = if next == 0 { 0 } else { before_next(hot, layout) };
        hot.install(cold.chunks.get(next), next, 0, before);
        hot.sync_held(cold);
        Ok(())
    }
}

impl CachingAllocator {
    /// Makes room for `layout` in `region`, under the one budget rule: when
    /// growing would pass a limit, and the memory of this allocator's FREE
    /// regions (and of `region` itself, if nothing in it is in use: it is
    /// moving) plus the cache's idle bytes would make room, that memory is
    /// given back (largest first) and growing is tried once more; otherwise
    /// the request is [`Error::BudgetExceeded`].
    ///
    /// # Safety
    ///
    /// The calling thread leases `region`; `shared` is the lock's guard if
    /// it holds it.
    pub(super) unsafe fn grow(&self, region: &Region, layout: Layout, shared: Option<&mut Shared>) -> Result<(), Error> {
        // The region may gain a chunk.
        self.no_short_reset();
        // SAFETY: the caller's contract, for every call on `region`.
        let need = unsafe { region.need(layout, &self.config) };
        // SAFETY: as above.
        let grown = unsafe { region.grow(&self.books, &self.config, &need) };
        let Err(Error::BudgetExceeded { .. }) = grown else {
            return grown;
        };
        let own = (need.fresh && need.end.is_none()).then_some(region);
        let made = match shared {
            Some(shared) => self.make_room(shared, need.least, own),
            None => self.make_room(&mut self.lock(), need.least, own),
        };
        // SAFETY: as above.
        if made { unsafe { region.grow(&self.books, &self.config, &region.need(layout, &self.config)) } } else { grown }
    }

    /// Gives back the memory of `own` (the caller's region, with nothing in
    /// use) and of FREE regions, largest first, until `least` more bytes fit
    /// under both limits; does nothing (`false`) when even all of it would
    /// not, so a probe that cannot fit strips nothing.
    #[cold]
    #[inline(never)]
    fn make_room(&self, shared: &mut Shared, least: usize, own: Option<&Region>) -> bool {
        let (books, cache) = (&self.books, &self.books.cache);
        let room = || {
            let own = books.limit.map_or(usize::MAX, |l| l.saturating_sub(books.held.load(Relaxed)));
            let idle = cache.idle_bytes();
            let common = cache.max_bytes().map_or(usize::MAX, |l| l.saturating_sub(cache.held()) + idle);
            own.min(common)
        };
        let free = || super::regions(&shared.regions).filter(|r| r.is_leased_to(FREE) && r.held() != 0);
        let reclaimable: usize = free().chain(own).map(Region::held).sum();
        if reclaimable == 0 || room().saturating_add(reclaimable) < least {
            return false;
        }
        if let Some(own) = own {
            // SAFETY: the caller leases it, with nothing in use.
            unsafe { own.shed(books, None) };
        }
        for _ in 0..shared.regions.len() {
            let Some(largest) = free().max_by_key(|r| r.held()).filter(|_| room() < least) else {
                break;
            };
            // A thread may lease it meanwhile, lock-free: then it is not ours.
            if largest.lease(RECLAIMING) {
                // SAFETY: the reclaiming lease was just taken: the region is
                // FREE of scratch (a FREE region's cursor is 0) and ours.
                unsafe { largest.shed(books, Some(0)) };
                largest.unlease();
            }
        }
        true
    }
}
