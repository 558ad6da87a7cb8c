//! The [`TempAllocator`] trait: the one interface kernels and runtimes share.

use core::alloc::Layout;
use core::ptr::NonNull;

use crate::{Error, Stats};

/// A source of scratch memory that is recycled all at once.
///
/// Kernels ask through `&self` (usually via a
/// [`KernelContext`](crate::KernelContext)); the runtime calls
/// [`reset`](TempAllocator::reset) through `&mut self` when the kernel or the
/// inference ends. Because every buffer borrows the allocator shared and
/// `reset` needs it exclusively, a buffer cannot be used after the reset that
/// recycles it: the borrow checker rejects the program.
///
/// The trait is object-safe, so kernels take `&dyn TempAllocator` and are not
/// generic over the allocator.
///
/// **Frames need more than the trait.** `Box<dyn TempAllocator>` has no
/// `frame` method (error E0599: frames are [`Rewind`](crate::Rewind)'s,
/// which is not object-safe, as its checkpoints are each allocator's own
/// type). A runtime that picks its allocator at run time holds an
/// [`AnyTemp`](crate::AnyTemp) instead: one of the crate's allocators, or
/// its own through [`AnyTemp::custom`](crate::AnyTemp::custom), with
/// frames, `trim` and `release`.
///
/// `Sync` is a supertrait: the worker threads of one kernel share its
/// [`KernelContext`](crate::KernelContext), so every allocator must serve
/// requests from several threads at once. `CachingAllocator` does so without
/// a lock; [`MallocAllocator`](crate::MallocAllocator) and
/// [`BumpAllocator`](crate::BumpAllocator) take a lock per request.
///
/// # Safety
///
/// Implementing the trait is `unsafe` because [`KernelContext`](crate::KernelContext)
/// turns what [`allocate`](TempAllocator::allocate) returns into `&mut`
/// slices. An implementation must guarantee that what it returns is aligned to
/// `layout.align()`, at least `layout.size()` bytes long, disjoint from every
/// other live allocation and valid until the next `reset` (or drop). A
/// zero-sized request may return a dangling, aligned pointer. Bad input and
/// exhausted memory are an [`Error`], never a panic or an abort.
///
/// ```
/// use std::alloc::Layout;
/// use tempalloc::{MallocAllocator, TempAllocator};
///
/// fn use_any(temp: &mut dyn TempAllocator) -> Result<(), tempalloc::Error> {
///     let p = temp.allocate(Layout::from_size_align(256, 64).unwrap())?;
///     assert_eq!(p.cast::<u8>().as_ptr() as usize % 64, 0);
///     assert!(p.len() >= 256);
///     temp.reset();
///     Ok(())
/// }
/// use_any(&mut MallocAllocator::new())?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
pub unsafe trait TempAllocator: Sync {
    /// Hands out `layout.size()` bytes aligned to `layout.align()`, valid
    /// until the next [`reset`](TempAllocator::reset).
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use tempalloc::{BumpAllocator, TempAllocator};
    ///
    /// let temp = BumpAllocator::new();
    /// let p = temp.allocate(Layout::from_size_align(4096, 4096).unwrap())?;
    /// assert_eq!(p.cast::<u8>().as_ptr() as usize % 4096, 0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when the system has no memory, and
    /// [`Error::BudgetExceeded`] when a configured limit would be passed.
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error>;

