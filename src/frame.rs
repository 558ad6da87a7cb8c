//! Frames: inference and kernel scopes over checkpoints, without `unsafe` in
//! user code.
//!
//! A [`Frame`] is a scope of an allocator that implements [`Rewind`]. Scratch
//! taken from the frame lives until the frame ends, not until the end of a
//! borrow of the frame, so it can be used while the frame runs kernels
//! ([`Frame::kernel`]) and nested frames ([`Frame::frame`]), each of which is
//! rewound when it returns.

use core::alloc::Layout;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use bytemuck::Zeroable;

use crate::{Error, KernelContext, TempAllocator};

/// An allocator that can go back to an earlier point of its window, which is
/// what [`Frame`]s are built on.
///
/// [`CachingAllocator`](crate::CachingAllocator),
/// [`FixedAllocator`](crate::FixedAllocator),
/// [`MallocAllocator`](crate::MallocAllocator) and
/// [`BumpAllocator`](crate::BumpAllocator) (whose rewind recycles nothing
/// until the reset) implement it;
/// [`frame`](Rewind::frame) is the safe way to use it.
///
/// ```
/// use tempalloc::{KernelContext, MallocAllocator, Rewind, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// let cp = temp.checkpoint()?;
/// KernelContext::new(&temp).scratch::<u8>(64)?;
/// temp.rewind(cp)?;
/// assert_eq!(temp.stats().bytes_live, 0);
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// # Safety
///
/// Frames hand out memory that outlives the borrow it came from and call
/// `rewind` through `&mut Self` while that memory is in use, so an
/// implementation must guarantee that:
///
/// - `rewind(cp)` recycles only memory handed out after `checkpoint` returned
///   `cp`; everything handed out before stays valid, untouched, until a
///   rewind to an earlier checkpoint, a reset or the drop;
/// - a rewind that returns an error recycles nothing;
/// - memory it hands out is not inside the allocator value itself, so that
///   creating the `&mut Self` for a rewind does not invalidate it.
pub unsafe trait Rewind: TempAllocator + Sized {
    /// A position in the allocator's window, consumed by
    /// [`rewind`](Rewind::rewind).
    type Checkpoint;

    /// Where the allocator is now.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Rewind};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let cp = Rewind::checkpoint(&temp)?;
    /// Rewind::rewind(&mut temp, cp)?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when the allocator's books of open checkpoints
    /// must grow and the system has no memory for them (a
    /// `CachingAllocator` past 8 nested checkpoints, say); nothing changes
    /// then. [`FixedAllocator`](crate::FixedAllocator),
    /// [`MallocAllocator`](crate::MallocAllocator) and
    /// [`BumpAllocator`](crate::BumpAllocator) keep no books: always `Ok`.
    fn checkpoint(&self) -> Result<Self::Checkpoint, Error>;

    /// Recycles everything handed out since `checkpoint` was taken.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator, Rewind, TempAllocator};
    ///
    /// let mut temp = MallocAllocator::new();
    /// let cp = temp.checkpoint()?;
    /// KernelContext::new(&temp).scratch::<u8>(64)?;
    /// temp.rewind(cp)?;
    /// assert_eq!(temp.stats().system_frees, 1);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When the checkpoint no longer describes the allocator, an error that
    /// says why, and nothing changes: [`Error::StaleCheckpoint`] when a
    /// reset came after it or a rewind went before it;
    /// [`Error::ForeignCheckpoint`] when it belongs to another allocator;
    /// [`Error::CheckpointClosed`] when a rewind to an earlier one closed it
    /// (`CachingAllocator`; the others say `StaleCheckpoint`, or accept it
    /// where a rewind recycles nothing, as `BumpAllocator`'s).
    fn rewind(&mut self, checkpoint: Self::Checkpoint) -> Result<(), Error>;

    /// Runs `f` with a [`Frame`] of this allocator, then resets the
    /// allocator (nothing else can be live: the frame borrows it
    /// exclusively), also when `f` panics. See [`Frame`].
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, Rewind, TempAllocator};
    ///
    /// let mut temp = MallocAllocator::new();
    /// let n = temp.frame(|inf| Ok(inf.scratch::<u8>(10)?.len()))?;
    /// assert_eq!((n, temp.stats().bytes_live), (10, 0));
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What `f` returns.
    fn frame<R>(
        &mut self,
        f: impl for<'f> FnOnce(&mut Frame<'f, Self>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        run_frame(self, f)
    }
}

