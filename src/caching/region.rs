//! [`Region`]: one bump range of a [`CachingAllocator`](super::CachingAllocator)
//! and the chunks behind it: the fast path's pointer arithmetic, and how a
//! region rewinds, resets and gives memory back.
//!
//! A region is FREE or leased to one thread (`owner`, see `lease.rs`). Its
//! hot fields are atomics that only the leaseholder writes (or a caller with
//! `&mut` to the allocator), with relaxed loads and stores that compile to
//! plain moves, so `stats` and `checkpoint` may read them from any thread.
//! Its chunks belong to it for life (or go back to the cache): nothing moves
//! between regions.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};
use std::sync::atomic::{
    AtomicPtr, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};

use super::grow::Books;
use crate::chunk::Chunk;

/// The `owner` of a region nobody leases.
pub(super) const FREE: u64 = 0;

/// One bump range: the hot fields the fast path uses, its owner, and the
/// chunks behind it.
///
/// Aligned to 128 bytes (two cache lines, as crossbeam's `CachePadded` on
/// x86_64) so that threads bumping in neighbouring regions never share a line.
#[repr(align(128))]
pub(super) struct Region {
    hot: Hot,
    /// [`FREE`], or the serial of the thread that leases the region until the
    /// next reset or rewind frees it.
    owner: AtomicU64,
    /// Reached only through [`Region::cold`], whose callers hold the lease.
    cold: UnsafeCell<Cold>,
}

// SAFETY: the hot fields and `owner` are atomics; the cold state is reached
// only by the region's leaseholder or under `&mut` to the allocator (the
// contract of `Region::cold`), one thread at a time; chunks are `Send`.
unsafe impl Sync for Region {}
// SAFETY: as above; the region owns its chunks like a `Box` would.
unsafe impl Send for Region {}

/// What the fast path reads and writes, and what others read of the region.
pub(super) struct Hot {
    /// Start of the current chunk; dangling when there is none.
    base: AtomicPtr<u8>,
    /// Offset of the first free byte in the current chunk.
    cursor: AtomicUsize,
    /// Bytes usable in the current chunk (0 when there is none).
    limit: AtomicUsize,
    /// Bytes requested and not yet folded into the allocator's totals.
    live: AtomicUsize,
    /// Requests served since the last fold (wraps rather than overflows).
    count: AtomicUsize,
    /// Index of the current chunk.
    chunk: AtomicUsize,
    /// Bytes the window used in the chunks before the current one, counted
    /// as one chunk holding the whole window would lay them out.
    before: AtomicUsize,
    /// Usable bytes of all the region's chunks: what it holds.
    held: AtomicUsize,
}

/// The leaseholder's state.
#[derive(Default)]
pub(super) struct Cold {
    /// The chunk in use and, after it, those a rewind left for reuse; before
    /// it, the chunks this window filled.
    chunks: Vec<Chunk>,
    /// The most bytes the region used in one window.
    peak: usize,
}

