//! [`Region`]: one thread's bump range inside a
//! [`CachingAllocator`](super::CachingAllocator): the pointer arithmetic of
//! the fast path, and how a region grows, rewinds and resets.

use core::alloc::Layout;
use core::mem;
use core::ptr::{self, NonNull};
use std::sync::atomic::{
    AtomicPtr, AtomicUsize, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed,
};

use super::Locked;
use super::checkpoint::{Mark, NESTED_CHECKPOINTS};
use crate::block::size_class;
use crate::os::page_size;
use crate::block_cache::BlockCache;
use crate::chunk::Chunk;

/// One thread's bump range: the hot fields the fast path uses, and the cold
/// state behind them.
///
/// Aligned to 128 bytes (two cache lines, as crossbeam's `CachePadded` on
/// x86_64) so that threads bumping in neighbouring regions never share a line.
#[repr(align(128))]
pub(super) struct Region {
    hot: Hot,
    /// The cold state, owned (like a `Box`) in an allocation of its own: a
    /// `&mut Cold` then covers none of the region's own bytes, so the
    /// references to the region that the allocator keeps (its list of
    /// regions, each thread's one-entry cache) stay valid under Rust's
    /// aliasing rules while the cold state changes.
    cold: NonNull<Cold>,
}

// SAFETY: the region owns its cold state exclusively, as a `Box` would, and
// everything in it is `Send`.
unsafe impl Send for Region {}

// SAFETY: the hot fields are atomics. The cold state is reached only through
// `cold`, which takes the allocator's locked state as proof that the caller
// holds the lock, so no two threads touch it at once.
unsafe impl Sync for Region {}

/// What the fast path reads and writes.
///
/// Only the thread that owns the region writes these (or, for the locked
/// region of the debug checks, the holder of the allocator's lock), and the
/// allocator's `&mut` methods reset them; `stats` and `checkpoint` read them
/// from any thread. Relaxed atomic loads and stores — never a
/// read-modify-write — compile to plain moves, so the fast path costs what a
/// `Cell` would while concurrent readers stay free of data races.
struct Hot {
    /// Start of the current chunk; dangling when there is none.
    base: AtomicPtr<u8>,
    /// Offset of the first free byte in the chunk.
    cursor: AtomicUsize,
    /// Bytes usable in the chunk (0 when there is none).
    limit: AtomicUsize,
    /// Bytes requested here and not yet folded into the allocator's totals
    /// (at a rewind, the part it recycles; at a reset, all): the region's
    /// live bytes.
    live: AtomicUsize,
    /// Requests served here since the last fold. Wraps rather than
    /// overflows (2^32 requests between two folds on a 32-bit target).
    count: AtomicUsize,
    /// While the region is *parked* (from a reset until its owner's next
    /// request), the usable bytes of its chunk, with `limit` at 0 so the
    /// fast path misses; 0 otherwise. Whoever swaps it to 0 first owns the
    /// chunk: the owner, to bump in it again, or another thread under the
    /// lock, to take it over (the owner then needs another).
    parked: AtomicUsize,
}

/// What only the slow path, checkpoints, rewinds and resets touch.
#[derive(Default)]
pub(super) struct Cold {
    /// The chunk the region bumps in.
    chunk: Option<Chunk>,
    /// Chunks the region filled earlier this window: still lent out.
    retired: Vec<Chunk>,
    /// Bytes used in `retired`, padding included.
    retired_used: usize,
    /// The most bytes the region used in one window.
    peak: usize,
    /// One mark per open checkpoint that found the region in use, innermost
    /// last.
    marks: Vec<Mark>,
}

/// What a reset or rewind folds into the allocator's totals.
#[derive(Debug, Default)]
pub(super) struct Folded {
    pub allocations: u64,
    pub bytes_requested: u64,
    /// Bytes that were live in the region just before.
    pub live: usize,
}