/// The top-level frame: runs `f`, then resets `temp` (on unwind too).
pub(crate) fn run_frame<A: Rewind, R>(
    temp: &mut A,
    f: impl for<'f> FnOnce(&mut Frame<'f, A>) -> Result<R, Error>,
) -> Result<R, Error> {
    /// Resets when dropped, so a panic in `f` recycles the frame too.
    struct ResetOnDrop<A: TempAllocator>(NonNull<A>);
    impl<A: TempAllocator> Drop for ResetOnDrop<A> {
        fn drop(&mut self) {
            // SAFETY: the pointer comes from the `&mut A` that `run_frame`
            // holds for its whole call, and no reference made from it is
            // alive: the frame is gone (it is dropped before this guard), and
            // its scratch, borrowed for a lifetime local to `f`, cannot be
            // used any more (not even through a panic payload, which is
            // `'static`).
            unsafe { self.0.as_mut() }.reset();
        }
    }
    let guard = ResetOnDrop(NonNull::from(temp));
    let mut frame = Frame::new(guard.0);
    f(&mut frame)
}

/// The allocator a [`Frame`] is of when its type names none.
#[cfg(feature = "std")]
type DefaultTemp = crate::CachingAllocator;
/// Without `std`, the one allocator there is: a static buffer's.
#[cfg(not(feature = "std"))]
type DefaultTemp = crate::FixedAllocator<'static>;

/// A scope of a [`Rewind`] allocator (for [`CachingAllocator`](crate::CachingAllocator) by default):
/// one inference, or a part of it.
///
/// Memory from [`scratch`](Frame::scratch) and the other scratch methods
/// lives for the frame's lifetime `'f` and is not tied to a borrow of the
/// frame, so it stays usable while the frame runs kernels. Each
/// [`kernel`](Frame::kernel) gets a [`KernelContext`] whose scratch is
/// recycled when the kernel returns; each nested [`frame`](Frame::frame) is
/// rewound when it returns. Both need `&mut Frame`, so no frame scratch is
/// taken while they run; the scratch they take cannot escape them.
///
/// Kernel scratch cannot escape its kernel:
///
/// ```compile_fail,E0521
/// use tempalloc::CachingAllocator;
///
/// let mut temp = CachingAllocator::new();
/// temp.frame(|inf| {
///     let mut kept: &mut [f32] = &mut [];
///     inf.kernel(|ctx| {
///         kept = ctx.scratch::<f32>(16)?; // error: borrowed data escapes the closure
///         Ok(())
///     })?;
///     kept[0] = 1.0;
///     Ok(())
/// })?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// Nor can a kernel take frame scratch, which its rewind would recycle:
///
/// ```compile_fail,E0502
/// use tempalloc::CachingAllocator;
///
/// let mut temp = CachingAllocator::new();
/// temp.frame(|inf| {
///     inf.kernel(|_ctx| {
///         let _act = inf.scratch::<u8>(4)?; // error: `*inf` is borrowed by `kernel`
///         Ok(())
///     })
/// })?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// Nor can frame scratch escape its frame:
///
/// ```compile_fail
/// use tempalloc::CachingAllocator;
///
/// let mut temp = CachingAllocator::new();
/// let act = temp.frame(|inf| inf.scratch::<f32>(16))?; // error: lifetime may not live long enough
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// Frames nest; a kernel may call another kernel through its context:
///
/// ```
/// use tempalloc::{CachingAllocator, Error, KernelContext};
///
/// fn inner(ctx: &KernelContext) -> Result<usize, Error> {
///     Ok(ctx.scratch::<u8>(100)?.len())
/// }
/// fn outer(ctx: &KernelContext) -> Result<usize, Error> {
///     Ok(ctx.scratch::<u8>(10)?.len() + inner(ctx)?)
/// }
///
/// let mut temp = CachingAllocator::new();
/// let n = temp.frame(|inf| {
///     let weights = inf.scratch::<f32>(64)?;
///     let n = inf.frame(|layer| {
///         let kv = layer.scratch::<f32>(32)?;
///         layer.kernel(|ctx| Ok(outer(ctx)? + kv.len() + weights.len()))
///     })?;
///     Ok(n)
/// })?;
/// assert_eq!(n, 110 + 32 + 64);
/// # Ok::<(), Error>(())
/// ```
pub struct Frame<'f, A: Rewind = DefaultTemp> {
    /// The allocator, from the `&mut A` the outermost frame holds for `'f`.
    /// Only shared references are made from it while scratch is handed out,
    /// and a `&mut` only to rewind, once no reference made from it is alive.
    temp: NonNull<A>,
    /// Invariant in `'f`: a frame must not pass for a longer-lived one.
    _life: PhantomData<fn(&'f ()) -> &'f ()>,
    /// The frame uses `A` exclusively for `'f` (and so `A: 'f`).
    _temp: PhantomData<&'f mut A>,
}

