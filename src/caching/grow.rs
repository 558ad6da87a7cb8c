//! How a region grows — in place, into a chunk a rewind left, or into a new
//! chunk — the one budget rule, and [`prewarm`](CachingAllocator::prewarm),
//! which grows regions ahead to a recorded run's plan.

use core::alloc::Layout;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{MutexGuard, TryLockError};

use super::account::{Account, chunk_size};
use super::lease::lease_new;
use super::memory::block_cache::Reclaim;
use super::memory::chunk::Chunk;
use super::memory::counted;
use super::region::{FREE, Leased, RECLAIMING, Region, used_before_next};
use super::{CachingAllocator, CachingConfig, Core, LockedState, Plan, deref, exclusive};
use crate::Error;
use crate::os::page_size;

/// What one request needs of its region, worked out once: for growing, and
/// for the budget rule's question of what growing can cost.
pub(super) struct Need {
    layout: Layout,
    /// Bytes a chunk must make usable from its start to serve the request:
    /// chunks start page-aligned, so only alignment above a page pads.
    usable: usize,
    /// Where the request ends in the current chunk, if that is a
    /// reservation that can hold it: the region grows in place.
    end_in_place: Option<usize>,
    /// What a new chunk should hold: the region's peak, its doubled heap
    /// block, the configured least.
    target: usize,
    /// The least growing can cost against a limit: the pages to commit in
    /// place, or a new chunk's pages (a reservation) or size class (a heap
    /// block).
    least_cost: usize,
    /// Nothing in use in the region: a move gives its chunks back, so under
    /// a limit its memory counts as room.
    unused: bool,
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
        self.end_in_place.is_some()
    }
}

impl Leased<'_> {
    /// What `layout` needs of this region now.
    pub(super) fn need(&mut self, layout: Layout, config: &CachingConfig) -> Need {
        let (bump, list) = self.parts();
        let (current, cursor) = bump.position();
        let unused = current == 0 && cursor == 0;
        // No overflow: `Layout` keeps `size + align` within `isize::MAX`.
        let bytes = layout.size() + layout.align().saturating_sub(page_size());
        let (mut end, mut in_place, mut double) = (None, 0, 0);
        match list.chunks.get(current) {
            Some(Chunk::Mapped(m)) => {
                let pad = m.base().as_ptr().addr().wrapping_add(cursor).wrapping_neg()
                    & (layout.align() - 1);
                // No overflow, as above.
                end = Some(cursor + pad + layout.size()).filter(|&end| end <= m.reserved());
                in_place = end.map_or(0, |end| end.next_multiple_of(page_size()) - m.committed());
            }
            // A heap region that fills doubles, so a window chains few blocks.
            Some(Chunk::Heap(b)) if !unused => double = 2 * b.size(),
            _ => {}
        }
        let new_chunk = || chunk_size(bytes, config.reserve.is_some()).unwrap_or(usize::MAX);
        Need {
            layout,
            usable: bytes,
            end_in_place: end,
            target: bytes.max(config.min_block_size).max(list.peak).max(double),
            least_cost: if end.is_some() { in_place } else { new_chunk() },
            unused,
        }
    }

    /// Makes room for `need`: commits more of the current reservation;
    /// else moves to a later chunk of its own that serves it (one a rewind
    /// left), or to a new chunk from the cache, giving its chunks back if
    /// nothing in it is in use. A range the system refuses to commit is
    /// passed over, not an error.
    pub(super) fn grow(
        &mut self,
        account: &Account,
        config: &CachingConfig,
        need: &Need,
    ) -> Result<(), Error> {
        let (bump, list) = self.parts();
        let (current, _) = bump.position();
        let layout = need.layout;
        if let (Some(end), Some(Chunk::Mapped(m))) =
            (need.end_in_place, list.chunks.get_mut(current))
        {
            if account.commit(
                m,
                end,
                growth(m.committed(), end).max(config.region_cap.unwrap_or(0)),
                config.prefaults(),
                layout,
            )? {
                bump.limit.store(m.committed(), Relaxed);
                bump.sync_held(list);
                return Ok(());
            }
        }
        list.chunks
            .try_reserve(1)
            .map_err(|_| Error::out_of_memory(layout))?;
        let next = if need.unused { 0 } else { current + 1 };
        match (next..list.chunks.len()).find(|&i| list.chunks[i].usable() >= need.usable) {
            Some(i) => list.chunks.swap(next, i),
            None => {
                // A reservation four times what the window uses, so a region
                // that outgrew one moves rarely; never past a limit.
                let used = used_before_next(bump, layout) + need.usable;
                let limits = account
                    .ledger
                    .limit()
                    .into_iter()
                    .chain(account.cache.max_bytes())
                    .min();
                let reserve = config.reserve.map(|bytes| {
                    let bytes = bytes.max(used.saturating_mul(4));
                    limits.map_or(bytes, |limit| bytes.min(limit))
                });
                let taken =
                    account.take(need.usable, need.target, reserve, config.block, layout)?;
                list.chunks.insert(next, taken);
                if need.unused {
                    // Nothing in use and nothing that served: start over.
                    account.give_back_all(&mut list.chunks, 1);
                }
            }
        }
        let used_before = if next == 0 {
            0
        } else {
            used_before_next(bump, layout)
        };
        bump.install(list.chunks.get(next), next, 0, used_before);
        bump.sync_held(list);
        Ok(())
    }
}

