//! The fast path a context inlines: the two allocators whose requests a
//! [`KernelContext`](super::KernelContext) serves without a call
//! ([`FixedAllocator`] and, with `std`, `CachingAllocator`), named here so
//! that the rest of the context reaches an allocator only through `dyn`.

use core::ptr::NonNull;

use crate::FixedAllocator;

/// The allocator behind a context when the context inlines its fast path
/// (its `TempAllocator::fast_path` said which), so that a request makes no
/// call; else both `None`, and requests go through `dyn`. Two options, not
/// an enum: the test of the pointer is the test of the kind, one
/// instruction fewer than a tag's.
#[derive(Clone, Copy)]
pub(super) struct Fast<'a> {
    #[cfg(feature = "std")]
    caching: Option<NonNull<crate::CachingAllocator>>,
    fixed: Option<NonNull<FixedAllocator<'a>>>,
}

impl<'a> Fast<'a> {
    /// Requests through `dyn`.
    pub(super) const OTHER: Self = Fast {
        #[cfg(feature = "std")]
        caching: None,
        fixed: None,
    };

    #[cfg(feature = "std")]
    pub(super) fn caching(caching: NonNull<crate::CachingAllocator>) -> Self {
        let mut fast = Self::OTHER;
        fast.caching = Some(caching);
        fast
    }

    pub(super) fn fixed(fixed: NonNull<FixedAllocator<'a>>) -> Self {
        let mut fast = Self::OTHER;
        fast.fixed = Some(fixed);
        fast
    }

    /// The allocator's fast path for `size` bytes at `align`, where
    /// `aligns` (`align` is 0 or a power of two); `None` where it does not
    /// serve them, or there is none.
    ///
    /// Only while a method of the context that holds `self` runs.
    #[inline(always)]
    pub(super) fn serve(self, size: usize, align: usize, aligns: bool) -> Option<NonNull<[u8]>> {
        #[cfg(feature = "std")]
        if let Some(caching) = self.caching {
            if !aligns {
                return None;
            }
            // SAFETY: the allocator behind the context's `temp` (see
            // `from_ref` and `from_ptr`), live and used by nothing
            // exclusively while a method of the context runs; `align` is 0
            // or a power of two.
            return unsafe { caching.as_ref().fast(size, align) };
        }
        if let Some(fixed) = self.fixed {
            if !aligns {
                return None;
            }
            // SAFETY: as above.
            return unsafe { fixed.as_ref().fast(size, align) };
        }
        None
    }
}
