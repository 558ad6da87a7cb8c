//! [`Region`]: one bump range and the chunks behind it — how a region
//! bumps, rewinds, resets and gives memory back. Its bump state, which the
//! fast path reads and writes, and the bump itself are below the context,
//! in `crate::fast_path`.
//!
//! Whatever changes a region goes through a [`Leased`] guard, which only
//! the region's leaseholder (or a caller with `&mut` to the allocator)
//! makes; the fast path, which makes none, bumps under the guard's
//! contract (`BumpState::bump_raw`). The bump state's fields are atomics
//! that only the guard's holder writes;
//! relaxed loads and stores compile to plain moves, and let `stats` and
//! `checkpoint` read them from any thread. A chunk is the region's until
//! it goes back to the cache, which may lend it to another region.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ops::Deref;
use core::ptr::{self, NonNull};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};

use super::account::Account;
use super::memory::block::size_class;
use super::memory::chunk::Chunk;
use crate::fast_path::BumpState;
use crate::os::page_size;

/// The `owner` of a region nobody leases.
pub(super) const FREE: u64 = 0;

/// The `owner` of a FREE region a thread leased for the moment, to give
/// its memory back (the budget rule).
pub(super) const RECLAIMING: u64 = u64::MAX;

/// Counters a region's `BumpState::flush` adds to at resets and
/// rewinds.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) allocations: u64,
    pub(super) bytes_requested: u64,
    pub(super) high_water: usize,
    /// The most bytes live at once in the window the last reset ended.
    pub(super) last_window_high: usize,
    /// Not beside `bytes_requested`: a reset adds to both, and the two
    /// adds made one vector add that cost it four instructions more.
    pub(super) resets: u64,
    pub(super) canary_violations: u64,
}

impl Totals {
    /// Closes the window at a reset: `high` is the most bytes it had live
    /// at once.
    #[inline]
    pub(super) fn end_window(&mut self, high: usize) {
        self.last_window_high = high;
        self.high_water = self.high_water.max(high);
        self.resets += 1;
    }
}

/// Aligned to 128 bytes (two cache lines, as crossbeam's `CachePadded` on
/// x86_64), so threads bumping in neighbouring regions never share a line.
/// `#[repr(C)]` with the bump state first, so that a pointer to the region
/// stands for one to its bump state, which is what a thread remembers
/// (`fast_path::Thread`), and back.
#[repr(C, align(128))]
pub(super) struct Region {
    /// What the fast path reads and writes (`fast_path::BumpState`).
    bump: BumpState,
    /// [`FREE`], the serial of the thread leasing the region until the
    /// next reset or rewind, or [`RECLAIMING`].
    owner: AtomicU64,
    /// Reached only through [`Leased::parts`].
    list: UnsafeCell<ChunkList>,
}

// SAFETY: `bump` and `owner` are atomics, and `list` is reached only through
// `Leased::parts`, which needs `&mut` to the region's one guard (one at a
// time: the contract of `Leased::new`), so no two threads reach it at once.
unsafe impl Sync for Region {}

/// The right to change a region — its chunks, its cursor, its lease — for
/// as long as the guard lives: held by the thread that leases the region,
/// for one call into the allocator; by a reclaimer, while it holds the
/// [`RECLAIMING`] lease; or under `&mut` to the allocator. It is neither
/// `Copy` nor `Clone`, and each of its methods takes `&mut self` (or
/// `self`), so one guard lends out one `&mut ChunkList` at a time; the contract
/// of [`new`](Self::new) keeps to one guard a region. Reading a region
/// needs no guard: it derefs to [`Region`].
pub(super) struct Leased<'a>(&'a Region);

/// The leaseholder's state.
#[derive(Default)]
pub(super) struct ChunkList {
    /// Before the current one, the chunks this window filled; after it, the
    /// ones a rewind left for the region's next growth.
    pub chunks: Vec<Chunk>,
    /// The most bytes the region used in one window.
    pub peak: usize,
}