impl Region {
    /// A region with no memory yet; `None` if its cold state cannot be
    /// allocated.
    pub(super) fn try_new() -> Option<Self> {
        let mut state = Cold::default();
        // Room for the marks of nested checkpoints, so that taking one
        // allocates nothing.
        state.marks.try_reserve_exact(NESTED_CHECKPOINTS).ok()?;
        // `std::alloc` rather than `Box::new`, which aborts when it fails.
        // SAFETY: `Cold` is not zero-sized (it holds `Vec`s).
        let cold =
            NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Cold>()) })?.cast::<Cold>();
        // SAFETY: fresh memory with `Cold`'s layout, written before any read.
        unsafe { cold.write(state) };
        Some(Region {
            hot: Hot {
                base: AtomicPtr::new(ptr::dangling_mut()),
                cursor: AtomicUsize::new(0),
                limit: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                count: AtomicUsize::new(0),
                parked: AtomicUsize::new(0),
            },
            cold,
        })
    }

    /// Carves `layout` out of the current chunk, or `None` when it does not
    /// fit: the fast path.
    ///
    /// # Safety
    ///
    /// No other thread may bump this region at the same time: the caller is
    /// the thread that owns it (the one `Regions::get` returned it to), or
    /// holds the allocator's lock for the locked region.
    #[inline(always)]
    pub(super) unsafe fn bump(&self, layout: Layout) -> Option<NonNull<u8>> {
        let hot = &self.hot;
        let base = hot.base.load(Relaxed);
        let cursor = hot.cursor.load(Relaxed);
        let pad = base.addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
        // No overflow: `cursor <= limit <= isize::MAX`, `pad < align` and
        // `Layout` guarantees `size + align - 1 <= isize::MAX`, so the sum is
        // below `2 * isize::MAX`.
        let start = cursor + pad;
        let end = start + layout.size();
        if end > hot.limit.load(Relaxed) {
            return None;
        }
        hot.cursor.store(end, Relaxed);
        // No overflow: live bytes sit in chunks, so they sum to less than
        // `isize::MAX`.
        hot.live
            .store(hot.live.load(Relaxed) + layout.size(), Relaxed);
        hot.count
            .store(hot.count.load(Relaxed).wrapping_add(1), Relaxed);
        // `wrapping_add` because an empty region's `base` is dangling: a
        // zero-sized request may land there. Otherwise `start <= limit` keeps
        // the address inside the chunk, where it equals `add`.
        let ptr = base.wrapping_add(start);
        debug_assert!(ptr.addr() % layout.align() == 0);
        // SAFETY: `base` is a chunk start or `dangling_mut()`, both non-null,
        // and `start <= limit` keeps the address within the chunk (or at
        // `pad < align` bytes past the dangling address, still non-zero).
        Some(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// Takes the region's parked chunk back for its owner, lock-free: one
    /// atomic swap per window. `false` if it was not parked (or was taken
    /// over).
    ///
    /// # Safety
    ///
    /// As for [`bump`](Self::bump): only the region's owner calls this.
    #[inline]
    pub(super) unsafe fn unpark(&self) -> bool {
        let parked = self.hot.parked.swap(0, Acquire);
        if parked == 0 {
            return false;
        }
        self.hot.limit.store(parked, Relaxed);
        true
    }

    /// Takes over the region's chunk if it is parked (its owner did not ask
    /// for it back since the last reset) and can hold `at_least` bytes
    /// without moving: a smaller one is no use to the thief, which would
    /// outgrow it, and its owner may still want it. Under the lock
    /// (`locked`).
    pub(super) fn steal(&self, locked: &mut Locked, at_least: usize) -> Option<Chunk> {
        // The chunk changes only under the lock, which we hold.
        let big_enough = self
            .cold(locked)
            .chunk
            .as_ref()
            .is_some_and(|c| c.capacity() >= at_least);
        if !big_enough || self.hot.parked.swap(0, AcqRel) == 0 {
            return None;
        }
        // The swap made the chunk ours: the owner's `unpark` now fails and
        // it takes the lock (which we hold) before touching the cold state.
        // The hot fields keep pointing at the chunk, but with `limit` at 0
        // nothing can be carved from it through them.
        self.cold(locked).chunk.take()
    }

    /// Takes the chunk of an [`idle`](Self::idle) region, leaving it
    /// without one. Under the lock (`locked`), by the region's owner.
    pub(super) fn take_chunk(&self, locked: &mut Locked) -> Option<Chunk> {
        debug_assert!(self.idle(locked));
        let chunk = self.cold(locked).chunk.take();
        self.hot.install(None, 0);
        chunk
    }

    /// The bytes a [`steal`](Self::steal) would take: the usable bytes of
    /// the chunk if the region is parked, else 0. Under the lock
    /// (`locked`).
    pub(super) fn parked_bytes(&self, locked: &mut Locked) -> usize {
        if self.hot.parked.load(Relaxed) == 0 {
            return 0;
        }
        self.cold(locked).chunk.as_ref().map_or(0, Chunk::usable)
    }

    /// The cold state, under the allocator's lock: `_locked` lives in the
    /// state the lock guards, so it can only be borrowed by holding the lock
    /// (or through `&mut` to the allocator). Callers pass their own
    /// allocator's.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(super) fn cold<'a>(&'a self, _locked: &'a mut Locked) -> &'a mut Cold {
        // SAFETY: `cold` points to the `Cold` this region owns, valid until
        // the region drops. It is reached only here, and the caller holds
        // the allocator's lock, borrowed mutably for as long as the result
        // lives, so no other thread (which would need the lock) and no other
        // call on this thread (which would need the same borrow) can reach
        // it meanwhile.
        unsafe { &mut *self.cold.as_ptr() }
    }

    /// Whether nothing in the region is in use or marked: a thread may take
    /// it over. Under the lock (`locked`).
    pub(super) fn idle(&self, locked: &mut Locked) -> bool {
        let cold = self.cold(locked);
        self.cursor() == 0 && self.live() == 0 && cold.retired.is_empty() && cold.marks.is_empty()
    }

    /// The region's offset of the first free byte.
    #[inline]
    pub(super) fn cursor(&self) -> usize {
        self.hot.cursor.load(Relaxed)
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

    /// Takes `bytes` back off the live count: carved, but not requested
    /// (a canary). Under the same contract as [`bump`](Self::bump).
    pub(super) fn uncount(&self, bytes: usize) {
        let live = &self.hot.live;
        live.store(live.load(Relaxed) - bytes, Relaxed);
    }

    /// Makes the current chunk's usable size known to the fast path after
    /// it grew in place.
    pub(super) fn set_limit(&self, limit: usize) {
        debug_assert!(limit >= self.cursor());
        debug_assert!(self.hot.parked.load(Relaxed) == 0, "a parked region grows");
        self.hot.limit.store(limit, Relaxed);
    }

    /// Moves the region to `chunk` (empty) to serve `request`, keeping the
    /// current one, which still holds live scratch, until the reset.
    pub(super) fn switch_to(&self, cold: &mut Cold, chunk: Chunk, request: Layout) {
        debug_assert!(self.hot.parked.load(Relaxed) == 0, "a parked region moves");
        if let Some(old) = cold.chunk.replace(chunk) {
            // Where the new chunk would start, at the latest, in one chunk
            // that held the whole window: page-aligned past what the old one
            // used, plus the most padding above a page the request can
            // need. So the peak counts all the padding one chunk needs (some
            // of it twice, for alignments above a page), and it exceeds the
            // capacity of any chunk the region outgrew: else the reset would
            // keep that chunk, and the next window would outgrow it again.
            let page = page_size();
            let used = (cold.retired_used + self.cursor()).next_multiple_of(page);
            cold.retired_used = used + request.align().saturating_sub(page);
            cold.retired.push(old);
        }
        self.hot.install(cold.chunk.as_ref(), 0);
    }

    /// Rewinds to the checkpoint at `depth`: back to the mark taken then, or
    /// to the start if the region was unused then. Chunks taken since go to
    /// `loose` (the allocator keeps them for the next kernel). A region left
    /// with nothing in it is parked, as at a reset, unless `keep`: so the
    /// threads of the next kernel, fresh or not, find its memory.
    ///
    /// Like every method that changes another thread's region, it needs the
    /// lock (`locked`) and no thread allocating (the caller's `&mut` to the
    /// allocator).
    pub(super) fn rewind(
        &self,
        locked: &mut Locked,
        depth: usize,
        keep: bool,
        loose: &mut Vec<Chunk>,
    ) -> Folded {
        let (hot, cold) = (&self.hot, self.cold(locked));
        while cold.marks.last().is_some_and(|m| m.depth > depth) {
            cold.marks.pop();
        }
        let mark = match cold.marks.last() {
            Some(m) if m.depth == depth => cold.marks.pop().unwrap_or_default(),
            _ => Mark::default(),
        };
        let folded = hot.fold(cold, mark.live);
        // The chunk that was current at the mark becomes current again; the
        // ones after it are loose.
        // (Drained in place: a rewind allocates nothing for its own books.)
        if mark.retired < cold.retired.len() {
            let mut later = cold.retired.drain(mark.retired..);
            let current = later.next();
            loose.extend(later);
            loose.extend(mem::replace(&mut cold.chunk, current));
        }
        cold.retired_used = mark.retired_used;
        hot.install(cold.chunk.as_ref(), mark.cursor);
        // Nothing below the cursor is live, and no mark (which would have
        // recorded a cursor or live bytes) remains: taking the chunk over
        // cannot touch anyone's scratch.
        if !keep && mark.cursor == 0 && mark.live == 0 && cold.retired.is_empty() {
            debug_assert!(cold.marks.is_empty());
            hot.park();
        }
        folded
    }

    /// Ends the window: recycles everything. A region that outgrew its
    /// chunk moves to one that holds its peak ([`outgrown`]). Unless `keep`
    /// (the region of the thread that resets), the region is parked: its
    /// chunk stays, but a thread that needs one and can use it may take it
    /// over until the owner asks for it back. So a thread that exited, or
    /// stopped allocating, leaves its memory to the next thread that can use
    /// it. Needs what [`rewind`](Self::rewind) needs.
    #[inline]
    pub(super) fn reset(&self, locked: &mut Locked, keep: bool, loose: &mut Vec<Chunk>) -> Folded {
        let (hot, cold) = (&self.hot, self.cold(locked));
        cold.marks.clear();
        let folded = hot.fold(cold, 0);
        if cold.retired.is_empty() && cold.chunk.as_ref().is_none_or(|c| c.capacity() >= cold.peak) {
            // The usual case: same chunk, back to its start.
            hot.cursor.store(0, Relaxed);
        } else {
            outgrown(hot, cold, loose);
        }
        if keep {
            // The resetting thread owns this region: ready for it again.
            let parked = hot.parked.load(Relaxed);
            if parked != 0 {
                hot.parked.store(0, Relaxed);
                hot.limit.store(parked, Relaxed);
            }
        } else if hot.limit.load(Relaxed) != 0 {
            hot.park();
        }
        folded
    }

    /// Gives the committed pages above the cursor back to the system (a
    /// reservation only; blocks stay whole) and forgets the region's peak.
    /// Returns the bytes given back.
    /// Needs what [`rewind`](Self::rewind) needs.
    pub(super) fn trim(&self, locked: &mut Locked, cache: &BlockCache) -> usize {
        let hot = &self.hot;
        let cold = self.cold(locked);
        // Forget the most the region ever used, or its next growth would
        // commit all of it again: from now on it grows to what it uses.
        cold.peak = cold.retired_used + hot.cursor.load(Relaxed);
        let Some(Chunk::Mapped(m)) = cold.chunk.as_mut() else {
            return 0;
        };
        let before = m.committed();
        cache.decommit(m, hot.cursor.load(Relaxed));
        let after = m.committed();
        match hot.parked.load(Relaxed) {
            0 => hot.limit.store(after, Relaxed),
            _ => hot.parked.store(after, Relaxed),
        }
        before - after
    }

    /// Gives every chunk to `loose`, leaving the region empty. After a
    /// reset; needs what [`rewind`](Self::rewind) needs.
    pub(super) fn release(&self, locked: &mut Locked, loose: &mut Vec<Chunk>) {
        let cold = self.cold(locked);
        debug_assert!(cold.retired.is_empty() && self.cursor() == 0);
        loose.extend(cold.chunk.take());
        self.hot.install(None, 0);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `cold` came from `std::alloc::alloc` with `Cold`'s layout
        // (as `Box` allocates) and was initialised; this is its only release.
        drop(unsafe { Box::from_raw(self.cold.as_ptr()) });
    }
}

impl Hot {
    /// Parks the region: the fast path misses until the owner unparks it,
    /// and until then another thread may take its chunk over.
    fn park(&self) {
        debug_assert!(self.cursor.load(Relaxed) == 0);
        self.parked.store(self.limit.load(Relaxed), Relaxed);
        self.limit.store(0, Relaxed);
    }

    /// Points the fast path at `chunk`, at `cursor`.
    fn install(&self, chunk: Option<&Chunk>, cursor: usize) {
        let (base, limit) = match chunk {
            Some(chunk) => (chunk.base().as_ptr(), chunk.usable()),
            None => (ptr::dangling_mut(), 0),
        };
        debug_assert!(cursor <= limit);
        self.base.store(base, Relaxed);
        self.limit.store(limit, Relaxed);
        self.cursor.store(cursor, Relaxed);
        self.parked.store(0, Relaxed);
    }

    /// Folds the counters, down to `keep_live` live bytes, and notes the
    /// window's use.
    #[inline]
    fn fold(&self, cold: &mut Cold, keep_live: usize) -> Folded {
        let count = self.count.load(Relaxed);
        let live = self.live.load(Relaxed);
        debug_assert!(live >= keep_live);
        self.count.store(0, Relaxed);
        self.live.store(keep_live, Relaxed);
        cold.peak = cold.peak.max(cold.retired_used + self.cursor.load(Relaxed));
        Folded {
            allocations: count as u64,
            bytes_requested: (live - keep_live) as u64,
            live,
        }
    }
}

impl Cold {
    /// The current chunk.
    pub(super) fn chunk(&mut self) -> Option<&mut Chunk> {
        self.chunk.as_mut()
    }

    /// Makes room to retire the current chunk, so that
    /// [`Region::switch_to`] allocates nothing (a failed allocation there
    /// would abort). `false` if there is no memory for it.
    pub(super) fn reserve_retired(&mut self) -> bool {
        self.retired.try_reserve(1).is_ok()
    }

    /// The most bytes the region used in one window.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Records where `region` is, for the checkpoint at `depth`, if it has
    /// anything to come back to.
    pub(super) fn mark(&mut self, region: &Region, depth: usize) {
        let (cursor, live) = (region.cursor(), region.live());
        if cursor != 0 || live != 0 || !self.retired.is_empty() {
            self.marks.push(Mark {
                depth,
                cursor,
                retired: self.retired.len(),
                retired_used: self.retired_used,
                live,
            });
        }
    }
}

/// A reset of a region that outgrew its chunk: in this window (it moved to
/// other chunks), or in an earlier one (a kernel's larger chunk went back to
/// the spares at its rewind). The older chunks go to `loose`, and so does the
/// current one if it cannot hold the peak without moving (a heap chunk never
/// grows). The region then takes the smallest chunk in `loose` that holds
/// the peak and holds no more than the cache would hand out for it (a
/// quarter over the peak's size class), if there is one: the spares are
/// there at a reset. If not, its next request takes one sized to the peak.
/// Either way one chunk serves the whole window from then on.
#[cold]
#[inline(never)]
fn outgrown(hot: &Hot, cold: &mut Cold, loose: &mut Vec<Chunk>) {
    cold.retired_used = 0;
    loose.append(&mut cold.retired);
    let peak = cold.peak;
    let most = size_class(peak).map_or(usize::MAX, |class| class + class / 4);
    if cold
        .chunk
        .as_ref()
        .is_some_and(|c| matches!(c, Chunk::Heap(_)) || c.capacity() < peak)
    {
        loose.extend(cold.chunk.take());
        let best = (0..loose.len())
            .filter(|&i| loose[i].capacity() >= peak && loose[i].usable() <= most)
            .min_by_key(|&i| loose[i].usable());
        cold.chunk = best.map(|i| loose.swap_remove(i));
    }
    hot.install(cold.chunk.as_ref(), 0);
}

/// How many bytes a region wants usable when it must grow to `need`:
/// 12.5% (and at least 16 KiB, or a page if larger) more than it has, so
/// that committing pages takes few system calls while what is held stays
/// within 12.5% (plus 16 KiB or a page) of the most the region ever used.
pub(super) fn growth(now: usize, need: usize, min: usize) -> usize {
    let step = (now / 8).max((16 << 10).max(page_size()));
    now.saturating_add(step).max(need).max(min)
}
