//! [`Books`]: what an allocator took through its cache, under its own
//! limit, kept in atomics so that a region grows without the allocator's
//! lock.

use core::alloc::Layout;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::Error;
use crate::block::{size_class, size_class_at_most};
use crate::block_cache::{BlockCache, ChunkOptions, charge};
use crate::chunk::Chunk;
use crate::os::{Mapping, page_size};

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
        let over = |(held, limit)| Error::BudgetExceeded {
            requested: request.size(),
            held,
            limit,
        };
        charge(&self.held, self.limit, need, want).map_err(over)
    }

    /// The error for a request past any block size: over the allocator's
    /// limit or the cache's if there is one, else `otherwise`.
    pub(super) fn past_any_size(&self, request: Layout, otherwise: Error) -> Error {
        let own = self.limit.map(|l| (self.held.load(Relaxed), l));
        let limit = own.or(self.cache.max_bytes().map(|l| (self.cache.held(), l)));
        let over = |(held, limit)| Error::BudgetExceeded {
            requested: request.size(),
            held,
            limit,
        };
        limit.map_or(otherwise, over)
    }

    /// A chunk from the cache (see [`BlockCache::take`]), counted.
    pub(super) fn take(
        &self,
        need: usize,
        want: usize,
        options: ChunkOptions,
        request: Layout,
    ) -> Result<Chunk, Error> {
        let reserving = options.reserve.is_some();
        // At least the request's pages (a reservation) or size class (a heap
        // block); at most `want`'s size class, so that a reservation falling
        // back to a heap block still gets one that holds `want`.
        let (Some(least), Some(most)) = (chunk_size(need, reserving), size_class(want.max(need)))
        else {
            return Err(self.past_any_size(request, Error::out_of_memory(request)));
        };
        // A size the limit allows: whole pages of a reservation, or a size
        // class of a block, so the cache takes no more.
        let admitted = self.admit(least, most, request)?;
        let want = if reserving {
            admitted
        } else {
            size_class_at_most(admitted).max(least)
        };
        self.held.fetch_sub(admitted - want, Relaxed);
        // A heap block (where a reservation falls back to) within the room.
        let most = if self.limit.is_some() {
            want
        } else {
            usize::MAX
        };
        let options = ChunkOptions { most, ..options };
        let mut taken = self
            .cache
            .take(need, want, options, request)
            .inspect_err(|_| {
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
        self.held
            .fetch_sub(want.saturating_sub(taken.chunk.usable()), Relaxed);
        let counter = if taken.system_allocations == 0 {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        self.system_allocations
            .fetch_add(taken.system_allocations, Relaxed);
        Ok(taken.chunk)
    }

    /// Commits `m` to at least `need` bytes, about `want`: `Ok(false)` when
    /// the system refused the range.
    pub(super) fn commit(
        &self,
        m: &mut Mapping,
        need: usize,
        want: usize,
        prefault: bool,
        request: Layout,
    ) -> Result<bool, Error> {
        let now = m.committed();
        let to = |bytes: usize| bytes.next_multiple_of(page_size()).min(m.reserved());
        let admitted = self.admit(to(need) - now, to(want) - now, request)?;
        let committed = self
            .cache
            .commit(m, need, now + admitted, prefault, request);
        let bytes = committed.as_ref().map_or(0, |c| c.unwrap_or(0));
        self.held.fetch_sub(admitted - bytes, Relaxed);
        self.system_allocations
            .fetch_add(u64::from(bytes != 0), Relaxed);
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

/// What a new chunk of `bytes` costs against a limit: whole pages of a
/// reservation, or a block's size class. `None` past any size.
pub(super) fn chunk_size(bytes: usize, reserving: bool) -> Option<usize> {
    if reserving {
        bytes.checked_next_multiple_of(page_size())
    } else {
        size_class(bytes)
    }
}
