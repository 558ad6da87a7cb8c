//! [`Region`]: one bump range and the chunks behind it — the fast path's
//! arithmetic, and how a region rewinds, resets and gives memory back.
//!
//! Whatever changes a region goes through a [`Leased`] guard, which only
//! the region's leaseholder (or a caller with `&mut` to the allocator)
//! makes. The hot fields are atomics that only the guard's holder writes;
//! relaxed loads and stores compile to plain moves, and let `stats` and
//! `checkpoint` read them from any thread. A chunk is the region's until
//! it goes back to the cache, which may lend it to another region.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ops::Deref;
use core::ptr::{self, NonNull};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};

use super::account::Books;
use super::memory::block::size_class;
use super::memory::chunk::Chunk;
use crate::os::page_size;

/// The `owner` of a region nobody leases.
pub(super) const FREE: u64 = 0;

/// The `owner` of a FREE region a thread leased for the moment, to give
/// its memory back (the budget rule).
pub(super) const RECLAIMING: u64 = u64::MAX;

/// Counters folded in at resets and rewinds.
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
#[repr(align(128))]
pub(super) struct Region {
    hot: Hot,
    /// [`FREE`], the serial of the thread leasing the region until the
    /// next reset or rewind, or [`RECLAIMING`].
    owner: AtomicU64,
    /// Reached only through [`Leased::cold`].
    cold: UnsafeCell<Cold>,
}

// SAFETY: `hot` and `owner` are atomics, and `cold` is reached only through
// `Leased::cold`, which needs `&mut` to the region's one guard (one at a
// time: the contract of `Leased::new`), so no two threads reach it at once.
unsafe impl Sync for Region {}

/// The right to change a region — its chunks, its cursor, its lease — for
/// as long as the guard lives: held by the thread that leases the region,
/// for one call into the allocator; by a reclaimer, while it holds the
/// [`RECLAIMING`] lease; or under `&mut` to the allocator. It is neither
/// `Copy` nor `Clone`, and each of its methods takes `&mut self` (or
/// `self`), so one guard lends out one `&mut Cold` at a time; the contract
/// of [`new`](Self::new) keeps to one guard a region. Reading a region
/// needs no guard: it derefs to [`Region`].
pub(super) struct Leased<'a>(&'a Region);

/// What the fast path reads and writes. `Default` only for
/// [`Region::try_new`], which sets `base` to dangling.
#[derive(Default)]
pub(super) struct Hot {
    /// Start of the current chunk; dangling when there is none.
    base: AtomicPtr<u8>,
    /// Offset of the first free byte in the current chunk.
    cursor: AtomicUsize,
    /// Bytes usable in the current chunk.
    limit: AtomicUsize,
    /// Bytes requested and not yet folded into the totals.
    live: AtomicUsize,
    /// Requests since the last fold (wraps rather than overflows).
    count: AtomicUsize,
    /// Index of the current chunk.
    chunk: AtomicUsize,
    /// Bytes the window used before the current chunk, laid out as one
    /// chunk would hold them (see [`before_next`]).
    before: AtomicUsize,
    /// Usable bytes of all the chunks: what the region holds.
    held: AtomicUsize,
}

/// The leaseholder's state.
#[derive(Default)]
pub(super) struct Cold {
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
    before: usize,
    live: usize,
}

// SAFETY: the pointer only names a region; it is never dereferenced.
unsafe impl Send for Mark {}

