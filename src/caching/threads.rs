//! Which region a thread uses: [`Regions`].
//!
//! The life cycle of a region:
//!
//! - **Claim.** A thread's first request misses the fast path (it has no
//!   region yet), and the slow path makes one for it under the lock.
//! - **Grow.** When a request does not fit, the slow path commits more pages
//!   of the region's reservation (or moves it to a larger chunk).
//! - **Reset.** `reset` rewinds every region to the start of its chunk.
//! - **Thread exit.** Thread ids are small integers that the `thread_local`
//!   crate hands back when a thread exits and gives to the next new thread,
//!   so a new thread takes over the region (and its memory) of one that
//!   exited. A region that served nothing in a window gives its chunk to the
//!   allocator's spares at the reset, for the next thread that needs one.
//!   So memory grows with the threads allocating in one window, never with
//!   the threads ever seen, and there is no cap on the thread count.
//! - **Trim.** `trim` and `release` give memory back to the system or the
//!   cache.

use core::cell::Cell;
use core::ptr::{self, NonNull};

use thread_local::ThreadLocal;

use super::region::Region;

/// Every thread's region in one allocator.
pub(super) struct Regions {
    all: ThreadLocal<Region>,
    /// The allocator's id: never reused, so [`LAST`] can tell allocators
    /// apart.
    id: u64,
}

/// An allocator id no allocator has.
const NONE: u64 = u64::MAX;

thread_local! {
    /// The allocator this thread last found its region in, and the region:
    /// a one-entry cache in front of `ThreadLocal::get`, so that the fast
    /// path's lookup is one thread-local load and one compare. Const
    /// initialised with no destructor, so reading it is a plain load.
    static LAST: Cell<(u64, *const Region)> = const { Cell::new((NONE, ptr::null())) };
}

/// The regions made so far, in the order they were made: walked by
/// `checkpoint` and `stats` (`ThreadLocal::iter` visits every bucket, used
/// or not). Kept in the allocator's locked state; only ever read as shared
/// references.
#[derive(Default)]
pub(super) struct Claimed(Vec<NonNull<Region>>);

// SAFETY: the pointers are only turned into `&Region`, which is `Sync`.
unsafe impl Send for Claimed {}

impl Regions {
    /// The regions of the allocator with id `id`.
    pub(super) fn new(id: u64) -> Self {
        debug_assert!(id != NONE);
        Regions {
            all: ThreadLocal::new(),
            id,
        }
    }

    /// The calling thread's region, if the thread last used this allocator:
    /// the fast path's lookup, one thread-local load and one compare. `None`
    /// sends the caller to [`get`](Self::get), on its slow path.
    #[inline(always)]
    pub(super) fn cached(&self) -> Option<&Region> {
        let (id, region) = LAST.get();
        if id != self.id {
            return None;
        }
        // SAFETY: only `get` stores into `LAST`, on this thread, a region of
        // the allocator with this id: this one (ids are never reused, and
        // `&self` keeps it alive). Regions never move or drop before their
        // allocator, and this thread's number (hence its region) stays the
        // same until it exits.
        Some(unsafe { &*region })
    }

    /// The calling thread's region, if it has one, through the
    /// `ThreadLocal`; cached for [`cached`](Self::cached).
    pub(super) fn get(&self) -> Option<&Region> {
        if let Some(region) = self.cached() {
            return Some(region);
        }
        let region = self.all.get()?;
        LAST.set((self.id, region));
        Some(region)
    }

    /// The calling thread's region, made on first use (and recorded in
    /// `claimed`, which the caller's lock guards).
    /// `None` if there is no memory to record a new region in.
    pub(super) fn claim(&self, claimed: &mut Claimed) -> Option<&Region> {
        if let Some(region) = self.get() {
            return Some(region);
        }
        // Room first, so that a region is never made without its record:
        // `checkpoint` must see every region.
        claimed.0.try_reserve(1).ok()?;
        let fresh = Region::try_new()?;
        // A thread given an exited thread's number finds its region (and
        // `fresh` is dropped): only a region made here is new to the list.
        let mut made = false;
        let region = self.all.get_or(|| {
            made = true;
            fresh
        });
        if made {
            claimed.0.push(NonNull::from(region));
        }
        Some(region)
    }

    /// Every region made so far, through the list the allocator keeps.
    pub(super) fn iter<'a>(&'a self, claimed: &'a Claimed) -> impl Iterator<Item = &'a Region> {
        claimed.0.iter().map(|&region| self.deref(region))
    }

    /// The one region made so far, if there is exactly one.
    #[inline]
    pub(super) fn only<'a>(&'a self, claimed: &'a Claimed) -> Option<&'a Region> {
        match *claimed.0.as_slice() {
            [region] => Some(self.deref(region)),
            _ => None,
        }
    }

    /// A region recorded in `Claimed`, borrowed for as long as `self`.
    #[inline]
    fn deref(&self, region: NonNull<Region>) -> &Region {
        // SAFETY: every pointer in `Claimed` came from `self.all.get_or` and
        // points into `self.all`, which never moves or drops an entry while it
        // lives (we never call `clear`); the borrow is tied to `self`.
        unsafe { region.as_ref() }
    }
}
