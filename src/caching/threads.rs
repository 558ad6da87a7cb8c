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
//!   exited. A region still holds the exited thread's scratch until the
//!   next rewind or reset, though (a worker that returned early from a
//!   kernel whose siblings still run): the new thread then takes an idle
//!   region that no thread number leads to (an *orphan*), or a new one, and
//!   leaves the busy one as an orphan. Stacking on the busy region instead
//!   would make its size depend on which workers overlapped, so every
//!   region would keep growing to the worst case seen, past the peak.
//!   Every region but the resetting thread's is *parked* at a reset:
//!   its owner takes it back with one atomic swap, and until then any thread
//!   that needs a chunk may take its chunk over. So memory grows with the
//!   threads allocating in one window, never with the threads ever seen, and
//!   there is no cap on the thread count.
//! - **Trim.** `trim` and `release` give memory back to the system or the
//!   cache.

use core::alloc::Layout;
use core::cell::Cell;
use core::ptr::{self, NonNull};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use thread_local::ThreadLocal;

use super::Locked;
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

/// The region a thread number leads to, and the thread that uses it.
///
/// Only the thread that holds the number reads or writes its entry, so
/// `Cell`s do; the number's hand-over orders an exited thread's writes
/// before the next holder's reads.
struct Owned {
    region: Cell<NonNull<Region>>,
    /// The [`serial`] of the thread that uses `region`.
    owner: Cell<u64>,
}

// SAFETY: the pointer is to a `Region`, which is `Send` and `Sync`; which
// thread holds a copy of the pointer does not matter.
unsafe impl Send for Owned {}

/// The regions made so far, in the order they were made: walked by
/// `checkpoint`, `reset` and `stats`, and freed by [`Regions::free`]. Kept in
/// the allocator's locked state.
#[derive(Default)]
pub(super) struct Claimed {
    all: Vec<NonNull<Region>>,
    /// Regions no thread number leads to any more: a thread that found its
    /// number's region holding an exited thread's scratch left it here.
    orphans: Vec<NonNull<Region>>,
}

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

    /// This thread's [`serial`], 0 until it needs one.
    static SERIAL: Cell<u64> = const { Cell::new(0) };

    /// Set by [`ExitGuard`] when the thread's thread-local destructors reach
    /// it: from then on the thread has no region.
    static EXITING: Cell<bool> = const { Cell::new(false) };

    /// Registered right after `thread_local`'s own guard (the first
    /// `claim` on a thread registers both), so that where destructors run
    /// in reverse order of registration (as glibc runs them) it runs before
    /// that guard hands the thread's number to the next thread.
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

/// Cuts the thread off its regions when its thread-local destructors run.
/// Another destructor that allocates afterwards would otherwise still bump
/// the thread's region through `LAST`, while a new thread given the same
/// number takes it over: two threads in one region.
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        EXITING.set(true);
        LAST.set((NONE, ptr::null()));
    }
}

/// Whether the calling thread is running its thread-local destructors, past
/// [`ExitGuard`]: it must not use a region.
pub(super) fn exiting() -> bool {
    EXITING.get()
}

