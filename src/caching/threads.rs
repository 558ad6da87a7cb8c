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
//!   exited. Every region but the resetting thread's is *parked* at a reset:
//!   its owner takes it back with one atomic swap, and until then any thread
//!   that needs a chunk may take its chunk over. So memory grows with the
//!   threads allocating in one window, never with the threads ever seen, and
//!   there is no cap on the thread count.
//! - **Trim.** `trim` and `release` give memory back to the system or the
//!   cache.

use core::alloc::Layout;
use core::cell::Cell;
use core::ptr::{self, NonNull};

use thread_local::ThreadLocal;

use super::region::Region;

/// Every thread's region in one allocator.
///
/// The allocator allocates each region itself and frees it when it drops
/// ([`Regions::free`]); the `ThreadLocal` holds only the pointer, and so do
/// the list of regions and each thread's cache. Every reference to a region
/// derives from that one pointer, so no reference made later (a thread's
/// fast path, a reset walking the list) can invalidate another under Rust's
/// aliasing rules.
pub(super) struct Regions {
    all: ThreadLocal<Owned>,
    /// The allocator's id: never reused, so [`LAST`] can tell allocators
    /// apart.
    id: u64,
}

/// A region the allocator owns.
#[derive(Clone, Copy)]
struct Owned(NonNull<Region>);

// SAFETY: the pointer is to a `Region`, which is `Send` and `Sync`; which
// thread holds a copy of the pointer does not matter.
unsafe impl Send for Owned {}

/// The regions made so far, in the order they were made: walked by
/// `checkpoint`, `reset` and `stats`, and freed by [`Regions::free`]. Kept in
/// the allocator's locked state.
#[derive(Default)]
pub(super) struct Claimed(Vec<NonNull<Region>>);

// SAFETY: as for `Owned`.
unsafe impl Send for Claimed {}

/// An allocator id no allocator has.
const NONE: u64 = u64::MAX;

thread_local! {
    /// The allocator this thread last found its region in, and the region:
    /// a one-entry cache in front of `ThreadLocal::get`, so that the fast
    /// path's lookup is one thread-local load and one compare. Const
    /// initialised with no destructor, so reading it is a plain load.
    static LAST: Cell<(u64, *const Region)> = const { Cell::new((NONE, ptr::null())) };
}

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
        // SAFETY: only `get` and `claim` store into `LAST`, on this thread,
        // a region of the allocator with this id: this one (ids are never
        // reused, and `&self` keeps it and its regions alive). This thread's
        // number (hence its region) stays the same until it exits.
        Some(unsafe { &*region })
    }

    /// The calling thread's region, if it has one, through the
    /// `ThreadLocal`; cached for [`cached`](Self::cached).
    pub(super) fn get(&self) -> Option<&Region> {
        if let Some(region) = self.cached() {
            return Some(region);
        }
        let region = self.all.get()?.0;
        Some(self.remember(region))
    }

    /// The calling thread's region, made on first use and recorded in
    /// `claimed` (which the caller's lock guards). `None` if there is no
    /// memory for a new region.
    pub(super) fn claim(&self, claimed: &mut Claimed) -> Option<&Region> {
        if let Some(region) = self.get() {
            return Some(region);
        }
        // Room first, so that a region is never made without its record:
        // `checkpoint` must see every region, and `free` frees them.
        claimed.0.try_reserve(1).ok()?;
        let fresh = allocate()?;
        // A thread that had no number yet may be given an exited thread's,
        // and find its region: then `fresh` goes unused.
        let region = self.all.get_or(|| Owned(fresh)).0;
        if region == fresh {
            claimed.0.push(fresh);
        } else {
            // SAFETY: `fresh` came from `allocate` and went nowhere else.
            unsafe { release(fresh) };
        }
        Some(self.remember(region))
    }

    /// Caches `region`, this thread's, for [`cached`](Self::cached).
    fn remember(&self, region: NonNull<Region>) -> &Region {
        LAST.set((self.id, region.as_ptr()));
        self.deref(region)
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

    /// Frees every region. The allocator calls this when it drops, after
    /// giving back their memory.
    pub(super) fn free(&mut self, claimed: &mut Claimed) {
        for region in claimed.0.drain(..) {
            // SAFETY: every recorded region came from `allocate`, is freed
            // only here, and `&mut self` means no reference to it is left
            // (the `ThreadLocal` and the thread caches keep only pointers,
            // never used again: the allocator is going away).
            unsafe { release(region) };
        }
    }
}

/// A new region on the heap; `None` if there is no memory for it.
fn allocate() -> Option<NonNull<Region>> {
    let region = Region::try_new()?;
    // `std::alloc` rather than `Box::new`, which aborts when it fails.
    // SAFETY: `Region` is not zero-sized.
    let ptr = NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Region>()) })?.cast::<Region>();
    // SAFETY: fresh memory with `Region`'s layout.
    unsafe { ptr.write(region) };
    Some(ptr)
}

/// Drops and frees a region from [`allocate`].
///
/// # Safety
///
/// `region` came from [`allocate`], is released once, and nothing refers
/// to it afterwards.
unsafe fn release(region: NonNull<Region>) {
    // SAFETY: the caller's contract; `allocate` used `Region`'s layout, as
    // `Box` does.
    drop(unsafe { Box::from_raw(region.as_ptr()) });
}