    /// Recycles everything handed out since the last reset.
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, TempAllocator};
    ///
    /// let mut temp = MallocAllocator::new();
    /// temp.allocate(std::alloc::Layout::new::<[f32; 16]>())?;
    /// temp.reset();
    /// assert_eq!(temp.stats().bytes_held, 0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    fn reset(&mut self);

    /// The allocator's counters now.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, TempAllocator};
    ///
    /// assert_eq!(BumpAllocator::new().stats().allocations, 0);
    /// ```
    fn stats(&self) -> Stats;

    /// Makes the allocation at `ptr` (handed out for `old`) `new_size`
    /// bytes long where it is, and says whether it did; its first
    /// `old.size()` bytes stay as they were. It can when the allocation is
    /// the newest of the calling thread's window and the room after it is
    /// there: then a growing collection (a [`ScratchVec`](crate::ScratchVec)
    /// or [`FrameVec`](crate::FrameVec)) holds its capacity, not every
    /// capacity it doubled through. `CachingAllocator` (within its region's reservation) and
    /// `FixedAllocator` grow in place; the default, kept by the others,
    /// says `false`, and the caller then allocates and copies. Never
    /// shrinks (`new_size < old.size()` is `false`).
    ///
    /// Collections grow through [`grow`](Self::grow), which tries this
    /// first. An allocator that can reuse the newest block's room only by
    /// moving it overrides `grow` instead: `BumpAllocator`, whose bumpalo
    /// bumps downwards, says `false` here.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use tempalloc::{CachingAllocator, TempAllocator};
    ///
    /// let temp = CachingAllocator::new();
    /// let old = Layout::from_size_align(64, 8).unwrap();
    /// let p = temp.allocate(old)?.cast::<u8>();
    /// // SAFETY: `p` is the live allocation `temp` handed out for `old`.
    /// assert!(unsafe { temp.resize_in_place(p, old, 4096) });
    /// assert_eq!(temp.stats().bytes_live, 4096);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// `ptr` was handed out by this allocator's [`allocate`](Self::allocate)
    /// for `old` since its last reset (and a rewind since has not recycled
    /// it), and the caller uses those bytes exclusively.
    #[inline]
    unsafe fn resize_in_place(&self, ptr: NonNull<u8>, old: Layout, new_size: usize) -> bool {
        let _ = (ptr, old, new_size);
        false
    }

    /// The allocation at `ptr` (handed out for `old`) made `new.size()`
    /// bytes long and aligned to `new.align()`, its first `old.size()`
    /// bytes kept: where it is if the allocator can, else possibly moved.
    /// `Allocator::grow` of a [`KernelContext`](crate::KernelContext) and
    /// a [`FrameAllocator`](crate::FrameAllocator) calls it, so a
    /// [`ScratchVec`](crate::ScratchVec) or [`FrameVec`](crate::FrameVec)
    /// holds its capacity, not every capacity it doubled through, where the
    /// allocator can.
    ///
    /// The default keeps `ptr` when it is aligned for `new` and
    /// [`resize_in_place`](Self::resize_in_place) extends it
    /// (`CachingAllocator`, `FixedAllocator`), else
    /// [`allocate`](Self::allocate)s `new` and copies `old.size()` bytes
    /// into it. `BumpAllocator` overrides it: the newest block takes the
    /// room below it when its chunk has that room, and its bytes move down.
    /// A wrapper forwards it (and `resize_in_place`) to keep the growth of
    /// the allocator it wraps; one that keeps the default sees every
    /// growth that moves as an `allocate`.
    ///
    /// After a successful call the memory is the returned block's, and
    /// `ptr` must not be used again unless it is the returned pointer. On
    /// an error the allocation at `ptr` is untouched and still the
    /// caller's.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use tempalloc::{BumpAllocator, TempAllocator};
    ///
    /// let temp = BumpAllocator::new();
    /// let old = Layout::from_size_align(64, 8).unwrap();
    /// let p = temp.allocate(old)?.cast::<u8>();
    /// // SAFETY: `p` is `temp`'s live allocation for `old`: 64 bytes.
    /// unsafe { p.as_ptr().write_bytes(7, 64) };
    /// let new = Layout::from_size_align(256, 8).unwrap();
    /// // SAFETY: `p` is `temp`'s live allocation for `old`, given up here,
    /// // and 256 >= 64.
    /// let q = unsafe { temp.grow(p, old, new) }?.cast::<u8>();
    /// // SAFETY: `q` holds 256 bytes, the first 64 kept from `p`.
    /// assert_eq!(unsafe { *q.as_ptr().add(63) }, 7);
    /// // The newest block took the room next to it: 256 bytes live, not 320.
    /// assert_eq!(temp.stats().bytes_live, 256);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`allocate`](Self::allocate) for `new`, when the allocation
    /// cannot stay where it is and no memory can be had for it elsewhere.
    ///
    /// # Safety
    ///
    /// `ptr` was handed out by this allocator's [`allocate`](Self::allocate)
    /// (or a `grow` of it) for `old` since its last reset (and a rewind
    /// since has not recycled it), the caller uses those bytes
    /// exclusively, and `new.size() >= old.size()`.
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, Error> {
        debug_assert!(new.size() >= old.size());
        if ptr.as_ptr().addr() & (new.align() - 1) == 0
            // SAFETY: the caller's contract is `resize_in_place`'s.
            && unsafe { self.resize_in_place(ptr, old, new.size()) }
        {
            return Ok(NonNull::slice_from_raw_parts(ptr, new.size()));
        }
        // SAFETY: the caller's contract is `move_to`'s.
        unsafe { move_to(self, ptr, old, new) }
    }

    /// The allocator whose request a [`KernelContext`](crate::KernelContext)
    /// makes itself, inlined, instead of a call through `dyn`. Only this
    /// crate's allocators (and the pointers it forwards through) answer
    /// anything but [`FastPath::Other`](sealed::FastPath): outside the crate
    /// the return type cannot be named, so the method cannot be overridden.
    #[doc(hidden)]
    #[inline]
    fn fast_path(&self) -> sealed::FastPath<'_> {
        sealed::FastPath::Other
    }
}