impl Region {
    /// A region leased to `owner`, with no memory yet; `None` when there is
    /// no memory for it (never an abort). Allocated as `Box` does, so a
    /// `Box` frees it (the allocator's `Drop`).
    pub(super) fn try_new(owner: u64) -> Option<NonNull<Region>> {
        let hot = Hot {
            base: AtomicPtr::new(ptr::dangling_mut()),
            ..Hot::default()
        };
        let owner = AtomicU64::new(owner);
        let cold = UnsafeCell::new(Cold::default());
        // SAFETY: `Region` is not zero-sized.
        let p = NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Region>()) })?.cast();
        // SAFETY: `p` is fresh memory with `Region`'s layout, not null.
        unsafe { p.write(Region { hot, owner, cold }) };
        Some(p)
    }

    /// Whether `layout` fits in the current chunk as it stands: what
    /// [`Leased::bump`] would carve, without carving. Any thread may ask;
    /// the answer holds while the region stays FREE.
    pub(super) fn fits(&self, layout: Layout) -> bool {
        let hot = &self.hot;
        let cursor = hot.cursor.load(Relaxed);
        let pad = hot
            .base
            .load(Relaxed)
            .addr()
            .wrapping_add(cursor)
            .wrapping_neg()
            & (layout.align() - 1);
        // No overflow, as in `bump`.
        cursor + pad + layout.size() <= hot.limit.load(Relaxed)
    }

    /// Whether nothing was carved from the region this window: the state a
    /// reset or a rewind without a mark leaves it in.
    pub(super) fn is_empty(&self) -> bool {
        self.hot.position() == (0, 0) && self.live() == 0
    }

    /// Bytes the current chunk can serve without growing: its committed
    /// room above the cursor.
    pub(super) fn room(&self) -> usize {
        self.hot
            .limit
            .load(Relaxed)
            .saturating_sub(self.hot.cursor.load(Relaxed))
    }

    /// Leases the region to `me` if it is FREE (one compare-and-swap); `true`
    /// also if `me` leases it already. A guard for it is then the caller's
    /// to make ([`Leased::new`]).
    #[inline]
    pub(super) fn lease(&self, me: u64) -> bool {
        let owner = self.owner.load(Relaxed);
        // `Acquire`: what the last holder did, ordered before the `&mut`
        // reset or rewind that freed it, is visible before we touch it.
        owner == me
            || owner == FREE
                && (self.owner)
                    .compare_exchange(FREE, me, Acquire, Relaxed)
                    .is_ok()
    }

    /// Whether `me` leases the region. Only `me` (or `&mut` to the
    /// allocator) stores `me`, so a thread reads its own lease right.
    pub(super) fn is_leased_to(&self, me: u64) -> bool {
        self.owner.load(Relaxed) == me
    }

    /// Bytes the region holds.
    pub(super) fn held(&self) -> usize {
        self.hot.held.load(Relaxed)
    }

    /// Bytes requested here and not yet folded.
    pub(super) fn live(&self) -> usize {
        self.hot.live.load(Relaxed)
    }

    /// Requests served here and not yet folded.
    pub(super) fn count(&self) -> usize {
        self.hot.count.load(Relaxed)
    }

    /// Where the region is, for a checkpoint; `None` if it has nothing to
    /// come back to. Under requests from another thread the fields may be
    /// read a little apart; [`rewind`](Leased::rewind) clamps.
    pub(super) fn mark(&self) -> Option<Mark> {
        let hot = &self.hot;
        let mark = Mark {
            region: self,
            chunk: hot.chunk.load(Relaxed),
            cursor: hot.cursor.load(Relaxed),
            before: hot.before.load(Relaxed),
            live: hot.live.load(Relaxed),
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

    /// The hot fields and the chunks, to change them.
    pub(super) fn cold(&mut self) -> (&Hot, &mut Cold) {
        // SAFETY: `cold` is reached only here, through `&mut` to the one
        // guard of the region (`Leased::new`'s contract), so this is the
        // only reference to it until the borrow of `self` ends.
        (&self.0.hot, unsafe { &mut *self.0.cold.get() })
    }

    /// Carves `layout` from the current chunk, or `None` if it does not fit.
    #[inline(always)]
    pub(super) fn bump(&mut self, layout: Layout) -> Option<NonNull<[u8]>> {
        // SAFETY: a `Layout`'s alignment is a power of two.
        unsafe { self.bump_raw(layout.size(), layout.align()) }
    }

    /// Carves `size` bytes aligned to `align` from the current chunk, or
    /// `None` if they do not fit (any `size`: the caller need not have
    /// checked it against `isize::MAX`). An `align` of 0 never fits.
    ///
    /// # Safety
    ///
    /// `align` is a power of two or 0.
    #[inline(always)]
    pub(super) unsafe fn bump_raw(&mut self, size: usize, align: usize) -> Option<NonNull<[u8]>> {
        debug_assert!(align & align.wrapping_sub(1) == 0);
        let hot = &self.0.hot;
        let base = hot.base.load(Relaxed);
        let cursor = hot.cursor.load(Relaxed);
        let pad = base.addr().wrapping_add(cursor).wrapping_neg() & align.wrapping_sub(1);
        // No overflow: `cursor <= limit <= isize::MAX` and `pad < align <=
        // 2^(usize::BITS - 1)`; `size` is checked. With `align` 0 (a mask of
        // all ones) `start` is `2^usize::BITS - base` (`base + cursor` is
        // non-zero and in the address space), past the chunk's end.
        let start = cursor + pad;
        let end = start.checked_add(size)?;
        if end > hot.limit.load(Relaxed) {
            return None;
        }
        hot.cursor.store(end, Relaxed);
        // No overflow: live bytes sit in chunks.
        hot.live.store(hot.live.load(Relaxed) + size, Relaxed);
        hot.count
            .store(hot.count.load(Relaxed).wrapping_add(1), Relaxed);
        // `wrapping_add`: a region without a chunk has a dangling `base`,
        // where a zero-sized request may land; otherwise it equals `add`.
        let ptr = base.wrapping_add(start);
        debug_assert!(ptr.addr() % align == 0);
        // SAFETY: `base` is a chunk start or dangling, neither null, and the
        // offset stays in the chunk (or below `align` past the dangling one).
        Some(NonNull::slice_from_raw_parts(
            unsafe { NonNull::new_unchecked(ptr) },
            size,
        ))
    }

    /// Moves the end of the newest carving `[ptr, ptr + old)` to `ptr +
    /// new` (`new >= old > 0`) if it is the newest and the current chunk
    /// holds it.
    #[inline]
    pub(super) fn extend(&mut self, ptr: *const u8, old: usize, new: usize) -> Extend {
        let hot = &self.0.hot;
        let cursor = hot.cursor.load(Relaxed);
        // Addresses, not offsets: `ptr` may be of another chunk, even one
        // that ends where the current one starts (hence `old <= cursor`).
        if old > cursor
            || ptr.addr().wrapping_add(old) != hot.base.load(Relaxed).addr().wrapping_add(cursor)
        {
            return Extend::NotNewest;
        }
        // No overflow: `old <= cursor`, and `new - old` is at most
        // `isize::MAX`.
        let end = cursor - old + new;
        if end > hot.limit.load(Relaxed) {
            return Extend::NoRoom(end - cursor);
        }
        hot.cursor.store(end, Relaxed);
        hot.live
            .store(hot.live.load(Relaxed) + (new - old), Relaxed);
        Extend::Done
    }

    /// Whether the region's current chunk is a reservation (which grows in
    /// place), not a heap block.
    pub(super) fn is_mapped(&mut self) -> bool {
        let (hot, cold) = self.cold();
        matches!(cold.chunks.get(hot.position().0), Some(Chunk::Mapped(_)))
    }

    /// Counts a zero-sized request served without carving, or (`-bytes`,
    /// a canary) takes carved bytes off the live count.
    pub(super) fn count_request(&mut self, live_delta: isize) {
        let hot = &self.0.hot;
        hot.count.store(
            hot.count
                .load(Relaxed)
                .wrapping_add(usize::from(live_delta == 0)),
            Relaxed,
        );
        hot.live.store(
            hot.live.load(Relaxed).wrapping_add_signed(live_delta),
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

    /// Whether a reset needs nothing of [`settle`](Self::settle): the
    /// region has one chunk (or none), the usual case.
    #[inline]
    pub(super) fn settled(&mut self) -> bool {
        self.cold().1.chunks.len() <= 1
    }

    /// Ends the window: the counters folded, back to the start of the
    /// current chunk; the caller settles it unless it is
    /// [`settled`](Self::settled), and [`unlease`](Self::unlease)s it.
    /// `first_chunk`: the caller knows the window stayed in the first chunk.
    /// Returns the bytes that were live.
    #[inline]
    pub(super) fn reset(&mut self, first_chunk: bool, totals: &mut Totals) -> usize {
        let (hot, cold) = self.cold();
        let before = if first_chunk { 0 } else { hot.before() };
        let folded = hot.fold(cold, 0, before, totals);
        hot.cursor.store(0, Relaxed);
        folded
    }

    /// Goes back to `mark`, or with none (the region was empty at the
    /// checkpoint) to its start, leased to `next` as at a reset. Chunks
    /// taken since stay, for the region's next growth this window.
    pub(super) fn rewind(mut self, mark: Option<&Mark>, next: u64, totals: &mut Totals) -> usize {
        let (hot, cold) = self.cold();
        let m = mark.map_or((0, 0, 0, 0), |m| (m.chunk, m.cursor, m.before, m.live));
        // Clamped to what the region has: a mark read while the region grew.
        let chunk = m.0.min(cold.chunks.len().saturating_sub(1));
        let before = if chunk == 0 { 0 } else { m.2 };
        let cursor = cold.chunks.get(chunk).map_or(0, |c| m.1.min(c.usable()));
        let folded = hot.fold(cold, m.3.min(hot.live.load(Relaxed)), hot.before(), totals);
        hot.install(cold.chunks.get(chunk), chunk, cursor, before);
        if mark.is_none() {
            self.unlease(next);
        }
        folded
    }

    /// After a reset, for a region with several chunks (it moved this
    /// window, or a rewind left some): it keeps the smallest chunk that holds
    /// its peak — a heap block only if it is not much larger (at most a
    /// quarter over the peak's size class, as the cache hands out), so a
    /// block doubled to get through one window is not kept for good — or
    /// none (its next request takes one sized to the peak), and gives the
    /// others back. One chunk serves each window from then on.
    pub(super) fn settle(&mut self, books: &Books) {
        if self.settled() {
            return;
        }
        let (hot, cold) = self.cold();
        let chunks = &mut cold.chunks;
        let most = size_class(cold.peak).map_or(usize::MAX, |class| class + class / 4);
        let keep = (0..chunks.len())
            .filter(|&i| chunks[i].holds(cold.peak, most))
            .min_by_key(|&i| chunks[i].capacity());
        if let Some(i) = keep {
            chunks.swap(0, i);
        }
        books.give_back_all(chunks, usize::from(keep.is_some()));
        hot.install(chunks.first(), 0, 0, 0);
        hot.sync_held(cold);
    }

    /// Gives back what is not in use — the chunks after the current one, the
    /// pages above the cursor — and forgets the peak, so the region grows to
    /// what its thread uses from now on.
    pub(super) fn trim(&mut self, books: &Books) {
        let (hot, cold) = self.cold();
        let (current, cursor) = hot.position();
        cold.peak = hot.before() + cursor;
        books.give_back_all(&mut cold.chunks, current + 1);
        if let Some(Chunk::Mapped(m)) = cold.chunks.get_mut(current) {
            books.decommit(m, cursor);
            hot.limit.store(m.committed(), Relaxed);
        }
        hot.sync_held(cold);
    }

    /// Gives back the region's memory down to at most `keep` bytes (whole
    /// pages of its first reservation, rounded down, which keeps its address
    /// range; a heap block cannot shrink, so it goes), or all of it with
    /// `None`, and lowers its peak to match: for the budget rule, the retain
    /// cap and `release`. Nothing in the region may be in use.
    pub(super) fn shed(&mut self, books: &Books, keep: Option<usize>) {
        let (hot, cold) = self.cold();
        let keep_first = keep.is_some() && matches!(cold.chunks.first(), Some(Chunk::Mapped(_)));
        books.give_back_all(&mut cold.chunks, usize::from(keep_first));
        // Rounded down: a decommit keeps the page `keep` ends in.
        let keep = keep.unwrap_or(0) & !(page_size() - 1);
        if let Some(Chunk::Mapped(m)) = cold.chunks.first_mut() {
            books.decommit(m, keep);
        }
        cold.peak = cold.peak.min(keep);
        hot.install(cold.chunks.first(), 0, 0, 0);
        hot.sync_held(cold);
    }
}

impl Deref for Leased<'_> {
    type Target = Region;

    #[inline(always)]
    fn deref(&self) -> &Region {
        self.0
    }
}

impl Hot {
    /// Points the fast path at `chunk` (number `index`), at `cursor`.
    pub(super) fn install(
        &self,
        chunk: Option<&Chunk>,
        index: usize,
        cursor: usize,
        before: usize,
    ) {
        let (base, limit) = chunk.map_or((ptr::dangling_mut(), 0), |c| {
            (c.base().as_ptr(), c.usable())
        });
        debug_assert!(cursor <= limit);
        self.base.store(base, Relaxed);
        self.limit.store(limit, Relaxed);
        self.cursor.store(cursor, Relaxed);
        self.chunk.store(index, Relaxed);
        self.before.store(before, Relaxed);
    }

    /// The current chunk's index and the cursor in it.
    #[inline]
    pub(super) fn position(&self) -> (usize, usize) {
        (self.chunk.load(Relaxed), self.cursor.load(Relaxed))
    }

    #[inline]
    pub(super) fn before(&self) -> usize {
        self.before.load(Relaxed)
    }

    /// Makes a commit in place known to the fast path.
    pub(super) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Relaxed);
    }

    /// Recounts what the region holds, after its chunks changed.
    pub(super) fn sync_held(&self, cold: &Cold) {
        self.held
            .store(cold.chunks.iter().map(Chunk::usable).sum(), Relaxed);
    }

    /// Folds the counters down to `keep_live` live bytes; notes the peak,
    /// `before` (or 0, for a window known to have stayed in the first
    /// chunk, which saves a reset two instructions) plus the cursor.
    #[inline]
    fn fold(&self, cold: &mut Cold, keep_live: usize, before: usize, totals: &mut Totals) -> usize {
        debug_assert!(before == self.before());
        let live = self.live.load(Relaxed);
        totals.allocations += self.count.load(Relaxed) as u64;
        totals.bytes_requested += (live - keep_live) as u64;
        self.count.store(0, Relaxed);
        self.live.store(keep_live, Relaxed);
        cold.peak = cold.peak.max(before + self.cursor.load(Relaxed));
        live
    }
}

/// Where the region's next chunk starts, for the peak: past what the
/// current one used rounded up to 4 KiB, plus the padding above 4 KiB that
/// `layout` may need. Chunks start at least 4 KiB-aligned, and padding up to
/// that alignment is the same from any 4 KiB-aligned offset, so the peak is
/// what one chunk needs to hold the window — more than any chunk the region
/// outgrew — without the padding a coarser page would count.
pub(super) fn before_next(hot: &Hot, layout: Layout) -> usize {
    const GRAIN: usize = 4096;
    let used = hot.before() + hot.cursor.load(Relaxed);
    used.next_multiple_of(GRAIN) + layout.align().saturating_sub(GRAIN)
}
