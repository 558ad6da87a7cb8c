//! Which region a thread bumps in: leases.
//!
//! A region is FREE or leased to one thread, named by a serial no other
//! thread ever has, until the next `reset` or `rewind` (both `&mut`) frees
//! it. Each thread remembers, in a thread-local without a destructor, the
//! window token under which it last leased a region, and the region. Every
//! reset and rewind starts a new window token, so the fast path is one
//! compare: a thread whose token is the allocator's current one holds the
//! lease on the region it remembers. Otherwise its slow path takes the lease
//! back (its own region, if still free or still its own: one
//! compare-and-swap, no lock), or, under the allocator's lock, leases the
//! FREE region that holds the most memory, or makes a new one.
//!
//! There is no thread-exit code: an exited thread's region stays leased
//! until the next reset or rewind frees it, and a thread-local destructor
//! that allocates late is served like any other request.

use core::cell::Cell;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::region::Region;

/// Window tokens: a new one at every reset and rewind of any allocator.
/// Never 0 (what a thread that leased nothing remembers), never reused.
static NEXT_WINDOW: AtomicU64 = AtomicU64::new(1);

/// Thread serials: never 0 (a FREE region's owner), never reused.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A thread's last lease.
#[derive(Clone, Copy)]
struct Last {
    /// The window token it was taken under.
    window: u64,
    /// The id of the allocator the region belongs to.
    allocator: u64,
    /// Null while `allocator` is 0. A raw pointer, not `NonNull`: its niche
    /// would cost the fast path a test of it.
    region: *const Region,
}

thread_local! {
    /// Const-initialised with no destructor: reading it is a plain load,
    /// and it works in any thread-local destructor.
    static LAST: Cell<Last> = const {
        Cell::new(Last { window: 0, allocator: 0, region: ptr::null() })
    };
    static SERIAL: Cell<u64> = const { Cell::new(0) };
}

/// A new window token.
#[inline]
pub(super) fn next_window() -> u64 {
    NEXT_WINDOW.fetch_add(1, Relaxed)
}

/// The calling thread's serial.
#[inline]
pub(super) fn serial() -> u64 {
    let serial = SERIAL.get();
    if serial != 0 {
        return serial;
    }
    let serial = NEXT_SERIAL.fetch_add(1, Relaxed);
    SERIAL.set(serial);
    serial
}

/// The window token the calling thread last leased a region under, and
/// the region: the fast path's lookup.
///
/// If the token is an allocator's current window, the region belongs to that
/// allocator (tokens are never reused, and only [`remember`] stores one,
/// with a region of the allocator that issued it), and the thread holds its
/// lease: leases change hands only at a reset or rewind, which starts a new
/// token.
#[inline(always)]
pub(super) fn leased() -> (u64, *const Region) {
    let last = LAST.get();
    (last.window, last.region)
}

/// The region the calling thread last leased from the allocator with id
/// `allocator`, in any window: where its slow path looks first.
#[inline]
pub(super) fn last_of(allocator: u64) -> Option<NonNull<Region>> {
    let last = LAST.get();
    if last.allocator != allocator {
        return None;
    }
    NonNull::new(last.region.cast_mut())
}

/// The region the calling thread last leased from the allocator with id
/// `allocator`, and the thread's serial: at a reset or rewind it keeps that
/// region (when it frees it), so that its next request takes the fast path.
#[inline]
pub(super) fn mine(allocator: u64) -> (Option<NonNull<Region>>, u64) {
    (last_of(allocator), serial())
}

/// Remembers that the calling thread leases `region`, of the allocator
/// with id `allocator`, in window `window`.
#[inline]
pub(super) fn remember(window: u64, allocator: u64, region: NonNull<Region>) {
    LAST.set(Last {
        window,
        allocator,
        region: region.as_ptr(),
    });
}

/// Leases to `me` the FREE region in `regions` that holds the most memory
/// (so fresh threads take over what exited ones left), or makes a new one
/// and records it. `None` when there is no memory for a new one.
pub(super) fn lease_any(regions: &mut Vec<NonNull<Region>>, me: u64) -> Option<NonNull<Region>> {
    loop {
        // SAFETY: the recorded regions live until the allocator drops, and
        // the caller holds its lock, which `&mut Vec` proves.
        let deref = |r: &NonNull<Region>| unsafe { r.as_ref() };
        let best = regions
            .iter()
            .filter(|r| deref(r).is_free())
            .max_by_key(|r| deref(r).held())
            .copied();
        let Some(best) = best else { break };
        // Another thread may lease it first, lock-free (its own last
        // region): then look again.
        // SAFETY: as above.
        if unsafe { best.as_ref() }.lease(me) {
            return Some(best);
        }
    }
    // Room first, so that a region is never made without its record.
    regions.try_reserve(1).ok()?;
    let fresh = Region::try_new(me)?;
    regions.push(fresh);
    Some(fresh)
}
