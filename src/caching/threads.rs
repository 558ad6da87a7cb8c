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

use thread_local::ThreadLocal;

use super::region::Region;

/// Every thread's region in one allocator.
pub(super) struct Regions(ThreadLocal<Region>);

impl Regions {
    pub(super) fn new() -> Self {
        Regions(ThreadLocal::new())
    }

    /// The calling thread's region, if it has one: the fast path's lookup,
    /// a thread-local load and two dependent loads, no lock.
    #[inline(always)]
    pub(super) fn get(&self) -> Option<&Region> {
        self.0.get()
    }

    /// The calling thread's region, made on first use. Only the slow path
    /// calls this, under the allocator's lock.
    pub(super) fn claim(&self) -> &Region {
        self.0.get_or(Region::new)
    }

    /// Every region made so far.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Region> {
        self.0.iter()
    }

    /// Every region made so far, exclusively.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Region> {
        self.0.iter_mut()
    }
}
