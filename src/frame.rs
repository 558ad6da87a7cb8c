//! Frames: inference and kernel scopes over checkpoints, without `unsafe` in
//! user code.
//!
//! A [`Frame`] is a scope of an allocator that implements [`Rewind`]. Scratch
//! taken from the frame lives until the frame ends, not until the end of a
//! borrow of the frame, so it can be used while the frame runs kernels
//! ([`Frame::kernel`]) and nested frames ([`Frame::frame`]), each of which is
//! rewound when it returns.
//!
//! A frame's allocator handle for collections, [`FrameAllocator`], is in
//! `allocator.rs`.

use core::cell::Cell;
use core::marker::PhantomData;
use core::ops::Deref;
use core::ptr::NonNull;

use crate::{Error, KernelContext, TempAllocator};

mod allocator;

pub use allocator::FrameAllocator;

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
    /// [`Error::OutOfMemory`] when the allocator's records of open checkpoints
    /// must grow and the system has no memory for them (a
    /// `CachingAllocator` past 8 nested checkpoints, say); nothing changes
    /// then. [`FixedAllocator`](crate::FixedAllocator),
    /// [`MallocAllocator`](crate::MallocAllocator) and
    /// [`BumpAllocator`](crate::BumpAllocator) keep no records: always `Ok`.
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
    /// `f` returns its own error type: anything a [`tempalloc::Error`](Error)
    /// converts into (`E: From<Error>`), such as an engine's error enum.
    /// Where the result goes through `?` into a function returning
    /// `Result<_, tempalloc::Error>`, Rust infers `E = Error`; where nothing
    /// says which (an `unwrap`, an `assert_eq!`), name it once:
    /// `Ok::<_, Error>(..)`.
    ///
    /// A refusal a collection met (a [`FrameVec`](crate::FrameVec) that
    /// could not grow: an `Allocator`-trait request, whose `AllocError` has
    /// no numbers) is the frame's to handle: it neither turns `f`'s `Ok` into
    /// an `Err` nor replaces an `Err` `f` returns (a refusal handled earlier
    /// must not hide it); [`KernelContext::failure`] on the frame has its
    /// numbers.
    ///
    /// ```
    /// use tempalloc::{Error, MallocAllocator, Rewind, TempAllocator};
    ///
    /// let mut temp = MallocAllocator::new();
    /// let n = temp.frame(|inf| Ok::<_, Error>(inf.scratch::<u8>(10)?.len()))?;
    /// assert_eq!((n, temp.stats().bytes_live), (10, 0));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A failure recorded with [`fail`](KernelContext::fail) on the frame,
    /// else what `f` returns.
    fn frame<R, E: From<Error>>(
        &mut self,
        f: impl for<'f> FnOnce(&mut Frame<'f, Self>) -> Result<R, E>,
    ) -> Result<R, E> {
        run_frame(self, f)
    }
}

/// The top-level frame: runs `f`, then resets `temp` (on unwind too).
pub(crate) fn run_frame<A: Rewind, R, E: From<Error>>(
    temp: &mut A,
    f: impl for<'f> FnOnce(&mut Frame<'f, A>) -> Result<R, E>,
) -> Result<R, E> {
    /// Resets when dropped, so a panic in `f` recycles the frame too.
    struct ResetOnDrop<A: TempAllocator>(NonNull<A>);
    impl<A: TempAllocator> Drop for ResetOnDrop<A> {
        fn drop(&mut self) {
            // SAFETY: the pointer comes from the `&mut A` that `run_frame`
            // holds for its whole call, and no reference made from it is
            // alive: the frame and its state are gone (declared after this
            // guard, so dropped before it; the state's context holds a
            // pointer, not a reference), and the scratch, borrowed for a
            // lifetime local to `f`, cannot be used any more (not even
            // through a panic payload, which is `'static`).
            unsafe { self.0.as_mut() }.reset();
        }
    }
    let guard = ResetOnDrop(NonNull::from(temp));
    let open = Cell::new(1);
    // SAFETY: the pointer is valid for this whole call (it comes from the
    // `&mut A` held for it), and is used through `&` only while no `&mut`
    // made from it is alive: the frame makes one only in `scoped`, which
    // holds `&mut Frame`, so no method of this state's context runs then.
    let state = unsafe { FrameState::new(guard.0, 1, &open) };
    let result = f(&mut Frame::new(guard.0, &state));
    state.ctx.finish(result)
}