/// What only this crate can name.
pub(crate) mod sealed {
    /// An allocator whose fast path a context calls directly (see
    /// [`TempAllocator::fast_path`](super::TempAllocator::fast_path)): the
    /// state of it that the fast path reads, the allocator's first field
    /// (`crate::fast_path`).
    #[derive(Clone, Copy)]
    pub enum FastPath<'s> {
        /// Through `dyn`.
        Other,
        /// A `CachingAllocator`'s header.
        #[cfg(feature = "std")]
        Caching(&'s crate::fast_path::CachingHeader),
        /// A `FixedAllocator`'s buffer and cursor.
        Fixed(&'s crate::fast_path::FixedBump<'s>),
    }
}

/// The allocation at `ptr` copied to a new one for `new` from `temp`: the
/// fallback of [`TempAllocator::grow`].
///
/// # Safety
///
/// `ptr` is a live allocation of `temp` of at least `old.size()` bytes,
/// which the caller uses exclusively, and `new.size() >= old.size()`.
pub(crate) unsafe fn move_to<A: ?Sized + TempAllocator>(
    temp: &A,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
) -> Result<NonNull<[u8]>, Error> {
    let to = temp.allocate(new)?;
    // SAFETY: the old allocation holds `old.size()` bytes, the new one at
    // least `new.size() >= old.size()` (the caller's contract), and they are
    // distinct live allocations of `temp`, so disjoint.
    unsafe { core::ptr::copy_nonoverlapping(ptr.as_ptr(), to.cast::<u8>().as_ptr(), old.size()) };
    Ok(to)
}

/// The trait's methods for a pointer to an allocator: each forwards to it.
macro_rules! forward_to_inner {
    () => {
        #[inline]
        fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
            (**self).allocate(layout)
        }

        #[inline]
        fn reset(&mut self) {
            (**self).reset();
        }

        #[inline]
        fn stats(&self) -> Stats {
            (**self).stats()
        }

        #[inline]
        unsafe fn resize_in_place(&self, ptr: NonNull<u8>, old: Layout, new_size: usize) -> bool {
            // SAFETY: the caller's contract, which is the inner allocator's.
            unsafe { (**self).resize_in_place(ptr, old, new_size) }
        }

        #[inline]
        unsafe fn grow(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, Error> {
            // SAFETY: the caller's contract, which is the inner allocator's.
            unsafe { (**self).grow(ptr, old, new) }
        }

        #[inline]
        fn fast_path(&self) -> sealed::FastPath<'_> {
            (**self).fast_path()
        }
    };
}

/// A boxed allocator, so a runtime can pick one at run time. A boxed
/// allocator has no frames ([`Rewind`](crate::Rewind) is not object-safe);
/// [`AnyTemp`](crate::AnyTemp) picks one of the crate's allocators (or a
/// runtime's own, [`AnyTemp::custom`](crate::AnyTemp::custom)) at run time
/// and keeps them.
///
/// ```
/// use tempalloc::{BumpAllocator, KernelContext, MallocAllocator, TempAllocator};
///
/// let mut temp: Box<dyn TempAllocator + Send> = if cfg!(debug_assertions) {
///     Box::new(MallocAllocator::new())
/// } else {
///     Box::new(BumpAllocator::new())
/// };
/// KernelContext::new(&*temp).scratch::<u8>(16)?;
/// temp.reset();
/// assert_eq!(temp.stats().resets, 1);
/// # Ok::<(), tempalloc::Error>(())
/// ```
// SAFETY: every call is forwarded to `A`, which upholds the contract; the box
// keeps `A` at one address until it is dropped, which needs ownership.
#[cfg(feature = "alloc")]
unsafe impl<A: ?Sized + TempAllocator> TempAllocator for alloc::boxed::Box<A> {
    forward_to_inner!();
}

/// A mutable borrow of an allocator is one, so a helper can take
/// `impl TempAllocator` and still be given `&mut temp`.
///
/// ```
/// use tempalloc::{with_context, MallocAllocator, TempAllocator};
///
/// fn run(mut temp: impl TempAllocator) -> Result<u32, tempalloc::Error> {
///     with_context(&mut temp, |ctx| Ok(ctx.scratch::<u32>(4)?.len() as u32))
/// }
/// let mut temp = MallocAllocator::new();
/// assert_eq!(run(&mut temp)?, 4);
/// assert_eq!(temp.stats().resets, 1);
/// # Ok::<(), tempalloc::Error>(())
/// ```
// SAFETY: every call is forwarded to `A`; a reset of the borrow is a reset of
// `A`, which needs the same exclusive access.
unsafe impl<A: ?Sized + TempAllocator> TempAllocator for &mut A {
    forward_to_inner!();
}

/// The pointer a zero-sized request gets: non-null, aligned, never read.
#[inline]
pub(crate) fn dangling(layout: Layout) -> NonNull<[u8]> {
    // An address equal to the alignment is non-zero and aligned; it carries no
    // provenance, which is right for a zero-length slice.
    let ptr = core::ptr::without_provenance_mut::<u8>(layout.align());
    // SAFETY: `layout.align()` is a power of two, so never zero.
    NonNull::slice_from_raw_parts(unsafe { NonNull::new_unchecked(ptr) }, 0)
}
