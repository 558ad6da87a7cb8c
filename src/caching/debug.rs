//! Debug checks of a [`CachingAllocator`](super::CachingAllocator): a canary
//! after every allocation, checked at reset, rewind and
//! [`check`](super::CachingAllocator::check), and poison in recycled memory.
//! Every such request takes the slow path and is recorded under the lock.

use core::alloc::Layout;
use core::ptr::NonNull;

use crate::Error;

/// Bytes of canary written right after each allocation.
pub(crate) const CANARY_LEN: usize = 16;

/// The canary: recognisable in a hex dump, and not a run of one byte, so a
/// `memset` or the poison overwriting it shows up too.
pub(crate) const CANARY: [u8; CANARY_LEN] = *b"TEMPALLOC-CANARY";

/// The byte recycled memory is filled with at reset and rewind.
pub(crate) const POISON: u8 = 0xDD;

/// The canaries of the allocations since the last reset, oldest first.
#[derive(Default)]
pub(super) struct DebugState {
    canaries: Vec<Canary>,
}

/// One allocation and its canary, which starts `size` bytes after `ptr`.
struct Canary {
    ptr: NonNull<u8>,
    size: usize,
    /// Already counted in `Stats::canary_violations`.
    reported: bool,
}

// SAFETY: `ptr` points into a chunk the allocator owns (chunks are `Send`);
// it is only dereferenced under the allocator's lock or through `&mut`.
unsafe impl Send for Canary {}

impl Canary {
    /// The first canary byte that changed, if any.
    fn damage(&self) -> Option<usize> {
        // SAFETY: the `CANARY_LEN` bytes after the allocation were carved
        // with it (`DebugState::padded`, `record`) and stay in a chunk this
        // allocator holds until the canary is dropped; no reference to them
        // was ever handed out. An unaligned read of a `[u8; N]` needs nothing
        // more.
        let bytes = unsafe {
            self.ptr
                .add(self.size)
                .cast::<[u8; CANARY_LEN]>()
                .read_unaligned()
        };
        bytes.iter().zip(&CANARY).position(|(a, b)| a != b)
    }

    fn error(&self, byte: usize) -> Error {
        Error::CanaryCorrupted {
            addr: self.ptr.as_ptr().addr(),
            size: self.size,
            byte,
        }
    }
}

impl DebugState {
    /// How many allocations are recorded: a checkpoint's mark.
    pub(super) fn len(&self) -> usize {
        self.canaries.len()
    }

    /// The layout to carve for `layout`: room for the canary after it.
    pub(super) fn padded(layout: Layout) -> Result<Layout, Error> {
        // No overflow: `layout.size() <= isize::MAX`.
        Layout::from_size_align(layout.size() + CANARY_LEN, layout.align())
            .map_err(|_| Error::layout(layout.size(), layout.align()))
    }

    /// Makes room to record one more allocation, before anything is carved.
    pub(super) fn reserve(&mut self, layout: Layout) -> Result<(), Error> {
        self.canaries
            .try_reserve(1)
            .map_err(|_| Error::out_of_memory(layout))
    }

    /// Writes the canary after the `size` bytes at `ptr` (carved with
    /// [`padded`](Self::padded)) and records it. Call [`reserve`](Self::reserve) first.
    pub(super) fn record(&mut self, ptr: NonNull<u8>, size: usize) {
        debug_assert!(self.canaries.len() < self.canaries.capacity());
        self.canaries.push(Canary {
            ptr,
            size,
            reported: false,
        });
        self.resized(self.canaries.len() - 1, size);
    }

    /// The index of the canary after the allocation `[ptr, ptr + size)`, if
    /// it is recorded and intact.
    pub(super) fn intact(&self, ptr: NonNull<u8>, size: usize) -> Option<usize> {
        let i = self.canaries.iter().rposition(|c| c.ptr == ptr)?;
        let canary = &self.canaries[i];
        (canary.size == size && canary.damage().is_none()).then_some(i)
    }

    /// Writes canary `i` at the end of its allocation, now `size` bytes
    /// long: at [`record`](Self::record), and when a resize in place moves
    /// the end (`i` from [`intact`](Self::intact)).
    pub(super) fn resized(&mut self, i: usize, size: usize) {
        let canary = &mut self.canaries[i];
        // SAFETY: the allocation was just carved (`record`) or extended in
        // place (a resize) with room for its canary after `size` bytes,
        // from a block this allocator holds; the canary's bytes were never
        // handed out, and on a resize the caller gave the allocation up.
        unsafe {
            canary
                .ptr
                .add(size)
                .cast::<[u8; CANARY_LEN]>()
                .write_unaligned(CANARY)
        };
        canary.size = size;
    }

    /// Checks every canary. Returns the violations not counted before, and
    /// the first corrupted canary's error.
    pub(super) fn check(&mut self) -> (u64, Option<Error>) {
        let mut new = 0;
        let mut first = None;
        for canary in &mut self.canaries {
            if let Some(byte) = canary.damage() {
                first = first.or(Some(canary.error(byte)));
                new += u64::from(!core::mem::replace(&mut canary.reported, true));
            }
        }
        (new, first)
    }

    /// Checks the canaries of the allocations from the `from`th on, fills
    /// them and their canaries with [`POISON`] and forgets them. Returns the
    /// violations not counted before. Only with `&mut` access to the
    /// allocator: none of that memory may still be in use.
    pub(super) fn recycle(&mut self, from: usize) -> u64 {
        let mut new = 0;
        for canary in self.canaries.drain(from.min(self.canaries.len())..) {
            new += u64::from(!canary.reported && canary.damage().is_some());
            // SAFETY: the allocation and its canary were carved together
            // from a chunk the allocator still holds (recycling happens
            // before any chunk is given back), and the caller's `&mut`
            // access means no scratch slice into them is alive.
            unsafe { canary.ptr.write_bytes(POISON, canary.size + CANARY_LEN) };
        }
        new
    }
}