impl<'f, A: Rewind> Frame<'f, A> {
    fn new(temp: NonNull<A>) -> Self {
        Frame {
            temp,
            _life: PhantomData,
            _temp: PhantomData,
        }
    }

    /// A context over the allocator for `'f`, used for one request at a
    /// time; it never reaches user code, which could hold it into a kernel.
    #[inline]
    fn ctx(&self) -> KernelContext<'f> {
        // SAFETY: `temp` is valid for `'f` (it comes from a `&mut A` held by
        // the outermost frame for all of `'f`). The shared reference lives
        // only while one request is served; the only `&mut` made from `temp`
        // is in `scoped`, which needs `&mut self` and so cannot overlap a
        // call of this `&self` method.
        KernelContext::new(unsafe { self.temp.as_ref() })
    }

    /// Runs `f` with a nested scope and rewinds to where this frame was
    /// when it returns (or panics).
    fn scoped<R>(&mut self, f: impl FnOnce(NonNull<A>) -> Result<R, Error>) -> Result<R, Error> {
        /// Rewinds when dropped, so a panic in `f` does too.
        struct RewindOnDrop<A: Rewind>(NonNull<A>, Option<A::Checkpoint>);
        impl<A: Rewind> RewindOnDrop<A> {
            fn rewind(&mut self) -> Result<(), Error> {
                match self.1.take() {
                    // SAFETY: `scoped` holds `&mut Frame` for the whole
                    // scope, so no frame scratch was taken in it, and what
                    // the scope took was borrowed for a lifetime local to
                    // `f` (higher-ranked), now over: no reference made from
                    // the pointer is alive. The checkpoint was taken before
                    // the scope, so `Rewind`'s contract keeps everything
                    // older (the frames' scratch) intact.
                    Some(cp) => unsafe { self.0.as_mut() }.rewind(cp),
                    None => Ok(()),
                }
            }
        }
        impl<A: Rewind> Drop for RewindOnDrop<A> {
            fn drop(&mut self) {
                // Only reached on unwind. A failed rewind recycles nothing,
                // which is safe: the memory waits for the outer frame's reset.
                let _ = self.rewind();
            }
        }
        // SAFETY: as in `ctx`: a shared reference for one call.
        let cp = unsafe { self.temp.as_ref() }.checkpoint()?;
        let mut guard = RewindOnDrop(self.temp, Some(cp));
        let result = f(self.temp);
        let rewound = guard.rewind();
        result.and_then(|r| rewound.map(|()| r))
    }

    /// Runs a kernel: `f` gets a [`KernelContext`] whose scratch is recycled
    /// (the frame is rewound) when `f` returns, also when it panics. The
    /// result is `f`'s, except that a failure the kernel recorded with
    /// [`KernelContext::fail`] wins over an `Ok`. The kernel may share the
    /// context with worker threads (scoped threads, a rayon pool).
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error, KernelContext};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let r = temp.frame(|inf| {
    ///     inf.kernel(|ctx| {
    ///         // A kernel (or a worker of it) that reports through the context.
    ///         if let Err(e) = ctx.allocate_temp(8, 3) {
    ///             ctx.fail(e);
    ///         }
    ///         Ok(())
    ///     })
    /// });
    /// assert_eq!(r, Err(Error::InvalidAlignment { align: 3 }));
    /// ```
    ///
    /// # Errors
    ///
    /// The kernel's recorded failure, else what `f` returns, else a failed
    /// rewind.
    pub fn kernel<R>(
        &mut self,
        f: impl FnOnce(&KernelContext<'_>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.scoped(|temp| {
            // SAFETY: as in `ctx`; the context and every reference made from
            // it are gone when this closure returns, before `scoped` rewinds.
            let ctx = KernelContext::new(unsafe { temp.as_ref() });
            ctx.finish(f(&ctx))
        })
    }

    /// Runs `f` with a nested frame, rewound when `f` returns (or panics):
    /// a layer, say, whose scratch outlives its kernels but not the layer.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| {
    ///     for _layer in 0..4 {
    ///         inf.frame(|layer| {
    ///             let kv = layer.scratch::<f32>(256)?;
    ///             layer.kernel(|ctx| Ok(ctx.scratch_copy(kv)?[0]))
    ///         })?;
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What `f` returns, else a failed rewind.
    pub fn frame<R>(
        &mut self,
        f: impl for<'g> FnOnce(&mut Frame<'g, A>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.scoped(|temp| f(&mut Frame::new(temp)))
    }

    /// As [`KernelContext::allocate`], for the frame's lifetime.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert!(inf.allocate(Layout::new::<[u64; 8]>())?.len() >= 64)))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::allocate`].
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        self.ctx().allocate(layout)
    }

    /// As [`KernelContext::allocate_temp`] (aligned to `align`), for the
    /// frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.allocate_temp(100, 4096)?.as_ptr() as usize % 4096, 0)))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::allocate_temp`].
    #[inline]
    pub fn allocate_temp(
        &self,
        size: usize,
        align: usize,
    ) -> Result<&'f mut [MaybeUninit<u8>], Error> {
        self.ctx().allocate_temp(size, align)
    }

    /// As [`KernelContext::scratch`] (zeroed, aligned to `align_of::<T>()`),
    /// for the frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.scratch::<u32>(3)?, &[0, 0, 0])))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::scratch`].
    #[inline]
    pub fn scratch<T: Zeroable>(&self, len: usize) -> Result<&'f mut [T], Error> {
        self.ctx().scratch(len)
    }

    /// As [`KernelContext::scratch_uninit`] (aligned to `align_of::<T>()`),
    /// for the frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.scratch_uninit::<u64>(5)?.len(), 5)))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::scratch_uninit`].
    #[inline]
    pub fn scratch_uninit<T>(&self, len: usize) -> Result<&'f mut [MaybeUninit<T>], Error> {
        self.ctx().scratch_uninit(len)
    }

    /// As [`KernelContext::scratch_aligned`] (zeroed, aligned to the larger
    /// of `align` and `align_of::<T>()`), for the frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.scratch_aligned::<f32>(16, 64)?.as_ptr() as usize % 64, 0)))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::scratch_aligned`].
    #[inline]
    pub fn scratch_aligned<T: Zeroable>(
        &self,
        len: usize,
        align: usize,
    ) -> Result<&'f mut [T], Error> {
        self.ctx().scratch_aligned(len, align)
    }

    /// As [`KernelContext::scratch_copy`] (aligned to `align_of::<T>()`),
    /// for the frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.scratch_copy(&[1, 2, 3])?, &[1, 2, 3])))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::scratch_copy`].
    #[inline]
    pub fn scratch_copy<T: Copy>(&self, src: &[T]) -> Result<&'f mut [T], Error> {
        self.ctx().scratch_copy(src)
    }

    /// As [`KernelContext::scratch_fill`] (aligned to `align_of::<T>()`),
    /// for the frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.scratch_fill(2, 7u8)?, &[7, 7])))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::scratch_fill`].
    #[inline]
    pub fn scratch_fill<T: Copy>(&self, len: usize, value: T) -> Result<&'f mut [T], Error> {
        self.ctx().scratch_fill(len, value)
    }

    /// As [`KernelContext::scratch_with`] (aligned to `align_of::<T>()`),
    /// for the frame's lifetime.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| Ok(assert_eq!(inf.scratch_with(3, |i| i * 2)?, &[0, 2, 4])))?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`KernelContext::scratch_with`].
    #[inline]
    pub fn scratch_with<T: Copy>(
        &self,
        len: usize,
        f: impl FnMut(usize) -> T,
    ) -> Result<&'f mut [T], Error> {
        self.ctx().scratch_with(len, f)
    }

    /// The allocator's counters now.
    ///
    /// ```
    /// use tempalloc::CachingAllocator;
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| {
    ///     inf.scratch::<u8>(100)?;
    ///     assert_eq!(inf.stats().bytes_requested, 100);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn stats(&self) -> crate::Stats {
        // SAFETY: as in `ctx`: a shared reference for one call.
        unsafe { self.temp.as_ref() }.stats()
    }
}

impl<A: Rewind> core::fmt::Debug for Frame<'_, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Frame")
            .field("stats", &self.stats())
            .finish()
    }
}