/// What [`Leased::extend`] did.
pub(super) enum Extend {
    Done,
    /// The carving is not the newest of the region.
    NotNewest,
    /// The carving is the newest; the chunk lacks this many bytes past the
    /// cursor.
    NoRoom(usize),
}

/// Where a region was when a checkpoint was taken.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    pub region: *const Region,
    chunk: usize,
    cursor: usize,
    used_before: usize,
    live: usize,
}

// SAFETY: the pointer only names a region; it is never dereferenced.
unsafe impl Send for Mark {}

impl Region {
    /// A region leased to `owner`, with no memory yet; `None` when there is
    /// no memory for it (never an abort). Allocated as `Box` does, so a
    /// `Box` frees it (the allocator's `Drop`).
    pub(super) fn try_new(owner: u64) -> Option<NonNull<Region>> {
        let bump = BumpState {
            base: AtomicPtr::new(ptr::dangling_mut()),
            ..BumpState::default()
        };
        let owner = AtomicU64::new(owner);
        let list = UnsafeCell::new(ChunkList::default());
        // SAFETY: `Region` is not zero-sized.
        let p = NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Region>()) })?.cast();
        // SAFETY: `p` is fresh memory with `Region`'s layout, not null.
        unsafe { p.write(Region { bump, owner, list }) };
        Some(p)
    }

    /// Whether `layout` fits in the current chunk as it stands: what
    /// [`Leased::bump`] would carve, without carving. Any thread may ask;
    /// the answer holds while the region stays FREE.
    pub(super) fn fits(&self, layout: Layout) -> bool {
        let bump = &self.bump;
        let cursor = bump.cursor.load(Relaxed);
        let pad = bump
            .base
            .load(Relaxed)
            .addr()
            .wrapping_add(cursor)
            .wrapping_neg()
            & (layout.align() - 1);
        // No overflow, as in `bump`.
        cursor + pad + layout.size() <= bump.limit.load(Relaxed)
    }

    /// Whether nothing was carved from the region this window: the state a
    /// reset or a rewind without a mark leaves it in.
    pub(super) fn is_empty(&self) -> bool {
        self.bump.position() == (0, 0) && self.live() == 0
    }

    /// Bytes the current chunk can serve without growing: its committed
    /// room above the cursor.
    pub(super) fn room(&self) -> usize {
        self.bump
            .limit
            .load(Relaxed)
            .saturating_sub(self.bump.cursor.load(Relaxed))
    }

    /// Leases the region to `thread` if it is FREE (one compare-and-swap);
    /// `true` also if `thread` leases it already. A guard for it is then the caller's
    /// to make ([`Leased::new`]).
    #[inline]
    pub(super) fn lease(&self, thread: u64) -> bool {
        let owner = self.owner.load(Relaxed);
        // `Acquire`: what the last holder did, ordered before the `&mut`
        // reset or rewind that freed it, is visible before we touch it.
        owner == thread
            || owner == FREE
                && (self.owner)
                    .compare_exchange(FREE, thread, Acquire, Relaxed)
                    .is_ok()
    }

    /// Whether `thread` leases the region. Only `thread` (or `&mut` to the
    /// allocator) stores `thread`, so a thread reads its own lease right.
    pub(super) fn is_leased_to(&self, thread: u64) -> bool {
        self.owner.load(Relaxed) == thread
    }

    /// Bytes the region holds.
    pub(super) fn held(&self) -> usize {
        self.bump.held.load(Relaxed)
    }

    /// Bytes requested here and not yet flushed.
    pub(super) fn live(&self) -> usize {
        self.bump.live.load(Relaxed)
    }

    /// Requests served here and not yet flushed.
    pub(super) fn count(&self) -> usize {
        self.bump.count.load(Relaxed)
    }

    /// Where the region is, for a checkpoint; `None` if it has nothing to
    /// come back to. Under requests from another thread the fields may be
    /// read a little apart; [`rewind`](Leased::rewind) clamps.
    pub(super) fn mark(&self) -> Option<Mark> {
        let bump = &self.bump;
        let mark = Mark {
            region: self,
            chunk: bump.chunk.load(Relaxed),
            cursor: bump.cursor.load(Relaxed),
            used_before: bump.used_before.load(Relaxed),
            live: bump.live.load(Relaxed),
        };
        (mark.chunk != 0 || mark.cursor != 0 || mark.live != 0).then_some(mark)
    }
}

