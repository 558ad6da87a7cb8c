//! The fast path a context inlines: the state of the two allocators whose
//! requests a [`KernelContext`](super::KernelContext) serves without a call
//! ([`FixedBump`], a `FixedAllocator`'s, and, with `std`, `CachingHeader`,
//! a `CachingAllocator`'s), from `crate::fast_path`, below the context, so
//! that the rest of the context reaches an allocator only through `dyn`.

use core::ptr::NonNull;

#[cfg(feature = "std")]
use crate::fast_path::CachingHeader;
use crate::fast_path::FixedBump;

/// The fast-path state of the allocator behind a context when the context
/// inlines its fast path (its `TempAllocator::fast_path` said which), so
/// that a request makes no call; else both `None`, and requests go through
/// `dyn`. Two options, not an enum: the test of the pointer is the test of
/// the kind, one instruction fewer than a tag's.
#[derive(Clone, Copy)]
pub(super) struct Fast<'a> {
    #[cfg(feature = "std")]
    caching: Option<NonNull<CachingHeader>>,
    fixed: Option<NonNull<FixedBump<'a>>>,
}

impl<'a> Fast<'a> {
    /// Requests through `dyn`.
    pub(super) const OTHER: Self = Fast {
        #[cfg(feature = "std")]
        caching: None,
        fixed: None,
    };

    #[cfg(feature = "std")]
    pub(super) fn caching(caching: NonNull<CachingHeader>) -> Self {
        let mut fast = Self::OTHER;
        fast.caching = Some(caching);
        fast
    }

    pub(super) fn fixed(fixed: NonNull<FixedBump<'a>>) -> Self {
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
            // SAFETY: the header of the allocator behind the context's
            // `temp` (see `from_ref` and `from_ptr`), live, as its regions
            // are, and used by nothing exclusively while a method of the
            // context runs; `align` is 0 or a power of two.
            return unsafe { caching.as_ref().fast(size, align) };
        }
        if let Some(fixed) = self.fixed {
            if !aligns {
                return None;
            }
            // SAFETY: the state of the allocator behind the context's
            // `temp`, as above; `align` is 0 or a power of two.
            return unsafe { fixed.as_ref().fast(size, align) };
        }
        None
    }
}
