//! Which region a thread bumps in: leases (docs/design.md, "The slow path:
//! take a lease" and "Region states and events").
//!
//! A region is FREE or leased to one thread's serial until the next `reset`
//! or `rewind` (both `&mut`), each of which starts a new window token. A
//! thread remembers the token it last leased under and the region, so the
//! fast path is one compare. There is no thread-exit code: an exited
//! thread's region stays leased until the next reset or rewind. Taking a
//! lease makes no guard: the caller makes its [`Leased`](super::region::Leased).

use core::cell::Cell;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::region::{FREE, Region};

/// Window tokens: a new one at every reset and rewind of any allocator.
/// Never 0 (what a thread that leased nothing remembers), never reused.
/// Handed out in blocks of [`TOKEN_BLOCK`], one block to an allocator at a
/// time, so a reset takes a token without an atomic read-modify-write.
static NEXT_WINDOW: AtomicU64 = AtomicU64::new(1);

/// Tokens an allocator takes at once (2^48 blocks before a `u64` wraps).
const TOKEN_BLOCK: u64 = 1 << 16;

/// An allocator's window tokens: the current one, which the fast path
/// compares, and the end of its block.
pub(super) struct Windows {
    pub current: u64,
    end: u64,
}

impl Windows {
    /// A fresh block, its first token current.
    pub(super) fn new() -> Self {
        let current = NEXT_WINDOW.fetch_add(TOKEN_BLOCK, Relaxed);
        Windows {
            current,
            end: current + TOKEN_BLOCK,
        }
    }

    /// Starts a new window: a token no thread remembers. Returns it.
    #[inline]
    pub(super) fn next(&mut self) -> u64 {
        self.current += 1;
        if self.current == self.end {
            *self = Windows::new();
        }
        self.current
    }
}

/// Thread serials: never 0 (a FREE region's owner), never reused.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// What a thread knows: its last lease, and who it is.
struct Thread {
    /// The window token the last lease was taken under, and the region:
    /// the fast path's look-up. A raw pointer, null at first, not
    /// `NonNull`: its niche would cost the fast path a test of it.
    lease: Cell<(u64, *const Region)>,
    /// The id of the allocator the region belongs to (0: none), and the
    /// thread's serial (0 until it needs one).
    ids: Cell<(u64, u64)>,
}

thread_local! {
    /// Const-initialised with no destructor: reading it is a plain load,
    /// it works in any thread-local destructor, and one block of it is one
    /// look-up where thread-locals cost a call (a shared library).
    static THREAD: Thread = const {
        Thread { lease: Cell::new((0, ptr::null())), ids: Cell::new((0, 0)) }
    };
}

/// The window token the calling thread last leased a region under, and
/// the region. If the token is an allocator's current one, the region is
/// that allocator's (tokens are never reused; only [`record`] and
/// [`carry_over`] store one, with a region of the allocator that issued it) and
/// the thread holds its lease.
#[inline(always)]
pub(super) fn leased() -> (u64, *const Region) {
    THREAD.with(|t| t.lease.get())
}

/// The region the calling thread last leased from the allocator with id
/// `allocator`, in any window (where its slow path looks first), and the
/// thread's serial.
#[inline]
pub(super) fn last_lease(allocator: u64) -> (Option<NonNull<Region>>, u64) {
    THREAD.with(|t| {
        let (id, mut serial) = t.ids.get();
        if serial == 0 {
            serial = NEXT_SERIAL.fetch_add(1, Relaxed);
            t.ids.set((id, serial));
        }
        let (_, region) = t.lease.get();
        let region = NonNull::new(region.cast_mut()).filter(|_| id == allocator);
        (region, serial)
    })
}

/// For a reset of the allocator with id `allocator`, which starts `window`:
/// the region the calling thread last leased from it, if any, and the
/// thread's serial; the thread remembers that region under `window` at
/// once, as the reset leases it to the thread again.
#[inline]
pub(super) fn carry_over(allocator: u64, window: u64) -> (Option<NonNull<Region>>, u64) {
    THREAD.with(|t| {
        let (id, serial) = t.ids.get();
        if id != allocator {
            return (None, FREE);
        }
        // A thread remembers an allocator only after a lease, which gave
        // it a serial.
        debug_assert!(serial != 0);
        let (_, region) = t.lease.get();
        t.lease.set((window, region));
        (NonNull::new(region.cast_mut()), serial)
    })
}

/// Remembers that the calling thread leases `region`, of the allocator
/// with id `allocator`, in window `window`.
#[inline]
pub(super) fn record(window: u64, allocator: u64, region: NonNull<Region>) {
    THREAD.with(|t| {
        t.lease.set((window, region.as_ptr()));
        t.ids.set((allocator, t.ids.get().1));
    });
}

/// Leases to `thread` the region `pick` chooses (`None`: none to choose), under
/// the allocator's lock; if another thread leases it first, lock-free (its
/// own last region), `pick` chooses again.
#[inline]
pub(super) fn first<'r>(thread: u64, pick: impl Fn() -> Option<&'r Region>) -> Option<&'r Region> {
    loop {
        let best = pick()?;
        if best.lease(thread) {
            return Some(best);
        }
    }
}

/// Leases to `thread` a region in `regions` (the allocator's list, under its
/// lock): one `thread` leases already (a thread that went to another allocator
/// and came back), else the FREE one that holds the most (so fresh threads
/// take over what exited ones left), else a new one, recorded. `None` when
/// there is no memory for a new one.
pub(super) fn lease_any(
    regions: &mut Vec<NonNull<Region>>,
    thread: u64,
) -> Option<NonNull<Region>> {
    let last = |r: &&Region| r.is_leased_to(FREE) || r.is_leased_to(thread);
    let best = || {
        super::regions(regions)
            .filter(last)
            .max_by_key(|r| (r.is_leased_to(thread), r.held()))
    };
    if let Some(best) = first(thread, best) {
        return Some(NonNull::from(best));
    }
    lease_new(regions, thread)
}

/// A new region leased to `thread`, recorded in `regions` (the allocator's
/// list, under its lock); `None` when there is no memory for it.
pub(super) fn lease_new(
    regions: &mut Vec<NonNull<Region>>,
    thread: u64,
) -> Option<NonNull<Region>> {
    // Room first, so that a region is never made without its record.
    regions.try_reserve(1).ok()?;
    let fresh = Region::try_new(thread)?;
    regions.push(fresh);
    Some(fresh)
}