/// What a reset or rewind folds into the allocator's totals.
#[derive(Debug, Default)]
pub(super) struct Folded {
    pub allocations: u64,
    pub bytes_requested: u64,
    /// Bytes that were live in the region just before.
    pub live: usize,
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

// SAFETY: the pointer only identifies a region; it is never dereferenced.
unsafe impl Send for Mark {}

impl Region {
    /// A new region, leased to `owner`, with no memory yet: allocated without
    /// aborting (`None` when there is no memory for it). Freed by
    /// [`free`](Self::free).
    pub(super) fn try_new(owner: u64) -> Option<NonNull<Region>> {
        let region = Region {
            hot: Hot {
                base: AtomicPtr::new(ptr::dangling_mut()),
                cursor: AtomicUsize::new(0),
                limit: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                count: AtomicUsize::new(0),
                chunk: AtomicUsize::new(0),
                before: AtomicUsize::new(0),
                held: AtomicUsize::new(0),
            },
            owner: AtomicU64::new(owner),
            cold: UnsafeCell::new(Cold::default()),
        };
        // `std::alloc` rather than `Box::new`, which aborts when it fails.
        // SAFETY: `Region` is not zero-sized.
        let p = NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Region>()) })?;
        let p = p.cast::<Region>();
        // SAFETY: fresh memory with `Region`'s layout, written before any read.
        unsafe { p.write(region) };
        Some(p)
    }

    /// Drops and frees a region from [`try_new`](Self::try_new).
    ///
    /// # Safety
    ///
    /// `region` came from `try_new`, is freed once, and nothing refers to it
    /// afterwards.
    pub(super) unsafe fn free(region: NonNull<Region>) {
        // SAFETY: the caller's contract; `try_new` used `Region`'s layout, as
        // `Box` does.
        drop(unsafe { Box::from_raw(region.as_ptr()) });
    }

    /// Carves `layout` out of the current chunk, or `None` when it does not
    /// fit: the fast path.
    ///
    /// # Safety
    ///
    /// The caller holds the region's lease (or, for the allocator's locked
    /// region, its lock): no other thread bumps it at the same time.
    #[inline(always)]
    pub(super) unsafe fn bump(&self, layout: Layout) -> Option<NonNull<u8>> {
        let hot = &self.hot;
        let base = hot.base.load(Relaxed);
        let cursor = hot.cursor.load(Relaxed);
        let pad = base.addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
        // No overflow: `cursor <= limit <= isize::MAX`, `pad < align` and
        // `Layout` keeps `size + align - 1 <= isize::MAX`.
        let start = cursor + pad;
        let end = start + layout.size();
        if end > hot.limit.load(Relaxed) {
            return None;
        }
        hot.cursor.store(end, Relaxed);
        // No overflow: live bytes sit in chunks, so they sum below `isize::MAX`.
        hot.live.store(hot.live.load(Relaxed) + layout.size(), Relaxed);
        hot.count
            .store(hot.count.load(Relaxed).wrapping_add(1), Relaxed);
        // `wrapping_add`: a region without a chunk has a dangling `base`, and
        // a zero-sized request may land there. Otherwise `end <= limit` keeps
        // the address inside the chunk, where it equals `add`.
        let ptr = base.wrapping_add(start);
        debug_assert!(ptr.addr() % layout.align() == 0);
        // SAFETY: `base` is a chunk start or `dangling_mut()`, both non-null,
        // and the offset stays within the chunk (or below `align` past the
        // dangling address), so the address is not 0.
        Some(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// Leases the region to `me` if it is free, lock-free; `true` also if
    /// `me` leases it already.
    #[inline]
    pub(super) fn lease(&self, me: u64) -> bool {
        let owner = self.owner.load(Relaxed);
        // `Acquire`: what the last holder did (ordered before the reset or
        // rewind that freed it) is visible before we touch the region.
        owner == me
            || (owner == FREE
                && self
                    .owner
                    .compare_exchange(FREE, me, Acquire, Relaxed)
                    .is_ok())
    }

    /// Frees the lease. By a caller with `&mut` to the allocator, or by the
    /// holder of a lease it took under the lock to reclaim the region.
    #[inline]
    pub(super) fn unlease(&self) {
        self.owner.store(FREE, Release);
    }

    /// Whether nobody leases the region.
    pub(super) fn is_free(&self) -> bool {
        self.owner.load(Relaxed) == FREE
    }

    /// Bytes the region holds.
    #[inline]
    pub(super) fn held(&self) -> usize {
        self.hot.held.load(Relaxed)
    }

    /// Bytes requested here and not recycled.
    #[inline]
    pub(super) fn live(&self) -> usize {
        self.hot.live.load(Relaxed)
    }

    /// Requests served here and not yet folded into the totals.
    #[inline]
    pub(super) fn count(&self) -> usize {
        self.hot.count.load(Relaxed)
    }

    /// Where the region is, for a checkpoint; `None` if it has nothing to
    /// come back to. Read from any thread: under concurrent requests the
    /// fields may be from slightly different moments (see
    /// [`rewind`](Self::rewind)).
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

    /// Counts a zero-sized request served without carving. Under the same
    /// contract as [`bump`](Self::bump).
    pub(super) fn count_empty(&self) {
        let count = &self.hot.count;
        count.store(count.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Takes `bytes` back off the live count: carved, but not requested (a
    /// canary). Under the same contract as [`bump`](Self::bump).
    pub(super) fn uncount(&self, bytes: usize) {
        let live = &self.hot.live;
        live.store(live.load(Relaxed) - bytes, Relaxed);
    }

    /// The chunks, the peak and the hot fields, to change them.
    ///
    /// # Safety
    ///
    /// The caller holds the region's lease (its `owner` is the caller's
    /// serial, or the reclaiming lease taken under the allocator's lock), or
    /// the allocator's lock for its locked region, or `&mut` to the
    /// allocator; and holds no other result of `cold` for this region.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn cold(&self) -> (&Hot, &mut Cold) {
        // SAFETY: the caller's contract: no other thread can reach the cold
        // state now, and no other reference to it is alive on this thread.
        (&self.hot, unsafe { &mut *self.cold.get() })
    }

    /// Ends the window: back to the start of one chunk that holds the peak
    /// (the others go back to the cache), and leased to `next` ([`FREE`],
    /// or the resetting thread for its own region).
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator: no thread uses the region.
    #[inline]
    pub(super) unsafe fn reset(&self, books: &Books, next: u64) -> Folded {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let folded = hot.fold(cold, 0);
        match cold.chunks.len() {
            // The usual case: one chunk, back to its start. It holds the
            // peak: a region with one chunk never used more than it holds,
            // and a region that settled kept (or takes next) one that does.
            0 => {}
            1 => {
                debug_assert!(cold.chunks[0].capacity() >= cold.peak);
                hot.cursor.store(0, Relaxed);
            }
            _ => settle(hot, cold, books),
        }
        self.owner.store(next, Release);
        folded
    }

    /// Goes back to `mark` (to the start if `None`, and then leased to
    /// `next`, as at a reset). Chunks taken since stay, for the region's next
    /// growth this window.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator: no thread uses the region.
    pub(super) unsafe fn rewind(&self, mark: Option<&Mark>, next: u64) -> Folded {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let (chunk, cursor, before, live) = mark.map_or((0, 0, 0, 0), |m| {
            (m.chunk, m.cursor, m.before, m.live)
        });
        // A checkpoint taken while another thread allocated may have read
        // the fields a little apart: never past what the region has.
        let chunk = chunk.min(cold.chunks.len().saturating_sub(1));
        let before = if chunk == 0 { 0 } else { before };
        let cursor = cold.chunks.get(chunk).map_or(0, |c| cursor.min(c.usable()));
        let folded = hot.fold(cold, live.min(hot.live.load(Relaxed)));
        hot.install(cold.chunks.get(chunk), chunk, cursor, before);
        if mark.is_none() {
            self.owner.store(next, Release);
        }
        folded
    }

    /// Gives back what the region does not use now: the chunks after the
    /// current one, and the committed pages above the cursor. It forgets its
    /// peak, so it grows to what its thread uses from now on. Returns the
    /// system calls that took.
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator, or a reclaiming lease.
    pub(super) unsafe fn trim(&self, books: &Books) -> u64 {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        let (current, cursor) = (hot.chunk.load(Relaxed), hot.cursor.load(Relaxed));
        cold.peak = hot.before.load(Relaxed) + cursor;
        let mut calls = 0;
        for chunk in cold.chunks.drain((current + 1).min(cold.chunks.len())..) {
            calls += books.give_back(chunk);
        }
        if let Some(Chunk::Mapped(m)) = cold.chunks.get_mut(current) {
            calls += u64::from(books.decommit(m, cursor) != 0);
            hot.limit.store(m.committed(), Relaxed);
        }
        hot.sync_held(cold);
        calls
    }

    /// Gives every chunk back to the cache. After a reset (nothing in use).
    ///
    /// # Safety
    ///
    /// `&mut` to the allocator.
    pub(super) unsafe fn release(&self, books: &Books) -> u64 {
        // SAFETY: the caller's contract.
        let (hot, cold) = unsafe { self.cold() };
        debug_assert!(hot.cursor.load(Relaxed) == 0 && hot.chunk.load(Relaxed) == 0);
        let calls = cold.chunks.drain(..).map(|c| books.give_back(c)).sum();
        hot.install(None, 0, 0, 0);
        hot.sync_held(cold);
        cold.peak = 0;
        calls
    }
}

impl Hot {
    /// Points the fast path at `chunk` (index `index`), at `cursor`.
    pub(super) fn install(&self, chunk: Option<&Chunk>, index: usize, cursor: usize, before: usize) {
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

    /// The index of the current chunk and the cursor in it.
    pub(super) fn position(&self) -> (usize, usize) {
        (self.chunk.load(Relaxed), self.cursor.load(Relaxed))
    }

    /// Bytes used in the chunks before the current one.
    pub(super) fn before(&self) -> usize {
        self.before.load(Relaxed)
    }

    /// Makes a commit in place known to the fast path.
    pub(super) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Relaxed);
    }

    /// Recounts what the region holds after its chunks changed.
    pub(super) fn sync_held(&self, cold: &Cold) {
        let held = cold.chunks.iter().map(Chunk::usable).sum();
        self.held.store(held, Relaxed);
    }

    /// Folds the counters, down to `keep_live` live bytes, and notes the
    /// window's use in the peak.
    #[inline]
    fn fold(&self, cold: &mut Cold, keep_live: usize) -> Folded {
        let count = self.count.load(Relaxed);
        let live = self.live.load(Relaxed);
        self.count.store(0, Relaxed);
        self.live.store(keep_live, Relaxed);
        let used = self.before.load(Relaxed) + self.cursor.load(Relaxed);
        cold.peak = cold.peak.max(used);
        Folded {
            allocations: count as u64,
            bytes_requested: (live - keep_live) as u64,
            live,
        }
    }
}

impl Cold {
    /// The chunks: in use, filled this window, kept for reuse.
    pub(super) fn chunks(&mut self) -> &mut Vec<Chunk> {
        &mut self.chunks
    }

    /// The most bytes the region used in one window.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Forgets what the region used: after its memory was given back.
    pub(super) fn forget_peak(&mut self) {
        self.peak = 0;
    }
}

/// The reset of a region that moved this window, or whose chunk cannot hold
/// its peak: it keeps the smallest chunk that holds the peak and gives the
/// others back. If none does (heap blocks never grow), it gives them all
/// back, and its next request takes one sized to the peak. Either way, one
/// chunk serves each window from then on.
#[cold]
#[inline(never)]
fn settle(hot: &Hot, cold: &mut Cold, books: &Books) {
    let peak = cold.peak;
    let chunks = &mut cold.chunks;
    let keep = (0..chunks.len())
        .filter(|&i| chunks[i].capacity() >= peak)
        .min_by_key(|&i| chunks[i].capacity());
    match keep {
        Some(i) => chunks.swap(0, i),
        None => {
            books.give_back_all(chunks, 0);
        }
    }
    books.give_back_all(chunks, 1);
    hot.install(chunks.first(), 0, 0, 0);
    hot.sync_held(cold);
}

/// Where the region's next chunk starts for the peak's count: past what the
/// current one used, rounded up to 4 KiB, plus the most padding above 4 KiB
/// that `layout` can need there. Chunks start at least 4 KiB-aligned, and
/// padding for an alignment up to 4 KiB is the same from any 4 KiB-aligned
/// offset, so the peak counts what one chunk needs to hold the window (not a
/// page size: a coarser rounding would count padding no chunk needs), and a
/// region that outgrew a chunk has a peak above it.
pub(super) fn before_next(hot: &Hot, layout: Layout) -> usize {
    const GRAIN: usize = 4096;
    let used = hot.before() + hot.cursor.load(Relaxed);
    used.next_multiple_of(GRAIN) + layout.align().saturating_sub(GRAIN)
}
