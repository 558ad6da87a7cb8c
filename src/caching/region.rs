//! [`Region`]: one bump range and the chunks behind it — the fast path's
//! arithmetic, and how a region rewinds, resets and gives memory back.
//!
//! The hot fields are atomics that only the leaseholder writes (or a caller
//! with `&mut` to the allocator); relaxed loads and stores compile to plain
//! moves, and let `stats` and `checkpoint` read them from any thread. The
//! chunks belong to the region for life, or go back to the cache.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};

use super::Totals;
use super::grow::Books;
use crate::block::size_class;
use crate::chunk::Chunk;
use crate::os::page_size;

/// The `owner` of a region nobody leases.
pub(super) const FREE: u64 = 0;

/// Aligned to 128 bytes (two cache lines, as crossbeam's `CachePadded` on
/// x86_64), so threads bumping in neighbouring regions never share a line.
#[repr(align(128))]
pub(super) struct Region {
    hot: Hot,
    /// [`FREE`], or the serial of the thread leasing the region until the
    /// next reset or rewind.
    owner: AtomicU64,
    /// Reached only through [`Region::cold`].
    cold: UnsafeCell<Cold>,
}

// SAFETY: `hot` and `owner` are atomics; `cold` is reached by one thread at a
// time (the contract of `Region::cold`); chunks are `Send`, and the region
// owns them as a `Box` would.
unsafe impl Sync for Region {}
// SAFETY: as above.
unsafe impl Send for Region {}

/// What the fast path reads and writes.
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

