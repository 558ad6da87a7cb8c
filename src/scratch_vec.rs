//! Growing collections in scratch: [`ScratchVec`] (a kernel's), [`FrameVec`]
//! (a frame's), and [`ScratchVecExt`], their calls that return an error
//! where `Vec`'s own abort.

use allocator_api2::collections::TryReserveErrorKind;
use allocator_api2::vec::Vec;

use crate::{Error, FrameAllocator, KernelContext};

/// A `Vec` whose buffer is scratch from a kernel's context
/// (`allocator_api2::vec::Vec<T, &KernelContext>`), aligned to
/// `align_of::<T>()`. While its buffer is the newest block of the thread's
/// window, it grows in place (with `CachingAllocator` and
/// `FixedAllocator`; `BumpAllocator` moves it down into the room below it
/// while its chunk has that room; see
/// [`TempAllocator::grow`](crate::TempAllocator::grow)), so it holds its
/// capacity, not every capacity it doubled through; once other scratch follows it, growing copies
/// and leaves the old buffer in scratch until the reset: reserve the final
/// length up front when you know it.
///
/// Like every `Vec`, `push`, `extend` and `reserve` **abort the process**
/// when memory cannot be had. Where the budget may run out, use
/// [`try_push`](ScratchVecExt::try_push),
/// [`try_extend_from_slice`](ScratchVecExt::try_extend_from_slice) or
/// `try_reserve`: they return the error the context recorded.
///
/// ```
/// use tempalloc::{with_context, BumpAllocator, Error, KernelContext, ScratchVec, ScratchVecExt};
///
/// fn collect(ctx: &KernelContext, n: usize) -> Result<usize, Error> {
///     let mut v = ScratchVec::new_in(ctx);
///     for i in 0..n {
///         v.try_push(i as u32)?;
///     }
///     Ok(v.len())
/// }
///
/// let mut temp = BumpAllocator::with_limit(64 * 1024);
/// assert_eq!(with_context(&mut temp, |ctx| collect(ctx, 100))?, 100);
/// let err = with_context(&mut temp, |ctx| collect(ctx, 1 << 20)).unwrap_err();
/// assert!(matches!(err, Error::BudgetExceeded { .. }));
/// # Ok::<(), Error>(())
/// ```
pub type ScratchVec<'c, T> = Vec<T, &'c KernelContext<'c>>;

/// A `Vec` whose buffer lives for a [`Frame`](crate::Frame) and grows
/// between its kernels (`allocator_api2::vec::Vec<T, FrameAllocator>`): see
/// [`Frame::allocator`](crate::Frame::allocator). `push` aborts when memory
/// cannot be had, as every `Vec`'s does;
/// [`try_push`](ScratchVecExt::try_push) returns the error instead.
///
/// ```
/// use tempalloc::{CachingAllocator, Error, FrameVec, ScratchVecExt};
///
/// let mut temp = CachingAllocator::new();
/// let n = temp.frame(|inf| {
///     let mut v = FrameVec::new_in(inf.allocator());
///     v.try_extend_from_slice(&[1.0f32, 2.0])?;
///     inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch_copy(&v)?.len()))
/// })?;
/// assert_eq!(n, 2);
/// # Ok::<(), Error>(())
/// ```
pub type FrameVec<'f, T> = Vec<T, FrameAllocator<'f>>;

pub(crate) mod sealed {
    /// An allocator that records why it refused a request: a kernel's
    /// context or a frame's allocator handle.
    pub trait Recorded: allocator_api2::alloc::Allocator {
        /// Why the last request was refused, if it was kept.
        fn recorded(&self) -> Option<crate::Error>;
    }
}

impl sealed::Recorded for &KernelContext<'_> {
    #[inline]
    fn recorded(&self) -> Option<Error> {
        self.noted()
    }
}

impl sealed::Recorded for FrameAllocator<'_> {
    #[inline]
    fn recorded(&self) -> Option<Error> {
        self.noted()
    }
}

/// The growing calls of a [`ScratchVec`] or [`FrameVec`] that return an
/// [`Error`] (the one the context or frame recorded, with its numbers)
/// where `push` and `extend_from_slice` abort the process.
///
/// ```
/// use tempalloc::{Error, FixedAllocator, KernelContext, ScratchVec, ScratchVecExt};
/// # use core::mem::MaybeUninit;
///
/// let mut buf = [MaybeUninit::uninit(); 64];
/// let temp = FixedAllocator::new(&mut buf);
/// let ctx = KernelContext::new(&temp);
/// let mut v = ScratchVec::new_in(&ctx);
/// v.try_extend_from_slice(&[1u64, 2, 3])?;
/// let e = v.try_extend_from_slice(&[0; 64]).unwrap_err();
/// assert!(matches!(e, Error::BudgetExceeded { requested: 536, limit: 64, .. }), "{e}");
/// assert_eq!(v, [1, 2, 3]); // untouched
/// # Ok::<(), Error>(())
/// ```
pub trait ScratchVecExt<T> {
    /// Appends `value`, or returns why there is no room and leaves the
    /// vector as it was.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator, ScratchVec, ScratchVecExt};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let mut v = ScratchVec::new_in(&ctx);
    /// v.try_push(7u8)?;
    /// assert_eq!(v, [7]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What the allocator refused with, as recorded
    /// ([`Error::BudgetExceeded`], [`Error::OutOfMemory`], or
    /// [`Error::FrameSuspended`] for a frame's vector grown inside a
    /// kernel), or [`Error::SizeOverflow`] when the new capacity passes
    /// `isize::MAX` bytes.
    fn try_push(&mut self, value: T) -> Result<(), Error>;

    /// Appends a copy of `src`, or returns why there is no room and leaves
    /// the vector as it was.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator, ScratchVec, ScratchVecExt};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let mut v = ScratchVec::new_in(&ctx);
    /// v.try_extend_from_slice(&[1.5f32, 2.5])?;
    /// assert_eq!(v, [1.5, 2.5]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_push`](Self::try_push).
    fn try_extend_from_slice(&mut self, src: &[T]) -> Result<(), Error>
    where
        T: Clone;
}

impl<T, A: sealed::Recorded> ScratchVecExt<T> for Vec<T, A> {
    #[inline]
    fn try_push(&mut self, value: T) -> Result<(), Error> {
        if self.len() == self.capacity() {
            grow(self, 1)?;
        }
        self.push(value); // within capacity: no allocation
        Ok(())
    }

    #[inline]
    fn try_extend_from_slice(&mut self, src: &[T]) -> Result<(), Error>
    where
        T: Clone,
    {
        grow(self, src.len())?;
        self.extend_from_slice(src); // within capacity: no allocation
        Ok(())
    }
}

/// Makes room for `additional` more elements, or says why there is none.
#[cold]
#[inline(never)]
fn grow<T, A: sealed::Recorded>(v: &mut Vec<T, A>, additional: usize) -> Result<(), Error> {
    v.try_reserve(additional).map_err(|e| match e.kind() {
        // The allocator was asked and recorded why it refused.
        TryReserveErrorKind::AllocError { layout, .. } => {
            v.allocator().recorded().unwrap_or(Error::OutOfMemory {
                size: layout.size(),
                align: layout.align(),
            })
        }
        // The capacity never reached the allocator.
        TryReserveErrorKind::CapacityOverflow => Error::SizeOverflow {
            size: v
                .len()
                .saturating_add(additional)
                .saturating_mul(size_of::<T>()),
            align: align_of::<T>(),
        },
    })
}