impl CachingAllocator {
    /// Commits at load time what a recorded run's regions held
    /// ([`Plan::regions`](crate::trace::Plan::regions), from
    /// [`Trace::plan`](crate::trace::Trace::plan)), touching every page if
    /// the config [prefaults](CachingConfig::prefault): the first inference
    /// then makes no system call and, with prefault, takes no page fault in
    /// the allocator. The regions are FREE; threads lease them in the order
    /// they first allocate, the largest first, so the plan serves a run
    /// whose threads first allocate busiest first (a runtime's main thread,
    /// then its workers); a run in another order may still grow, and so may
    /// a run with the debug checks on (the plan holds no canaries). A phone
    /// app pays this at launch instead of on the first request.
    ///
    /// ```
    /// use tempalloc::trace::Plan;
    /// use tempalloc::{CachingAllocator, CachingConfig, KernelContext, TempAllocator};
    ///
    /// let config = CachingConfig::default().prefault(true).debug_checks(false);
    /// let mut temp = CachingAllocator::with_config(config);
    /// temp.prewarm(&Plan::from_regions([1 << 20]))?;
    /// let before = temp.stats().system_allocations;
    /// KernelContext::new(&temp).scratch::<u8>(1 << 20)?; // the first inference
    /// assert_eq!(temp.stats().system_allocations, before);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What taking memory fails with ([`Error::BudgetExceeded`] past a
    /// limit, [`Error::OutOfMemory`]); what was committed before stays.
    pub fn prewarm(&mut self, plan: &Plan) -> Result<(), Error> {
        self.no_short_reset();
        let (mut state, account) = exclusive(&mut self.core, self.reachable);
        for (i, &bytes) in plan.regions().iter().enumerate() {
            let layout = Layout::from_size_align(bytes, 1).map_err(|_| Error::layout(bytes, 1))?;
            if state.regions.len() == i {
                lease_new(&mut state.regions, FREE).ok_or(Error::out_of_memory(layout))?;
            }
            // SAFETY: `&mut self`: no thread holds a guard of the region or
            // can make one, and this is its one guard.
            let mut region = unsafe { Leased::new(deref(&state.regions[i])) };
            if bytes > region.held() {
                let need = region.need(layout, &self.config);
                region.grow(account, &self.config, &need)?;
            }
        }
        Ok(())
    }

    /// Makes room for `layout` in `region`, under the one budget rule: when
    /// growing would pass a limit, and the memory of this allocator's FREE
    /// regions (and of `region` itself, if nothing in it is in use: it is
    /// moving) plus the cache's idle bytes would make room, that memory is
    /// given back (largest first) and growing is tried once more; otherwise
    /// the request is [`Error::BudgetExceeded`]. `state` is the lock's
    /// guard if the caller holds it.
    pub(super) fn grow(
        &self,
        region: &mut Leased,
        layout: Layout,
        state: Option<&mut LockedState>,
    ) -> Result<(), Error> {
        // The region may gain a chunk.
        self.no_short_reset();
        let need = region.need(layout, &self.config);
        let grown = region.grow(self.account(), &self.config, &need);
        let Err(Error::BudgetExceeded { .. }) = grown else {
            return grown;
        };
        let own = (need.unused && need.end_in_place.is_none()).then_some(&mut *region);
        let made = match state {
            Some(state) => self.make_room(state, need.least_cost, own),
            None => self.make_room(&mut self.lock(), need.least_cost, own),
        };
        if !made {
            return grown;
        }
        let need = region.need(layout, &self.config);
        region.grow(self.account(), &self.config, &need)
    }