/// What one frame keeps outside the [`Frame`] value, on the stack of the
/// call that runs it: its context (which [`Frame`] derefs to, and whose
/// failure slot [`fail`](KernelContext::fail) on the frame writes) and its
/// place among the open scopes. Kept outside so that the references to it
/// (the context a user borrows, a [`FrameAllocator`]) stay valid while the
/// frame's closure holds `&mut Frame`.
struct FrameState<'f> {
    ctx: KernelContext<'f>,
    /// The frame's nesting depth: 1 for the outermost.
    depth: usize,
    /// Scopes (frames and kernels) open now under the outermost frame; this
    /// frame is the innermost while it equals `depth`.
    open: &'f Cell<usize>,
}

impl<'f> FrameState<'f> {
    /// # Safety
    ///
    /// Whenever a method of the state's context runs during `'f`, `temp`
    /// points to a live allocator that nothing uses exclusively.
    unsafe fn new<A: Rewind + 'f>(temp: NonNull<A>, depth: usize, open: &'f Cell<usize>) -> Self {
        FrameState {
            // SAFETY: the caller's promise is `from_ptr`'s.
            ctx: unsafe { KernelContext::from_ptr(temp) },
            depth,
            open,
        }
    }

    /// Whether no kernel or nested frame runs inside this frame now.
    #[inline]
    fn innermost(&self) -> bool {
        self.open.get() == self.depth
    }
}

/// A scope of a [`Rewind`] allocator: one inference, or a part of it.
///
/// A frame dereferences to a [`KernelContext`] whose scratch lives for the
/// frame's lifetime `'f`, not for a borrow of the frame: every scratch
/// method ([`scratch`](KernelContext::scratch),
/// [`scratch_aligned`](KernelContext::scratch_aligned),
/// [`scratch_copy`](KernelContext::scratch_copy),
/// [`scratch_fill`](KernelContext::scratch_fill),
/// [`scratch_with`](KernelContext::scratch_with),
/// [`scratch_uninit`](KernelContext::scratch_uninit),
/// [`allocate_temp`](KernelContext::allocate_temp)) works on a frame as on a
/// context, and `&mut Frame` passes where a kernel takes `&KernelContext`.
/// What it hands out stays usable while the frame runs kernels. Each
/// [`kernel`](Frame::kernel) gets a [`KernelContext`] whose scratch is
/// recycled when the kernel returns; each nested [`frame`](Frame::frame) is
/// rewound when it returns. Both need `&mut Frame`, so no frame scratch is
/// taken while they run; the scratch they take cannot escape them.
/// Collections that grow across kernels use [`allocator`](Frame::allocator).
///
/// The allocator type is always named (`Frame<'_, CachingAllocator>`,
/// `Frame<'_, FixedAllocator<'_>>`, or generic `Frame<'_, A>`): it has no
/// default, which would have to change with the `std` feature.
///
/// ```compile_fail,E0107
/// fn layer(inf: &mut tempalloc::Frame<'_>) {} // error: missing generics for `Frame`
/// ```
///
/// Kernel scratch cannot escape its kernel:
///
/// ```compile_fail,E0521
/// use tempalloc::{CachingAllocator, Error};
///
/// let mut temp = CachingAllocator::new();
/// temp.frame(|inf| {
///     let mut kept: &mut [f32] = &mut [];
///     inf.kernel(|ctx| {
///         kept = ctx.scratch::<f32>(16)?; // error: borrowed data escapes the closure
///         Ok::<_, Error>(())
///     })?;
///     kept[0] = 1.0;
///     Ok::<_, Error>(())
/// })?;
/// # Ok::<(), Error>(())
/// ```
///
/// Nor can a kernel take frame scratch, which its rewind would recycle:
///
/// ```compile_fail,E0502
/// use tempalloc::{CachingAllocator, Error};
///
/// let mut temp = CachingAllocator::new();
/// temp.frame(|inf| {
///     inf.kernel(|_ctx| {
///         let _act = inf.scratch::<u8>(4)?; // error: `*inf` is borrowed by `kernel`
///         Ok::<_, Error>(())
///     })
/// })?;
/// # Ok::<(), Error>(())
/// ```
///
/// Nor can frame scratch escape its frame:
///
/// ```compile_fail
/// use tempalloc::{CachingAllocator, Error};
///
/// let mut temp = CachingAllocator::new();
/// let act = temp.frame(|inf| Ok::<_, Error>(inf.scratch::<f32>(16)?))?; // error: lifetime may not live long enough
/// # Ok::<(), Error>(())
/// ```
///
/// Frames nest; a kernel may call another kernel through its context, and a
/// frame is a context too:
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
///     // Scratch that lives until the end of the inference.
///     Ok(n + inner(inf)?)
/// })?;
/// assert_eq!(n, 110 + 32 + 64 + 100);
/// # Ok::<(), Error>(())
/// ```
pub struct Frame<'f, A: Rewind> {
    /// The allocator, from the `&mut A` the outermost frame holds for `'f`.
    /// Only shared references are made from it while scratch is handed out,
    /// and a `&mut` only to rewind, once no reference made from it is alive.
    temp: NonNull<A>,
    state: &'f FrameState<'f>,
    /// Invariant in `'f`: a frame must not pass for a longer-lived one.
    _life: PhantomData<fn(&'f ()) -> &'f ()>,
    /// The frame uses `A` exclusively for `'f` (and so `A: 'f`).
    _temp: PhantomData<&'f mut A>,
}