impl<'a> Leased<'a> {
    /// The guard of `region`.
    ///
    /// # Safety
    ///
    /// Until the guard drops, no one else changes the region, and no other
    /// guard of it is alive. Either the calling thread holds the region's
    /// lease — its `owner` is the thread's serial, or [`RECLAIMING`] stored
    /// by the caller's own compare-and-swap — and has no other guard of it
    /// (a thread's guard lives only in the call into the allocator that
    /// made it, and the allocator does not call itself); or the caller has
    /// `&mut` to the allocator, and makes one guard a region at a time.
    #[inline(always)]
    pub(super) unsafe fn new(region: &'a Region) -> Self {
        Leased(region)
    }

    /// The bump state and the chunk list, to change them.
    pub(super) fn parts(&mut self) -> (&BumpState, &mut ChunkList) {
        // SAFETY: `list` is reached only here, through `&mut` to the one
        // guard of the region (`Leased::new`'s contract), so this is the
        // only reference to it until the borrow of `self` ends.
        (&self.0.bump, unsafe { &mut *self.0.list.get() })
    }

    /// Carves `layout` from the current chunk, or `None` if it does not fit.
    #[inline(always)]
    pub(super) fn bump(&mut self, layout: Layout) -> Option<NonNull<[u8]>> {
        // SAFETY: this is the region's one guard (`Leased::new`'s
        // contract), so no one else changes it, and a `Layout`'s alignment
        // is a power of two.
        unsafe { self.0.bump.bump_raw(layout.size(), layout.align()) }
    }

    /// Moves the end of the newest carving `[ptr, ptr + old)` to `ptr +
    /// new` (`new >= old > 0`) if it is the newest and the current chunk
    /// holds it.
    #[inline]
    pub(super) fn extend(&mut self, ptr: *const u8, old: usize, new: usize) -> Extend {
        let bump = &self.0.bump;
        let cursor = bump.cursor.load(Relaxed);
        // Addresses, not offsets: `ptr` may be of another chunk, even one
        // that ends where the current one starts (hence `old <= cursor`).
        if old > cursor
            || ptr.addr().wrapping_add(old) != bump.base.load(Relaxed).addr().wrapping_add(cursor)
        {
            return Extend::NotNewest;
        }
        // No overflow: `old <= cursor`, and `new - old` is at most
        // `isize::MAX`.
        let end = cursor - old + new;
        if end > bump.limit.load(Relaxed) {
            return Extend::NoRoom(end - cursor);
        }
        bump.cursor.store(end, Relaxed);
        bump.live
            .store(bump.live.load(Relaxed) + (new - old), Relaxed);
        Extend::Done
    }

    /// Whether the region's current chunk is a reservation (which grows in
    /// place), not a heap block.
    pub(super) fn is_mapped(&mut self) -> bool {
        let (bump, list) = self.parts();
        matches!(list.chunks.get(bump.position().0), Some(Chunk::Mapped(_)))
    }

    /// Counts a zero-sized request served without carving, or (`-bytes`,
    /// a canary) takes carved bytes off the live count.
    pub(super) fn count_request(&mut self, live_delta: isize) {
        let bump = &self.0.bump;
        bump.count.store(
            bump.count
                .load(Relaxed)
                .wrapping_add(usize::from(live_delta == 0)),
            Relaxed,
        );
        bump.live.store(
            bump.live.load(Relaxed).wrapping_add_signed(live_delta),
            Relaxed,
        );
    }

