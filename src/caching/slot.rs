//! [`Slot`]: one thread's bump region inside a [`CachingAllocator`](super::CachingAllocator),
//! and the thread ids that pick it.

use core::alloc::Layout;
use core::cell::Cell;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::Relaxed};

/// Slots per allocator: threads beyond this many at once share a locked one.
pub(crate) const SLOTS: usize = 16;

/// A thread's current bump region.
///
/// Only the owning thread writes `cursor`, `requested` and `allocations`
/// (and only it or the allocator's lock holder, for the locked fallback
/// slot), and `&mut` methods of the allocator reset them; `stats` reads them
/// from any thread. Relaxed atomic loads and stores — never read-modify-write
/// — compile to plain moves, so the fast path costs what a `Cell` would while
/// concurrent readers stay free of data races.
///
/// Aligned to 128 bytes (two cache lines, as crossbeam's `CachePadded` on
/// x86_64) so that two threads bumping in neighbouring slots never share a
/// line.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Slot {
    /// The id of the thread bumping here, or [`NO_OWNER`].
    pub owner: AtomicUsize,
    /// Start of the current block; dangling when there is none.
    pub base: AtomicPtr<u8>,
    /// Offset of the first free byte in the block.
    pub cursor: AtomicUsize,
    /// Bytes in the block (0 when there is none).
    pub capacity: AtomicUsize,
    /// Bytes requested here since the allocator was made.
    pub requested: AtomicUsize,
    /// Requests served here since the allocator was made.
    pub allocations: AtomicUsize,
}

/// The owner of a slot no thread has claimed: no thread ever has this id.
pub(crate) const NO_OWNER: usize = usize::MAX;

/// What [`raw_thread_id`] reads before the thread's id is assigned. It
/// matches no owner, so such a thread goes to the slow path, which assigns it.
const UNASSIGNED: usize = 0;

impl Slot {
    pub(crate) fn new() -> Self {
        Slot {
            owner: AtomicUsize::new(NO_OWNER),
            base: AtomicPtr::new(ptr::dangling_mut()),
            cursor: AtomicUsize::new(0),
            capacity: AtomicUsize::new(0),
            requested: AtomicUsize::new(0),
            allocations: AtomicUsize::new(0),
        }
    }

    /// Carves `layout` out of the current block, or `None` when it does not
    /// fit. Only the slot's owner (or the lock holder, for the fallback slot)
    /// may call this.
    #[inline(always)]
    pub(crate) fn bump(&self, layout: Layout) -> Option<NonNull<u8>> {
        let base = self.base.load(Relaxed);
        let cursor = self.cursor.load(Relaxed);
        let pad = base.addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
        // No overflow: `cursor <= capacity <= isize::MAX`, `pad < align` and
        // `Layout` guarantees `size + align - 1 <= isize::MAX`, so the sum is
        // below `2 * isize::MAX`.
        let start = cursor + pad;
        let end = start + layout.size();
        if end > self.capacity.load(Relaxed) {
            return None;
        }
        self.cursor.store(end, Relaxed);
        self.requested
            .store(self.requested.load(Relaxed) + layout.size(), Relaxed);
        self.allocations
            .store(self.allocations.load(Relaxed) + 1, Relaxed);
        // `wrapping_add` because an empty slot's `base` is dangling: a
        // zero-sized request may land there. Otherwise `start` is inside the
        // block (`end <= capacity`), where it equals `add`.
        let ptr = base.wrapping_add(start);
        debug_assert!(ptr.addr() % layout.align() == 0);
        // SAFETY: `base` is a block start or `dangling_mut()`, both non-null,
        // and `start <= capacity` keeps the address within the block (or at
        // `pad < align` bytes past the dangling address, still non-zero).
        Some(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// Points the slot at a new (empty) block.
    pub(crate) fn install(&self, base: NonNull<u8>, capacity: usize, cursor: usize) {
        debug_assert!(cursor <= capacity);
        self.base.store(base.as_ptr(), Relaxed);
        self.capacity.store(capacity, Relaxed);
        self.cursor.store(cursor, Relaxed);
    }

    /// Leaves the slot without a block.
    pub(crate) fn clear(&self) {
        self.base.store(ptr::dangling_mut(), Relaxed);
        self.capacity.store(0, Relaxed);
        self.cursor.store(0, Relaxed);
    }
}

thread_local! {
    /// This thread's id, [`UNASSIGNED`] until the slow path assigns it.
    /// Const-initialised with no destructor, so reading it is one TLS load.
    static THREAD_ID: Cell<usize> = const { Cell::new(UNASSIGNED) };
}

/// Ids handed out so far. Never reused while the process lives, so a slot
/// owned by a thread that has exited is never mistaken for another's.
static NEXT_THREAD_ID: AtomicUsize = AtomicUsize::new(UNASSIGNED + 1);

/// The calling thread's id, or [`UNASSIGNED`]: the fast path's version, one
/// load and no branch.
#[inline(always)]
pub(crate) fn raw_thread_id() -> usize {
    THREAD_ID.get()
}

/// The calling thread's id, assigned on first use: never [`UNASSIGNED`] or
/// [`NO_OWNER`].
pub(crate) fn thread_id() -> usize {
    match THREAD_ID.get() {
        UNASSIGNED => assign_thread_id(),
        id => id,
    }
}

#[cold]
#[inline(never)]
fn assign_thread_id() -> usize {
    let id = NEXT_THREAD_ID.fetch_add(1, Relaxed);
    THREAD_ID.set(id);
    id
}