    /// Gives back the memory of `own` (the caller's region, with nothing in
    /// use) and of FREE regions, largest first, until `least` more bytes fit
    /// under both limits; does nothing (`false`) when even all of it would
    /// not, so a probe that cannot fit strips nothing.
    #[cold]
    #[inline(never)]
    fn make_room(&self, state: &mut LockedState, least: usize, own: Option<&mut Leased>) -> bool {
        let (account, cache) = (self.account(), &self.account().cache);
        let room = || {
            let own = account.ledger.room();
            let idle = cache.idle_bytes();
            let common = cache
                .max_bytes()
                .map_or(usize::MAX, |l| l.saturating_sub(cache.held()) + idle);
            own.min(common)
        };
        let free =
            || super::regions(&state.regions).filter(|r| r.is_leased_to(FREE) && r.held() != 0);
        let reclaimable =
            free().map(Region::held).sum::<usize>() + own.as_ref().map_or(0, |r| r.held());
        if reclaimable == 0 || room().saturating_add(reclaimable) < least {
            return false;
        }
        if let Some(own) = own {
            // Nothing in it is in use (the caller's `Need::unused`).
            own.give_back(account, None);
        }
        for _ in 0..state.regions.len() {
            let Some(largest) = free().max_by_key(|r| r.held()).filter(|_| room() < least) else {
                break;
            };
            give_back_free(largest, account, 0);
        }
        true
    }
}

/// Gives back the memory of `region`, FREE, down to `keep` bytes (see
/// [`Leased::give_back`]), unless a thread leases it first, lock-free; returns
/// the bytes given back. The caller holds the allocator's lock.
fn give_back_free(region: &Region, account: &Account, keep: usize) -> usize {
    // A thread may lease it meanwhile, lock-free: then it is not ours.
    if !region.lease(RECLAIMING) {
        return 0;
    }
    // SAFETY: `lease` stored `RECLAIMING` over FREE (no region is left
    // RECLAIMING: reclaimers hold the allocator's lock and unlease), so no
    // thread leases the region, and this is its one guard.
    let mut reclaimed = unsafe { Leased::new(region) };
    let held = reclaimed.held();
    // A FREE region's cursor is 0: nothing in it is in use.
    reclaimed.give_back(account, Some(keep));
    let given = held - reclaimed.held();
    reclaimed.unlease(FREE);
    given
}

impl Core {
    /// The FREE regions with memory, and the lock's state, unless another
    /// thread holds the lock.
    fn idle(&self) -> Option<MutexGuard<'_, LockedState>> {
        match self.state.try_lock() {
            Ok(state) => Some(counted(state)),
            Err(TryLockError::Poisoned(state)) => Some(counted(state.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// Another allocator's growth under the cache's hard limit takes back the
/// memory of this one's FREE regions (no window is using it), down to its
/// floor, while its lock is free.
impl Reclaim for Core {
    fn reclaimable(&self) -> usize {
        let Some(state) = self.idle() else {
            return 0;
        };
        let free = super::regions(&state.regions).filter(|r| r.is_leased_to(FREE));
        let free = free.map(Region::held).sum::<usize>();
        free.min(self.account.ledger.held().saturating_sub(self.floor))
    }

    fn reclaim(&self, bytes: usize) -> usize {
        let Some(state) = self.idle() else {
            return 0;
        };
        let mut given = 0;
        for _ in 0..state.regions.len() {
            let above = self.account.ledger.held().saturating_sub(self.floor);
            let largest = super::regions(&state.regions)
                .filter(|r| r.is_leased_to(FREE) && r.held() != 0)
                .max_by_key(|r| r.held());
            let Some(largest) = largest.filter(|_| given < bytes && above > 0) else {
                break;
            };
            let take = (bytes - given).min(above);
            given += give_back_free(largest, &self.account, largest.held().saturating_sub(take));
        }
        given
    }
}
