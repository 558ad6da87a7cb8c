//! [`Account`]: what an allocator took through its cache, under its own
//! limit, kept in atomics so that a region grows without the allocator's
//! lock.

use core::alloc::Layout;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::memory::block::{BlockOptions, size_class, size_class_at_most};
use super::memory::block_cache::{BlockCache, ChunkOptions};
use super::memory::chunk::Chunk;
use super::memory::ledger::Ledger;
use crate::Error;
use crate::os::{Mapping, page_size};

/// The allocator's account at its cache, under its own limit. Atomics, so
/// that a region grows without the allocator's lock.
pub(super) struct Account {
    pub cache: Arc<BlockCache>,
    /// Under `CachingConfig::max_bytes`: this allocator's, within the
    /// cache's.
    pub ledger: Ledger,
}

impl Account {
    pub(super) fn new(cache: Arc<BlockCache>, limit: Option<usize>) -> Self {
        Account {
            cache,
            ledger: Ledger::new(limit),
        }
    }

    /// Whether a limit, the allocator's or the cache's, may refuse growth:
    /// then growing takes only what a request needs, never room ahead that
    /// another thread's request may need at the same moment.
    pub(super) fn limited(&self) -> bool {
        self.ledger.limit().is_some() || self.cache.max_bytes().is_some()
    }

    /// The error for a request past any block size: over the allocator's
    /// limit or the cache's if there is one, else `otherwise`.
    pub(super) fn past_any_size(&self, request: Layout, otherwise: Error) -> Error {
        let own = self.ledger.over(request);
        own.or_else(|| self.cache.over(request))
            .unwrap_or(otherwise)
    }

    /// A chunk from the cache (see [`BlockCache::take`]), counted: a
    /// reservation of `reserve` bytes if some, else a heap block.
    pub(super) fn take(
        &self,
        need: usize,
        want: usize,
        reserve: Option<usize>,
        block: BlockOptions,
        request: Layout,
    ) -> Result<Chunk, Error> {
        let reserving = reserve.is_some();
        // At least the request's pages (a reservation) or size class (a heap
        // block); at most `want`'s size class, so that a reservation falling
        // back to a heap block still gets one that holds `want`.
        let (Some(least), Some(most)) = (chunk_size(need, reserving), size_class(want.max(need)))
        else {
            return Err(self.past_any_size(request, Error::out_of_memory(request)));
        };
        // A size the limit allows: whole pages of a reservation, or a size
        // class of a block, so the cache takes no more.
        let fit = |bytes: usize| {
            if reserving {
                bytes & !(page_size() - 1)
            } else {
                size_class_at_most(bytes)
            }
        };
        let charge = self.ledger.charge(least, most, fit, request)?;
        let want = charge.bytes();
        let options = ChunkOptions {
            block,
            reserve,
            // A heap block (where a reservation falls back to) within the room.
            most: self.ledger.limit().map_or(usize::MAX, |_| want),
            ahead: !self.limited(),
        };
        let mut taken = self.cache.take(need, want, options, request)?;
        // An idle chunk may hold more than asked: counted too, or, if that
        // does not fit and it is a reservation, decommitted down to `want`.
        let used = taken.chunk.usable().min(want);
        charge.keep(used);
        let extra = taken.chunk.usable() - used;
        if extra > 0 {
            let counted = match self.ledger.charge(extra, extra, |b| b, request) {
                Ok(charge) => Ok(charge),
                Err(_) => {
                    if let Chunk::Mapped(m) = &mut taken.chunk {
                        self.cache.decommit(m, want);
                    }
                    let extra = taken.chunk.usable() - used;
                    self.ledger.charge(extra, extra, |b| b, request)
                }
            };
            match counted {
                Ok(charge) => charge.keep_all(),
                Err(e) => {
                    self.ledger.release(used);
                    self.cache.give_back(taken.chunk);
                    return Err(e);
                }
            }
        }
        let counter = if taken.system_allocations == 0 {
            &self.ledger.hits
        } else {
            &self.ledger.misses
        };
        counter.fetch_add(1, Relaxed);
        (self.ledger.system_allocations).fetch_add(taken.system_allocations, Relaxed);
        Ok(taken.chunk)
    }

    /// Commits `m` to at least `need` bytes, about `want` (only `need`
    /// under a limit): `Ok(false)` when the system refused the range.
    pub(super) fn commit(
        &self,
        m: &mut Mapping,
        need: usize,
        want: usize,
        prefault: bool,
        request: Layout,
    ) -> Result<bool, Error> {
        let now = m.committed();
        let want = if self.limited() { need } else { want };
        let to = |bytes: usize| bytes.next_multiple_of(page_size()).min(m.reserved());
        let whole = |bytes: usize| bytes & !(page_size() - 1);
        let charge = self
            .ledger
            .charge(to(need) - now, to(want) - now, whole, request)?;
        let committed = self
            .cache
            .commit(m, need, now + charge.bytes(), prefault, request)?;
        let bytes = committed.unwrap_or(0);
        charge.keep(bytes);
        (self.ledger.system_allocations).fetch_add(u64::from(bytes != 0), Relaxed);
        Ok(committed.is_some())
    }

    /// Decommits `m` from `to` on; a refusal leaves the pages committed and
    /// counted.
    pub(super) fn decommit(&self, m: &mut Mapping, to: usize) {
        let freed = self.cache.decommit(m, to).unwrap_or(0);
        self.ledger.release(freed);
        (self.ledger.system_frees).fetch_add(u64::from(freed != 0), Relaxed);
    }

    /// Gives back the chunks from index `from` on.
    pub(super) fn give_back_all(&self, chunks: &mut Vec<Chunk>, from: usize) {
        for chunk in chunks.drain(from.min(chunks.len())..) {
            self.give_back(chunk);
        }
    }

    /// Gives `chunk` back to the cache.
    pub(super) fn give_back(&self, chunk: Chunk) {
        self.ledger.release(chunk.usable());
        let frees = self.cache.give_back(chunk);
        (self.ledger.system_frees).fetch_add(frees, Relaxed);
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