/// What [`Region::extend`] did.
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
    /// no memory for it (never an abort). Freed by [`free`](Self::free).
    pub(super) fn try_new(owner: u64) -> Option<NonNull<Region>> {
        let zero = || AtomicUsize::new(0);
        let hot = Hot {
            base: AtomicPtr::new(ptr::dangling_mut()),
            cursor: zero(),
            limit: zero(),
            live: zero(),
            count: zero(),
            chunk: zero(),
            before: zero(),
            held: zero(),
        };
        let owner = AtomicU64::new(owner);
        let cold = UnsafeCell::new(Cold::default());
        // SAFETY: `Region` is not zero-sized.
        let p = NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Region>()) })?.cast();
        // SAFETY: fresh memory with `Region`'s layout.
        unsafe { p.write(Region { hot, owner, cold }) };
        Some(p)
    }

    /// Drops and frees a region.
    ///
    /// # Safety
    ///
    /// `region` came from [`try_new`](Self::try_new), is freed once, and
    /// nothing refers to it afterwards.
    pub(super) unsafe fn free(region: NonNull<Region>) {
        // SAFETY: the caller's contract; `try_new` allocated as `Box` does.
        drop(unsafe { Box::from_raw(region.as_ptr()) });
    }

    /// Carves `layout` from the current chunk, or `None` if it does not fit.
    ///
    /// # Safety
    ///
    /// The caller holds the lease: no other thread bumps the region
    /// meanwhile.
    #[inline(always)]
    pub(super) unsafe fn bump(&self, layout: Layout) -> Option<NonNull<[u8]>> {
        let hot = &self.hot;
        let base = hot.base.load(Relaxed);
        let cursor = hot.cursor.load(Relaxed);
        let pad = base.addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
        // No overflow: `cursor <= limit <= isize::MAX`, `pad < align`, and
        // `Layout` keeps `size + align - 1 <= isize::MAX`.
        let start = cursor + pad;
        let end = start + layout.size();
        if end > hot.limit.load(Relaxed) {
            return None;
        }
        hot.cursor.store(end, Relaxed);
        // No overflow: live bytes sit in chunks.
        hot.live.store(hot.live.load(Relaxed) + layout.size(), Relaxed);
        hot.count.store(hot.count.load(Relaxed).wrapping_add(1), Relaxed);
        // `wrapping_add`: a region without a chunk has a dangling `base`,
        // where a zero-sized request may land; otherwise it equals `add`.
        let ptr = base.wrapping_add(start);
        debug_assert!(ptr.addr() % layout.align() == 0);
        // SAFETY: `base` is a chunk start or dangling, neither null, and the
        // offset stays in the chunk (or below `align` past the dangling one).
        Some(NonNull::slice_from_raw_parts(unsafe { NonNull::new_unchecked(ptr) }, layout.size()))
    }

    /// Whether `layout` fits in the current chunk as it stands: what
    /// [`bump`](Self::bump) would carve, without carving. Any thread may
    /// ask; the answer holds while the region stays FREE.
    pub(super) fn fits(&self, layout: Layout) -> bool {
        let hot = &self.hot;
        let cursor = hot.cursor.load(Relaxed);
        let pad = hot.base.load(Relaxed).addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
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
        self.hot.limit.load(Relaxed).saturating_sub(self.hot.cursor.load(Relaxed))
    }

    /// Moves the end of the newest carving `[ptr, ptr + old)` to `ptr +
    /// new` (`new >= old > 0`) if it is the newest and the current chunk
    /// holds it.
    ///
    /// # Safety
    ///
    /// As for [`bump`](Self::bump).
    #[inline]
    pub(super) unsafe fn extend(&self, ptr: *const u8, old: usize, new: usize) -> Extend {
        let hot = &self.hot;
        let cursor = hot.cursor.load(Relaxed);
        // Addresses, not offsets: `ptr` may be of another chunk, even one
        // that ends where the current one starts (hence `old <= cursor`).
        if old > cursor || ptr.addr().wrapping_add(old) != hot.base.load(Relaxed).addr().wrapping_add(cursor) {
            return Extend::NotNewest;
        }
        // No overflow: `old <= cursor`, and `new - old` is at most
        // `isize::MAX`.
        let end = cursor - old + new;
        if end > hot.limit.load(Relaxed) {
            return Extend::NoRoom(end - cursor);
        }
        hot.cursor.store(end, Relaxed);
        hot.live.store(hot.live.load(Relaxed) + (new - old), Relaxed);
        Extend::Done
    }

    /// Leases the region to `me` if it is FREE (one compare-and-swap); `true`
    /// also if `me` leases it already.
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

    /// Frees the lease: under `&mut` to the allocator, or by a reclaimer.
    #[inline]
    pub(super) fn unlease(&self) {
        self.owner.store(FREE, Release);
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
    /// read a little apart; [`rewind`](Self::rewind) clamps.
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

    /// Counts a zero-sized request served without carving, or (`-bytes`,
    /// a canary) takes carved bytes off the live count. Under `bump`'s
    /// contract.
    pub(super) fn count_request(&self, live_delta: isize) {
        let hot = &self.hot;
        hot.count.store(hot.count.load(Relaxed).wrapping_add(usize::from(live_delta == 0)), Relaxed);
        hot.live.store(hot.live.load(Relaxed).wrapping_add_signed(live_delta), Relaxed);
    }

    /// The hot fields and the chunks, to change them.
    ///
    /// # Safety
    ///
    /// The caller holds the region's lease (or the reclaiming lease), or
    /// `&mut` to the allocator; and holds no other result of `cold` for this
    /// region.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn cold(&self) -> (&Hot, &mut Cold) {
        // SAFETY: the caller's contract: no other thread can reach the cold
        // state now, and no other reference to it lives on this thread.
        (&self.hot, unsafe { &mut *self.cold.get() })
    }

    /// Whether a reset needs nothing of [`settle`](Self::settle): the
    /// region has one chunk (or none), the usual case.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator.
    #[inline]
    pub(super) unsafe fn settled(&self) -> bool {
        // SAFETY: the caller's contract.
        unsafe { self.cold() }.1.chunks.len() <= 1
    }

    /// Ends the window: the counters folded, back to the start of the
    /// current chunk, leased to `next` ([`FREE`], or the resetting thread
    /// for its own region); the caller settles it unless it is
    /// [`settled`](Self::settled). `first_chunk`: the caller knows the
    /// window stayed in the first chunk. Returns the bytes that were live.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator.
    #[inline]
    pub(super) unsafe fn reset(&self, next: u64, first_chunk: bool, totals: &mut Totals) -> usize {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let before = if first_chunk { 0 } else { hot.before() };
        let folded = hot.fold(cold, 0, before, totals);
        hot.cursor.store(0, Relaxed);
        self.owner.store(next, Release);
        folded
    }

    /// Goes back to `mark`, or with none (the region was empty at the
    /// checkpoint) to its start, leased to `next` as at a reset. Chunks taken
    /// since stay, for the region's next growth this window.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator.
    pub(super) unsafe fn rewind(&self, mark: Option<&Mark>, next: u64, totals: &mut Totals) -> usize {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let m = mark.map_or((0, 0, 0, 0), |m| (m.chunk, m.cursor, m.before, m.live));
        // Clamped to what the region has: a mark read while the region grew.
        let chunk = m.0.min(cold.chunks.len().saturating_sub(1));
        let before = if chunk == 0 { 0 } else { m.2 };
        let cursor = cold.chunks.get(chunk).map_or(0, |c| m.1.min(c.usable()));
        let folded = hot.fold(cold, m.3.min(hot.live.load(Relaxed)), hot.before(), totals);
        hot.install(cold.chunks.get(chunk), chunk, cursor, before);
        if mark.is_none() {
            self.owner.store(next, Release);
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
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator.
    pub(super) unsafe fn settle(&self, books: &Books) {
        // SAFETY: the caller's contract.
        if unsafe { self.settled() } {
            return;
        }
        // SAFETY: as above.
        let (hot, cold) = unsafe { self.cold() };
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
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator.
    pub(super) unsafe fn trim(&self, books: &Books) {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
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
    /// cap and `release`.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator, or the region's lease (a reclaiming one, or
    /// the caller's own); nothing in use.
    pub(super) unsafe fn shed(&self, books: &Books, keep: Option<usize>) {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
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

impl Hot {
    /// Points the fast path at `chunk` (number `index`), at `cursor`.
    pub(super) fn install(&self, chunk: Option<&Chunk>, index: usize, cursor: usize, before: usize) {
        let (base, limit) = chunk.map_or((ptr::dangling_mut(), 0), |c| (c.base().as_ptr(), c.usable()));
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
        self.held.store(cold.chunks.iter().map(Chunk::usable).sum(), Relaxed);
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
