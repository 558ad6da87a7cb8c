//! A [`KernelContext`] as an `allocator_api2` allocator, for collections in
//! scratch: the `Allocator` impl, and the grow and shrink a frame's
//! allocator handle shares.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

use super::KernelContext;
use crate::Error;

/// A context is an [`allocator_api2`] allocator, so kernels can build
/// collections in scratch ([`ScratchVec`](crate::ScratchVec), a `hashbrown`
/// map). `deallocate` does nothing: the reset recycles. A refused request
/// keeps its error (budget, alignment, out of memory) in the context before
/// `AllocError` is returned: [`failure`](KernelContext::failure) shows it,
/// and an `Err` the kernel returns takes it, but a kernel that handles the
/// refusal and returns `Ok` stays `Ok`.
///
/// Which calls abort and which return an error, when the budget runs out:
/// the collections' own growing calls (`Vec::push`, `extend`, `reserve`,
/// `hashbrown::HashMap::insert`) call `handle_alloc_error`, which **aborts
/// the process** (and prints only the size it wanted); their `try_`
/// calls (`try_reserve`, `HashMap::try_reserve`) return an error, and
/// [`ScratchVecExt::try_push`](crate::ScratchVecExt::try_push) and
/// [`try_extend_from_slice`](crate::ScratchVecExt::try_extend_from_slice)
/// return the recorded [`Error`]. The abort cannot be intercepted on stable
/// Rust (the `handle_alloc_error` hook is process-wide and unstable), so
/// where the budget may run out, grow through the `try_` calls; the
/// recorded error is then the kernel's result.
///
/// ```
/// use tempalloc::{KernelContext, MallocAllocator, ScratchVec};
///
/// let temp = MallocAllocator::new();
/// let ctx = KernelContext::new(&temp);
/// let mut v = ScratchVec::new_in(&ctx);
/// v.extend(0..1000u32);
/// assert_eq!(v.iter().sum::<u32>(), 499_500);
/// ```
// SAFETY: memory from `allocate` stays valid for `'a`, which outlives every
// `&KernelContext<'a>` (the allocator type here) and so every clone of it;
// `deallocate` keeps it valid too, which the trait allows.
unsafe impl Allocator for &KernelContext<'_> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        KernelContext::allocate(self, layout).map_err(|e| {
            self.note(e);
            AllocError
        })
    }

    #[inline]
    unsafe fn deallocate(&self, _ptr: NonNull<u8>, _layout: Layout) {}

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: `Allocator::grow`'s contract, on memory of this context.
        unsafe { self.regrow(ptr, old, new) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: `Allocator::shrink`'s contract, on memory of this context.
        unsafe { self.shrink_with(ptr, old, new, |layout| Allocator::allocate(self, layout)) }
    }
}

impl KernelContext<'_> {
    /// `Allocator::grow` for every handle over this context: the
    /// allocator's [`TempAllocator::grow`], which keeps the block where it
    /// is when it can (the newest block of the thread's window), else
    /// takes a new one and copies. Without it every doubling of a
    /// `ScratchVec` left the old block behind. A refusal is noted with its
    /// numbers, as a refused `allocate` is; without an allocator it is
    /// [`Error::NoTempAllocator`].
    ///
    /// # Safety
    ///
    /// `Allocator::grow`'s: `ptr` is a live block this context's allocator
    /// handed out for `old`, given up to this call;
    /// `new.size() >= old.size()`.
    #[inline]
    pub(crate) unsafe fn regrow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        let Some(temp) = self.temp() else {
            // No allocator handed out `ptr`: as `allocate` without one.
            self.note(Error::NoTempAllocator);
            return Err(AllocError);
        };
        // SAFETY: the caller's contract is `TempAllocator::grow`'s: the
        // block is the allocator's, for `old`, live, given up to this call
        // (so used by nothing else), and `new.size() >= old.size()`.
        unsafe { temp.grow(ptr, old, new) }.map_err(|e| {
            self.note(e);
            AllocError
        })
    }

    /// `Allocator::shrink` for every handle over this context: the same
    /// block when it is aligned for `new` (its tail waits for the reset, as
    /// any scratch does), else a new one from `alloc` and a copy.
    ///
    /// # Safety
    ///
    /// `Allocator::shrink`'s: `ptr` is a live block this context's allocator
    /// handed out for `old`, given up to this call;
    /// `new.size() <= old.size()`; `alloc` hands out memory of the same
    /// allocator.
    #[inline]
    pub(crate) unsafe fn shrink_with(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        alloc: impl FnOnce(Layout) -> Result<NonNull<[u8]>, AllocError>,
    ) -> Result<NonNull<[u8]>, AllocError> {
        debug_assert!(new.size() <= old.size());
        if ptr.as_ptr().addr() & (new.align() - 1) == 0 {
            return Ok(NonNull::slice_from_raw_parts(ptr, new.size()));
        }
        let to = alloc(new)?;
        // SAFETY: both blocks hold at least `new.size()` bytes, and they are
        // distinct live blocks.
        unsafe {
            core::ptr::copy_nonoverlapping(ptr.as_ptr(), to.cast::<u8>().as_ptr(), new.size())
        };
        Ok(to)
    }
}
