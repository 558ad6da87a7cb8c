//! [`Chunk`]: the memory behind one region: a reservation that commits pages
//! as it grows, or (where reservations are not to be had) a heap block.

use core::ptr::NonNull;

use super::block::Block;
use crate::os::Mapping;

/// Memory a region bumps through. The first [`usable`](Chunk::usable) bytes
/// from [`base`](Chunk::base) are readable and writable.
#[derive(Debug)]
pub(crate) enum Chunk {
    /// Reserved address space, committed page by page: grows in place.
    Mapped(Mapping),
    /// A fixed-size heap block: the fallback where nothing can be reserved.
    Heap(Block),
}

impl Chunk {
    /// The first byte. Pointers into the chunk derive from this one.
    #[inline]
    pub(crate) fn base(&self) -> NonNull<u8> {
        match self {
            Chunk::Mapped(m) => m.base(),
            Chunk::Heap(b) => b.ptr(),
        }
    }

    /// Bytes usable now: committed, or the whole block. This is also what the
    /// chunk holds of the system's memory, and what budgets count.
    #[inline]
    pub(crate) fn usable(&self) -> usize {
        match self {
            Chunk::Mapped(m) => m.committed(),
            Chunk::Heap(b) => b.size(),
        }
    }

    /// The most bytes the chunk can ever make usable without moving.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Chunk::Mapped(m) => m.reserved(),
            Chunk::Heap(b) => b.size(),
        }
    }

    /// Whether the chunk can serve `bytes` from its start without moving (a
    /// reservation, by committing) and, a heap block, is no larger than
    /// `most`: the one rule for which chunk a region keeps or takes.
    pub(crate) fn holds(&self, bytes: usize, most: usize) -> bool {
        match self {
            Chunk::Mapped(m) => m.reserved() >= bytes,
            Chunk::Heap(b) => (bytes..=most).contains(&b.size()),
        }
    }
}