    /// Ends the guard and hands the lease to `next`: [`FREE`] (a thread
    /// leaving a region it has nothing in, a reclaimer done with one, a
    /// reset), or the resetting thread for its own region. Whatever frees or
    /// hands on a lease consumes the guard.
    #[inline]
    pub(super) fn unlease(self, next: u64) {
        self.0.owner.store(next, Release);
    }

    /// Whether a reset needs nothing of
    /// [`keep_one_chunk`](Self::keep_one_chunk): the
    /// region has one chunk (or none), the usual case.
    #[inline]
    pub(super) fn has_one_chunk(&mut self) -> bool {
        self.parts().1.chunks.len() <= 1
    }

    /// Ends the window: the counters flushed, back to the start of the
    /// current chunk; the caller keeps one chunk unless it
    /// [`has_one_chunk`](Self::has_one_chunk), and [`unlease`](Self::unlease)s it.
    /// `first_chunk`: the caller knows the window stayed in the first chunk.
    /// Returns the bytes that were live.
    #[inline]
    pub(super) fn reset(&mut self, first_chunk: bool, totals: &mut Totals) -> usize {
        let (bump, list) = self.parts();
        let used_before = if first_chunk { 0 } else { bump.used_before() };
        let flushed = bump.flush(list, 0, used_before, totals);
        bump.cursor.store(0, Relaxed);
        flushed
    }

    /// Goes back to `mark`, or with none (the region was empty at the
    /// checkpoint) to its start, leased to `next` as at a reset. Chunks
    /// taken since stay, for the region's next growth this window.
    pub(super) fn rewind(mut self, mark: Option<&Mark>, next: u64, totals: &mut Totals) -> usize {
        let (bump, list) = self.parts();
        let m = mark.map_or((0, 0, 0, 0), |m| (m.chunk, m.cursor, m.used_before, m.live));
        // Clamped to what the region has: a mark read while the region grew.
        let chunk = m.0.min(list.chunks.len().saturating_sub(1));
        let used_before = if chunk == 0 { 0 } else { m.2 };
        let cursor = list.chunks.get(chunk).map_or(0, |c| m.1.min(c.usable()));
        let flushed = bump.flush(
            list,
            m.3.min(bump.live.load(Relaxed)),
            bump.used_before(),
            totals,
        );
        bump.install(list.chunks.get(chunk), chunk, cursor, used_before);
        if mark.is_none() {
            self.unlease(next);
        }
        flushed
    }

    /// After a reset, for a region with several chunks (it moved this
    /// window, or a rewind left some): it keeps the smallest chunk that holds
    /// its peak — a heap block only if it is not much larger (at most a
    /// quarter over the peak's size class, as the cache hands out), so a
    /// block doubled to get through one window is not kept for good — or
    /// none (its next request takes one sized to the peak), and gives the
    /// others back. One chunk serves each window from then on.
    pub(super) fn keep_one_chunk(&mut self, account: &Account) {
        if self.has_one_chunk() {
            return;
        }
        let (bump, list) = self.parts();
        let chunks = &mut list.chunks;
        let most = size_class(list.peak).map_or(usize::MAX, |class| class + class / 4);
        let keep = (0..chunks.len())
            .filter(|&i| chunks[i].holds(list.peak, most))
            .min_by_key(|&i| chunks[i].capacity());
        if let Some(i) = keep {
            chunks.swap(0, i);
        }
        account.give_back_all(chunks, usize::from(keep.is_some()));
        bump.install(chunks.first(), 0, 0, 0);
        bump.sync_held(list);
    }

    /// Gives back what is not in use — the chunks after the current one, the
    /// pages above the cursor — and forgets the peak, so the region grows to
    /// what its thread uses from now on.
    pub(super) fn trim(&mut self, account: &Account) {
        let (bump, list) = self.parts();
        let (current, cursor) = bump.position();
        list.peak = bump.used_before() + cursor;
        account.give_back_all(&mut list.chunks, current + 1);
        if let Some(Chunk::Mapped(m)) = list.chunks.get_mut(current) {
            account.decommit(m, cursor);
            bump.limit.store(m.committed(), Relaxed);
        }
        bump.sync_held(list);
    }

