//! The one error type every fallible call in the crate returns.

/// Why a scratch request (or another call) could not be served.
///
/// Every variant carries the numbers that explain it, so a log line is enough
/// to see what was asked and what the limit was. Nothing in this crate panics
/// or aborts on bad input: it returns one of these instead, and everything
/// handed out before the failing call stays valid and untouched.
///
/// ```
/// use tempalloc::Error;
///
/// let e = Error::InvalidAlignment { align: 3 };
/// assert_eq!(e.to_string(), "invalid alignment 3: must be a power of two");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The alignment is not a power of two (0, 3, 6, 12, ...).
    #[error("invalid alignment {align}: must be a power of two")]
    InvalidAlignment {
        /// The alignment that was asked for.
        align: usize,
    },
    /// `size` rounded up to `align` does not fit in `isize::MAX` bytes.
    #[error(
        "size overflow: {size} bytes aligned to {align} exceed isize::MAX ({})",
        isize::MAX
    )]
    SizeOverflow {
        /// The size that was asked for, in bytes.
        size: usize,
        /// The alignment that was asked for.
        align: usize,
    },
    /// The system allocator could not provide the memory.
    #[error("out of memory: the system could not provide {size} bytes aligned to {align}")]
    OutOfMemory {
        /// Bytes asked of the system (a whole block for caching allocators).
        size: usize,
        /// Alignment asked of the system.
        align: usize,
    },
    /// Serving the request would take the memory held above a configured limit.
    #[error(
        "budget exceeded: {requested} bytes requested while {held} bytes are held, \
         limit is {limit} bytes"
    )]
    BudgetExceeded {
        /// Bytes the caller asked for (the request's size, not a block's).
        requested: usize,
        /// Bytes held against the limit when the request came.
        held: usize,
        /// The configured limit, in bytes.
        limit: usize,
    },
    /// The kernel context was created without a temp allocator.
    #[error("no temp allocator: this kernel context was created without one")]
    NoTempAllocator,
    /// A reset came after the checkpoint: everything it marked is recycled.
    #[error("stale checkpoint: taken at reset {taken_at}, the allocator is at reset {now}")]
    StaleCheckpoint {
        /// The allocator's reset count when the checkpoint was taken.
        taken_at: u64,
        /// The allocator's reset count now.
        now: u64,
    },
    /// The checkpoint was taken on another allocator.
    #[error("foreign checkpoint: it was taken on another allocator")]
    ForeignCheckpoint,
    /// A rewind to a checkpoint taken before this one already released it:
    /// checkpoints nest, and an outer rewind closes the inner ones.
    #[error(
        "closed checkpoint: checkpoint {depth} (0 = outermost) was released by a rewind \
         to an earlier one; {open} are open"
    )]
    CheckpointClosed {
        /// The checkpoint's nesting depth (0 = taken with none open).
        depth: usize,
        /// Checkpoints open now.
        open: usize,
    },
    /// A frame's allocator handle ([`Frame::allocator`](crate::Frame::allocator))
    /// was asked for memory while a kernel or nested frame ran inside that
    /// frame, whose rewind would recycle it.
    #[error(
        "frame suspended: frame {depth} (1 = outermost) cannot take memory while \
         {open} scopes are open (kernels and frames inside it run)"
    )]
    FrameSuspended {
        /// The frame's nesting depth (1 = outermost).
        depth: usize,
        /// Scopes open then, the frame and the ones inside it included.
        open: usize,
    },
    /// With [`CachingConfig::debug_checks`](crate::CachingConfig::debug_checks)
    /// on: something wrote past the end of a scratch buffer, into the canary
    /// that follows it.
    #[error(
        "canary corrupted: a write past the end of the {size}-byte scratch buffer at {addr:#x} \
         changed byte {byte} after its end"
    )]
    CanaryCorrupted {
        /// The buffer's address.
        addr: usize,
        /// The buffer's size, in bytes.
        size: usize,
        /// The first changed byte, counted from the end of the buffer.
        byte: usize,
    },
}

impl Error {
    /// The system could not provide memory for `layout`.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn out_of_memory(layout: core::alloc::Layout) -> Self {
        Error::OutOfMemory {
            size: layout.size(),
            align: layout.align(),
        }
    }

    /// This error, reported for `layout` as the caller asked for it (the
    /// allocator may have carved more, such as a canary after it).
    #[cfg(feature = "std")]
    pub(crate) fn for_request(self, layout: core::alloc::Layout) -> Self {
        match self {
            Error::BudgetExceeded { held, limit, .. } => Error::BudgetExceeded {
                requested: layout.size(),
                held,
                limit,
            },
            Error::OutOfMemory { .. } | Error::SizeOverflow { .. } => Error::out_of_memory(layout),
            e => e,
        }
    }

    /// The error for `size` bytes at `align` that do not form a valid
    /// [`Layout`](core::alloc::Layout): a bad alignment or an overflow.
    #[inline]
    pub(crate) fn layout(size: usize, align: usize) -> Self {
        if align.is_power_of_two() {
            Error::SizeOverflow { size, align }
        } else {
            Error::InvalidAlignment { align }
        }
    }
}