/// Numbers that tell threads apart for as long as the process lives (unlike
/// `ThreadLocal`'s thread numbers, which exited threads hand on).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The calling thread's serial: never 0, never another thread's.
fn serial() -> u64 {
    SERIAL.with(|serial| {
        if serial.get() == 0 {
            serial.set(NEXT_SERIAL.fetch_add(1, Relaxed));
        }
        serial.get()
    })
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
        // region changes only in `claim`, on this thread, which stores the
        // new one here.
        Some(unsafe { &*region })
    }

    /// The calling thread's region, if it has one, through the
    /// `ThreadLocal`; cached for [`cached`](Self::cached). `None` also for a
    /// thread that inherited its number from an exited one and has not
    /// [`claim`](Self::claim)ed the region it leads to.
    pub(super) fn get(&self) -> Option<&Region> {
        if let Some(region) = self.cached() {
            return Some(region);
        }
        if exiting() {
            return None;
        }
        let owned = self.all.get()?;
        if owned.owner.get() != serial() {
            return None;
        }
        Some(self.remember(owned.region.get()))
    }

    /// The calling thread's region, made on first use and recorded in
    /// `claimed` (which the caller's lock, `locked`, guards). A thread whose
    /// number leads to an exited thread's region takes it over if it is
    /// idle, and otherwise leaves it as an orphan and takes an idle orphan
    /// or a new region. `None` if there is no memory for a new region, or
    /// if the thread is [`exiting`].
    pub(super) fn claim(&self, claimed: &mut Claimed, locked: &mut Locked) -> Option<&Region> {
        if let Some(region) = self.get() {
            return Some(region);
        }
        if exiting() {
            return None;
        }
        // Room first, so that a region is never made without its record:
        // `checkpoint` must see every region, and `free` frees them.
        claimed.all.try_reserve(1).ok()?;
        claimed.orphans.try_reserve(1).ok()?;
        // A thread's first call gives it a number, maybe an exited thread's:
        // then the entry is there already and `made` stays false.
        let mut made = false;
        let owned = catch_unwind(AssertUnwindSafe(|| {
            self.all.get_or_try(|| {
                made = true;
                let region = self.idle_region(claimed, locked).ok_or(())?;
                Ok::<_, ()>(Owned {
                    region: Cell::new(region),
                    owner: Cell::new(0),
                })
            })
        }));
        let owned = match owned {
            Ok(owned) => owned.ok()?,
            // `thread_local` panics when it must give a number to a thread
            // whose thread-local destructors already ran its own: a
            // destructor registered before `thread_local`'s guard (which
            // another `ThreadLocal` registered first) asks for memory. It
            // panicked before calling ours, so nothing was made, but after
            // taking a number that nothing will hand back (one number lost
            // per such thread). The thread is exiting.
            Err(_) => {
                EXITING.set(true);
                return None;
            }
        };
        let inherited = owned.region.get();
        if !made && !self.deref(inherited).idle(locked) {
            // The exited thread's scratch is live until the next rewind or
            // reset: leave it be.
            owned.region.set(self.idle_region(claimed, locked)?);
            claimed.orphans.push(inherited);
        }
        owned.owner.set(serial());
        // After `get_or_try`, which registered `thread_local`'s guard. An
        // error means the destructors are running already: they ran ours.
        let _ = EXIT_GUARD.try_with(|_| ());
        Some(self.remember(owned.region.get()))
    }

    /// An idle orphan, taken off the list, or else a new region, recorded.
    fn idle_region(&self, claimed: &mut Claimed, locked: &mut Locked) -> Option<NonNull<Region>> {
        let orphans = &mut claimed.orphans;
        if let Some(i) = (0..orphans.len()).find(|&i| self.deref(orphans[i]).idle(locked)) {
            return Some(orphans.swap_remove(i));
        }
        debug_assert!(claimed.all.len() < claimed.all.capacity());
        let fresh = allocate()?;
        claimed.all.push(fresh);
        Some(fresh)
    }

    /// Every region recorded in `claimed` but `mine`.
    pub(super) fn others<'a>(
        &'a self,
        claimed: &'a Claimed,
        mine: &'a Region,
    ) -> impl Iterator<Item = &'a Region> {
        self.iter(claimed).filter(move |r| !ptr::eq(*r, mine))
    }

    /// Caches `region`, this thread's, for [`cached`](Self::cached).
    fn remember(&self, region: NonNull<Region>) -> &Region {
        LAST.set((self.id, region.as_ptr()));
        self.deref(region)
    }

    /// Every region made so far, through the list the allocator keeps.
    pub(super) fn iter<'a>(&'a self, claimed: &'a Claimed) -> impl Iterator<Item = &'a Region> {
        claimed.all.iter().map(|&region| self.deref(region))
    }

    /// The one region made so far, if there is exactly one.
    #[inline]
    pub(super) fn only<'a>(&'a self, claimed: &'a Claimed) -> Option<&'a Region> {
        match *claimed.all.as_slice() {
            [region] => Some(self.deref(region)),
            _ => None,
        }
    }

    /// A region recorded in `Claimed`, borrowed for as long as `self`.
    #[inline]
    fn deref(&self, region: NonNull<Region>) -> &Region {
        // SAFETY: every region pointer this allocator hands out (to
        // `Claimed`, the `ThreadLocal`, `LAST`) came from `allocate` and is
        // recorded in `Claimed`; regions are freed only by `free`, which
        // takes `&mut self`, so the borrow tied to `self` cannot outlive it.
        unsafe { region.as_ref() }
    }

    /// Frees every region. The allocator calls this when it drops, after
    /// giving back their memory.
    pub(super) fn free(&mut self, claimed: &mut Claimed) {
        claimed.orphans.clear();
        for region in claimed.all.drain(..) {
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