impl<'f, A: Rewind> Frame<'f, A> {
    fn new(temp: NonNull<A>, state: &'f FrameState<'f>) -> Self {
        Frame {
            temp,
            state,
            _life: PhantomData,
            _temp: PhantomData,
        }
    }

    /// Runs `f` with a nested scope and rewinds to where this frame was
    /// when it returns (or panics). While it runs, this frame is not the
    /// innermost scope: its [`FrameAllocator`] refuses.
    fn scoped<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(NonNull<A>, usize) -> Result<R, E>,
    ) -> Result<R, E> {
        /// Rewinds and closes the scope when dropped, so a panic in `f` does
        /// too.
        struct RewindOnDrop<'s, A: Rewind> {
            temp: NonNull<A>,
            checkpoint: Option<A::Checkpoint>,
            open: &'s Cell<usize>,
        }
        impl<A: Rewind> RewindOnDrop<'_, A> {
            fn rewind(&mut self) -> Result<(), Error> {
                match self.checkpoint.take() {
                    Some(cp) => {
                        self.open.set(self.open.get() - 1);
                        // SAFETY: `scoped` holds `&mut Frame` for the whole
                        // scope, so no frame scratch was taken in it (a
                        // `FrameAllocator` refuses while the scope is open),
                        // and what the scope took was borrowed for a lifetime
                        // local to `f` (higher-ranked), now over: no
                        // reference made from the pointer is alive (contexts
                        // hold pointers, not references). The checkpoint was
                        // taken before the scope, so `Rewind`'s contract
                        // keeps everything older (the frames' scratch) intact.
                        unsafe { self.temp.as_mut() }.rewind(cp)
                    }
                    None => Ok(()),
                }
            }
        }
        impl<A: Rewind> Drop for RewindOnDrop<'_, A> {
            fn drop(&mut self) {
                // Only reached on unwind. A failed rewind recycles nothing,
                // which is safe: the memory waits for the outer frame's reset.
                let _ = self.rewind();
            }
        }
        debug_assert!(self.state.innermost(), "`&mut Frame` is the innermost");
        // SAFETY: a shared reference for one call, while no `&mut` made from
        // the pointer is alive (only `RewindOnDrop` makes one, below).
        let checkpoint = unsafe { self.temp.as_ref() }.checkpoint()?;
        let open = self.state.open;
        let depth = open.get() + 1;
        open.set(depth);
        let mut guard = RewindOnDrop {
            temp: self.temp,
            checkpoint: Some(checkpoint),
            open,
        };
        let result = f(self.temp, depth);
        let rewound = guard.rewind();
        result.and_then(|r| rewound.map(|()| r).map_err(E::from))
    }

    /// Runs a kernel: `f` gets a [`KernelContext`] whose scratch is recycled
    /// (the frame is rewound) when `f` returns, also when it panics. The
    /// result is `f`'s, except that a failure the kernel recorded with
    /// [`KernelContext::fail`] wins over an `Ok` (converted with `From`).
    /// A refusal a collection met (an `Allocator`-trait request, whose
    /// `AllocError` has no numbers) is the kernel's to handle: it neither
    /// turns the kernel's `Ok` into an `Err` nor replaces an `Err` the
    /// kernel returns ([`KernelContext::failure`] has its numbers). The
    /// kernel may share the context with worker threads (scoped threads, a
    /// rayon pool), and returns its own error type, as [`Rewind::frame`]
    /// says.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error, KernelContext};
    ///
    /// #[derive(Debug, PartialEq)]
    /// enum EngineError {
    ///     Scratch(Error),
    ///     BadShape(usize),
    /// }
    /// impl From<Error> for EngineError {
    ///     fn from(e: Error) -> Self {
    ///         EngineError::Scratch(e)
    ///     }
    /// }
    ///
    /// fn kernel(ctx: &KernelContext, n: usize) -> Result<usize, EngineError> {
    ///     if n == 0 {
    ///         return Err(EngineError::BadShape(n));
    ///     }
    ///     // A kernel (or a worker of it) may report through the context.
    ///     if let Err(e) = ctx.allocate_temp(8, 3) {
    ///         ctx.fail(e);
    ///     }
    ///     Ok(ctx.scratch::<f32>(n)?.len())
    /// }
    ///
    /// let mut temp = CachingAllocator::new();
    /// let r = temp.frame(|inf| inf.kernel(|ctx| kernel(ctx, 0)));
    /// assert_eq!(r, Err(EngineError::BadShape(0)));
    /// let r = temp.frame(|inf| inf.kernel(|ctx| kernel(ctx, 4)));
    /// assert_eq!(r, Err(EngineError::Scratch(Error::InvalidAlignment { align: 3 })));
    /// ```
    ///
    /// # Errors
    ///
    /// The kernel's recorded failure, else what `f` returns, else a failed
    /// checkpoint or rewind.
    pub fn kernel<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&KernelContext<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        self.scoped(|temp, _depth| {
            // SAFETY: as in `run_frame`; the context and every reference made
            // from it are gone when this closure returns, before `scoped`
            // rewinds.
            let ctx = unsafe { KernelContext::from_ptr(temp) };
            ctx.finish(f(&ctx))
        })
    }

    /// Runs `f` with a nested frame, rewound when `f` returns (or panics):
    /// a layer, say, whose scratch outlives its kernels but not the layer.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error};
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| {
    ///     for _layer in 0..4 {
    ///         inf.frame(|layer| {
    ///             let kv = layer.scratch::<f32>(256)?;
    ///             layer.kernel(|ctx| Ok(ctx.scratch_copy(kv)?[0]))
    ///         })?;
    ///     }
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A failure recorded on the nested frame, else what `f` returns, else a
    /// failed checkpoint or rewind.
    pub fn frame<R, E: From<Error>>(
        &mut self,
        f: impl for<'g> FnOnce(&mut Frame<'g, A>) -> Result<R, E>,
    ) -> Result<R, E> {
        let open = self.state.open;
        self.scoped(|temp, depth| {
            // SAFETY: as in `run_frame`: `temp` is valid for the scope, and
            // the nested frame makes `&mut` from it only in its own `scoped`.
            let state = unsafe { FrameState::new(temp, depth, open) };
            let result = f(&mut Frame::new(temp, &state));
            state.ctx.finish(result)
        })
    }

    /// An allocator handle for this frame, for collections that live for
    /// the frame and grow between its kernels: a
    /// [`FrameVec`](crate::FrameVec), a `hashbrown` map, any
    /// `allocator_api2` collection. It is `Copy`, lives for `'f` without
    /// borrowing the frame (so the frame still runs kernels while the
    /// collection exists), and cannot leave the frame.
    ///
    /// A kernel or nested frame running inside this frame would recycle
    /// what the handle hands out, so while one runs the handle refuses:
    /// the collection can be read and written in a kernel, not grown. A
    /// refused request is `AllocError` to the collection, and the frame
    /// keeps why ([`Error::FrameSuspended`], or the allocator's error) for
    /// [`ScratchVecExt::try_push`](crate::ScratchVecExt::try_push) and for
    /// an `Err` the frame returns; a refusal the frame handles leaves it
    /// `Ok` (see [`KernelContext::failure`]).
    ///
    /// ```
    /// use tempalloc::allocator_api2::vec::Vec;
    /// use tempalloc::{CachingAllocator, Error};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let tokens = temp.frame(|inf| {
    ///     let mut tokens = Vec::new_in(inf.allocator());
    ///     for step in 0..4u32 {
    ///         // Each kernel reads what the earlier ones appended...
    ///         let next = inf.kernel(|ctx| {
    ///             let logits = ctx.scratch_fill(8, step)?;
    ///             Ok::<_, Error>(logits[0] + tokens.len() as u32)
    ///         })?;
    ///         // ...and the frame grows it between kernels.
    ///         tokens.push(next);
    ///     }
    ///     Ok::<_, Error>(tokens.iter().sum::<u32>())
    /// })?;
    /// assert_eq!(tokens, (0 + 0) + (1 + 1) + (2 + 2) + (3 + 3));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// Growing it inside a kernel is refused, and the frame says why:
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error, FrameVec, ScratchVecExt};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let r = temp.frame(|inf| {
    ///     let mut kept = FrameVec::new_in(inf.allocator());
    ///     inf.kernel(|_ctx| kept.try_push(1u8))?;
    ///     Ok::<_, Error>(())
    /// });
    /// assert_eq!(r, Err(Error::FrameSuspended { depth: 1, open: 2 }));
    /// ```
    ///
    /// What it backs cannot outlive the frame, whose end recycles it: a
    /// collection returned from the frame does not compile,
    ///
    /// ```compile_fail
    /// use tempalloc::{CachingAllocator, Error, FrameVec, ScratchVecExt};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let tokens = temp.frame(|inf| {
    ///     let mut tokens = FrameVec::new_in(inf.allocator());
    ///     tokens.try_push(1u32)?;
    ///     Ok::<_, Error>(tokens) // error: lifetime may not live long enough
    /// })?;
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// nor one kept past the nested frame that backs it:
    ///
    /// ```compile_fail,E0521
    /// use tempalloc::{CachingAllocator, Error, FrameVec, ScratchVecExt};
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| {
    ///     let mut kept = None;
    ///     inf.frame(|layer| {
    ///         let mut v = FrameVec::new_in(layer.allocator());
    ///         v.try_push(1u8)?;
    ///         kept = Some(v); // error: borrowed data escapes outside of closure
    ///         Ok::<_, Error>(())
    ///     })?;
    ///     Ok::<_, Error>(kept.map_or(0, |v| v.len()))
    /// })?;
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn allocator(&self) -> FrameAllocator<'f> {
        FrameAllocator { state: self.state }
    }

    /// The allocator's counters now.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error};
    ///
    /// let mut temp = CachingAllocator::new();
    /// temp.frame(|inf| {
    ///     inf.scratch::<u8>(100)?;
    ///     assert_eq!(inf.stats().bytes_requested, 100);
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn stats(&self) -> crate::Stats {
        // SAFETY: a shared reference for one call, while no `&mut` made from
        // the pointer is alive (only `scoped` makes one, under `&mut self`).
        unsafe { self.temp.as_ref() }.stats()
    }
}

/// A frame is a [`KernelContext`] whose scratch lives for the frame: see
/// [`Frame`].
impl<'f, A: Rewind> Deref for Frame<'f, A> {
    type Target = KernelContext<'f>;

    #[inline]
    fn deref(&self) -> &KernelContext<'f> {
        &self.state.ctx
    }
}

impl<A: Rewind> core::fmt::Debug for Frame<'_, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Frame")
            .field("depth", &self.state.depth)
            .field("failure", &self.failure())
            .field("stats", &self.stats())
            .finish()
    }
}