    /// Gives back the region's memory down to at most `keep` bytes (whole
    /// pages of its first reservation, rounded down, which keeps its address
    /// range; a heap block cannot shrink, so it goes), or all of it with
    /// `None`, and lowers its peak to match: for the budget rule, the retain
    /// cap and `release`. Nothing in the region may be in use.
    pub(super) fn give_back(&mut self, account: &Account, keep: Option<usize>) {
        let (bump, list) = self.parts();
        let keep_first = keep.is_some() && matches!(list.chunks.first(), Some(Chunk::Mapped(_)));
        account.give_back_all(&mut list.chunks, usize::from(keep_first));
        // Rounded down: a decommit keeps the page `keep` ends in.
        let keep = keep.unwrap_or(0) & !(page_size() - 1);
        if let Some(Chunk::Mapped(m)) = list.chunks.first_mut() {
            account.decommit(m, keep);
        }
        list.peak = list.peak.min(keep);
        bump.install(list.chunks.first(), 0, 0, 0);
        bump.sync_held(list);
    }
}

impl Deref for Leased<'_> {
    type Target = Region;

    #[inline(always)]
    fn deref(&self) -> &Region {
        self.0
    }
}

impl BumpState {
    /// Points the fast path at `chunk` (number `index`), at `cursor`.
    pub(super) fn install(
        &self,
        chunk: Option<&Chunk>,
        index: usize,
        cursor: usize,
        used_before: usize,
    ) {
        let (base, limit) = chunk.map_or((ptr::dangling_mut(), 0), |c| {
            (c.base().as_ptr(), c.usable())
        });
        debug_assert!(cursor <= limit);
        self.base.store(base, Relaxed);
        self.limit.store(limit, Relaxed);
        self.cursor.store(cursor, Relaxed);
        self.chunk.store(index, Relaxed);
        self.used_before.store(used_before, Relaxed);
    }

    /// The current chunk's index and the cursor in it.
    #[inline]
    pub(super) fn position(&self) -> (usize, usize) {
        (self.chunk.load(Relaxed), self.cursor.load(Relaxed))
    }

    #[inline]
    pub(super) fn used_before(&self) -> usize {
        self.used_before.load(Relaxed)
    }

    /// Recounts what the region holds, after its chunks changed.
    pub(super) fn sync_held(&self, list: &ChunkList) {
        self.held
            .store(list.chunks.iter().map(Chunk::usable).sum(), Relaxed);
    }

    /// Flushes the counters into `totals`, down to `keep_live` live bytes;
    /// notes the peak, `used_before` (or 0, for a window known to have stayed in the first
    /// chunk, which saves a reset two instructions) plus the cursor.
    #[inline]
    fn flush(
        &self,
        list: &mut ChunkList,
        keep_live: usize,
        used_before: usize,
        totals: &mut Totals,
    ) -> usize {
        debug_assert!(used_before == self.used_before());
        let live = self.live.load(Relaxed);
        totals.allocations += self.count.load(Relaxed) as u64;
        totals.bytes_requested += (live - keep_live) as u64;
        self.count.store(0, Relaxed);
        self.live.store(keep_live, Relaxed);
        list.peak = list.peak.max(used_before + self.cursor.load(Relaxed));
        live
    }
}

/// Where the region's next chunk starts, for the peak: past what the
/// current one used rounded up to 4 KiB, plus the padding above 4 KiB that
/// `layout` may need. Chunks start at least 4 KiB-aligned, and padding up to
/// that alignment is the same from any 4 KiB-aligned offset, so the peak is
/// what one chunk needs to hold the window — more than any chunk the region
/// outgrew — without the padding a coarser page would count.
pub(super) fn used_before_next(bump: &BumpState, layout: Layout) -> usize {
    const GRAIN: usize = 4096;
    let used = bump.used_before() + bump.cursor.load(Relaxed);
    used.next_multiple_of(GRAIN) + layout.align().saturating_sub(GRAIN)
}
