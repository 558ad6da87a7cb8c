//! [`FrameAllocator`]: a frame's `allocator_api2` handle, for collections
//! that grow between the frame's kernels.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

use super::FrameState;
use crate::Error;

/// A [`Frame`]'s allocator handle, from [`Frame::allocator`]: an
/// [`allocator_api2`] allocator whose memory lives for the frame, for
/// collections that grow between the frame's kernels. It refuses while a
/// kernel or nested frame runs inside its frame (see
/// [`Frame::allocator`]). Neither `Send` nor `Sync`: the frame's thread
/// grows the collection; kernels may still read and write it from their
/// workers through plain references.
///
/// [`Frame`]: crate::Frame
/// [`Frame::allocator`]: crate::Frame::allocator
#[derive(Clone, Copy)]
pub struct FrameAllocator<'f> {
    pub(super) state: &'f FrameState<'f>,
}

impl FrameAllocator<'_> {
    /// The last request this handle's frame refused through the
    /// `Allocator` trait, with its numbers (what `ScratchVecExt` returns).
    #[cfg(feature = "alloc")]
    #[inline]
    pub(crate) fn noted(&self) -> Option<Error> {
        self.state.ctx.noted()
    }

    /// Refuses (and records why) unless the frame is the innermost scope.
    #[inline]
    fn check(&self) -> Result<(), AllocError> {
        let state = self.state;
        if state.innermost() {
            return Ok(());
        }
        state.ctx.note(Error::FrameSuspended {
            depth: state.depth,
            open: state.open.get(),
        });
        Err(AllocError)
    }
}

// SAFETY: memory comes from the frame's context, so it is the allocator's,
// valid until the frame's rewind or reset, which comes after `'f` (and so
// after every copy of this handle) ends. While a kernel or nested frame runs
// inside the frame, whose rewind recycles what is taken after its
// checkpoint, the handle refuses; so everything it hands out was taken at
// the frame's own level. `deallocate` keeps the memory, which the trait
// allows.
unsafe impl Allocator for FrameAllocator<'_> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.check()?;
        Allocator::allocate(&&self.state.ctx, layout)
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
        // In place too would pass a running kernel's checkpoint.
        self.check()?;
        // SAFETY: `Allocator::grow`'s contract, on memory of the frame's
        // context.
        unsafe { (self.state.ctx).regrow(ptr, old, new) }
    }

    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: `Allocator::shrink`'s contract, on memory of the frame's
        // context; a new block comes through `allocate`, which checks.
        unsafe {
            (self.state.ctx).shrink_with(ptr, old, new, |layout| Allocator::allocate(self, layout))
        }
    }
}

impl core::fmt::Debug for FrameAllocator<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FrameAllocator")
            .field("depth", &self.state.depth)
            .field("open", &self.state.open.get())
            .finish()
    }
}
