//! [`Checkpoint`]: where a [`CachingAllocator`](super::CachingAllocator) can be rewound to.

use super::slot::SLOTS;

/// A position in a [`CachingAllocator`](crate::CachingAllocator)'s window,
/// from [`checkpoint`](crate::CachingAllocator::checkpoint), to be given to
/// [`rewind`](crate::CachingAllocator::rewind). It borrows nothing, so
/// scratch taken before it can still be in use; it is consumed by the rewind.
///
/// ```
/// use tempalloc::{CachingAllocator, KernelContext};
///
/// let mut temp = CachingAllocator::new();
/// let cp = temp.checkpoint();
/// KernelContext::new(&temp).scratch::<u8>(64)?;
/// temp.rewind(cp)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub struct Checkpoint {
    pub(super) allocator: u64,
    pub(super) resets: u64,
    pub(super) marks: [Mark; SLOTS + 1],
    pub(super) dedicated: usize,
    /// Allocations with a canary (debug checks), to check from at rewind.
    pub(super) canaries: usize,
}

/// One slot's position.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    /// Blocks in the slot's chain.
    pub blocks: usize,
    /// Offset in the last of them.
    pub cursor: usize,
    pub requested: usize,
    pub window_start: usize,
    pub retired_used: usize,
}
