//! Which region a thread bumps in: leases (docs/design.md, "The slow path:
//! take a lease" and "Region states and events").
//!
//! A region is FREE or leased to one thread's serial until the next `reset`
//! or `rewind` (both `&mut`), each of which starts a new window token. A
//! thread remembers the token it last leased under and the region, so the
//! fast path is one compare. There is no thread-exit code: an exited
//! thread's region stays leased until the next reset or rewind. Taking a
//! lease makes no guard: the caller makes its [`Leased`](super::region::Leased).

use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::region::{FREE, Region};
use crate::fast_path::{self, BumpState, THREAD};

/// Window tokens: a new one at every reset and rewind of any allocator.
/// Never 0 (what a thread that leased nothing remembers), never reused.
/// Handed out in blocks of [`TOKEN_BLOCK`], one block to an allocator at a
/// time, so a reset takes a token without an atomic read-modify-write.
static NEXT_WINDOW: AtomicU64 = AtomicU64::new(1);

/// Tokens an allocator takes at once (2^48 blocks before a `u64` wraps).
const TOKEN_BLOCK: u64 = 1 << 16;

/// The end of an allocator's block of window tokens. The current one is
/// in the allocator's header (`CachingHeader::window`), where the fast path
/// compares it.
pub(super) struct Windows {
    end: u64,
}

impl Windows {
    /// A fresh block, and its first token, to be current.
    pub(super) fn new() -> (Self, u64) {
        let first = NEXT_WINDOW.fetch_add(TOKEN_BLOCK, Relaxed);
        let end = first + TOKEN_BLOCK;
        (Windows { end }, first)
    }

    /// Starts a new window: `current` (the header's token) moves to a token
    /// no thread remembers. Returns it.
    #[inline]
    pub(super) fn next(&mut self, current: &mut u64) -> u64 {
        *current += 1;
        if *current == self.end {
            (*self, *current) = Windows::new();
        }
        *current
    }
}

/// Thread serials: never 0 (a FREE region's owner), never reused.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The window token the calling thread last leased a region under, and
/// the region. If the token is an allocator's current one, the region is
/// that allocator's (tokens are never reused; only [`record`] and
/// [`carry_over`] store one, with a region of the allocator that issued it) and
/// the thread holds its lease.
#[inline(always)]
pub(super) fn leased() -> (u64, *const Region) {
    // The bump state is the region's first field (`Region` is `#[repr(C)]`),
    // and the pointer was a region's (`record`, `carry_over`).
    let (window, bump) = fast_path::leased();
    (window, bump.cast())
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
        let (_, bump) = t.lease();
        let region = NonNull::new(bump.cast::<Region>().cast_mut()).filter(|_| id == allocator);
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
        let (_, bump) = t.lease();
        // SAFETY: the thread's own; `window` is a token of the allocator
        // with id `allocator`, whose region the thread remembers, and the
        // caller's reset (`&mut` to it, so no call through `&self` runs
        // meanwhile) leases that region to the thread again.
        unsafe { t.remember(window, bump) };
        (NonNull::new(bump.cast::<Region>().cast_mut()), serial)
    })
}

/// Remembers that the calling thread leases `region`, of the allocator
/// with id `allocator`, in window `window`.
#[inline]
pub(super) fn record(window: u64, allocator: u64, region: NonNull<Region>) {
    THREAD.with(|t| {
        // SAFETY: the thread's own; the caller leases `region`, of the
        // allocator with id `allocator`, to the calling thread under
        // `window`, that allocator's token. The bump state is the
        // region's first field (`Region` is `#[repr(C)]`).
        unsafe { t.remember(window, region.as_ptr().cast::<BumpState>()) };
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

/// A new region leased to `thread` (FREE: to none), recorded in `regions`
/// (the allocator's list, under its lock); `None` when there is no memory
/// for it.
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
