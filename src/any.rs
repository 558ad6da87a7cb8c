//! [`AnyTemp`]: one of the crate's allocators, chosen at run time, with
//! frames.

use core::alloc::Layout;
use core::any::Any;
use core::fmt;
use core::ptr::NonNull;
use std::boxed::Box;

use crate::frame::run_frame;
use crate::{
    BumpAllocator, BumpCheckpoint, CachingAllocator, Checkpoint, Error, Frame, MallocAllocator,
    MallocCheckpoint, Rewind, Stats, TempAllocator,
};

/// One of the crate's allocators, picked at run time, that still runs
/// [`Frame`]s: `Box<dyn TempAllocator>` cannot, as [`Rewind`] is not
/// object-safe (its checkpoints are each allocator's own type).
///
/// A runtime that runs under a memory checker (valgrind, ASan) in debug
/// builds and on [`CachingAllocator`] in release builds holds an `AnyTemp`
/// and stays non-generic. Each call is one `match` on the variant, then the
/// allocator's own code.
///
/// ```
/// use tempalloc::{AnyTemp, CachingAllocator, Error, MallocAllocator, TempAllocator};
///
/// let mut temp = if std::env::var_os("SCRATCH_CHECK").is_some() {
///     AnyTemp::from(MallocAllocator::new()) // every buffer a heap block of its own
/// } else {
///     AnyTemp::from(CachingAllocator::new())
/// };
/// let sum = temp.frame(|inf| {
///     let act = inf.scratch_fill(64, 1.0f32)?;
///     inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch_copy(act)?.iter().sum::<f32>()))
/// })?;
/// assert_eq!((sum, temp.stats().bytes_live), (64.0, 0));
/// # Ok::<(), Error>(())
/// ```
///
/// A runtime's own [`Rewind`] allocator joins them as
/// [`AnyTemp::custom`], and the calls the allocators share
/// ([`trim`](Self::trim), [`release`](Self::release),
/// [`check`](Self::check), [`max_bytes`](Self::max_bytes)) need no `match`.
///
/// New variants may be added, so a `match` on it needs a wildcard arm.
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one per session; a box would add a load to every request"
)]
pub enum AnyTemp {
    /// The one to use.
    Caching(CachingAllocator),
    /// Every request a system allocation: for memory checkers.
    Malloc(MallocAllocator),
    /// `bumpalo` behind the trait.
    Bump(BumpAllocator),
    /// A runtime's own allocator: see [`AnyTemp::custom`].
    Custom(Box<dyn DynRewind>),
}

/// A [`Rewind`] allocator whose checkpoints are boxed, so that it fits
/// behind a pointer ([`Rewind`] is not object-safe: its checkpoints are
/// each allocator's own type): what [`AnyTemp::Custom`] holds. Every
/// `Rewind` allocator that is `Send + 'static`, with a `Send + 'static`
/// checkpoint, implements it.
///
/// ```
/// use tempalloc::{DynRewind, MallocAllocator};
///
/// let mut temp: Box<dyn DynRewind> = Box::new(MallocAllocator::new());
/// let cp = temp.checkpoint_dyn()?;
/// temp.rewind_dyn(cp)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// # Safety
///
/// [`Rewind`]'s contract, with [`checkpoint_dyn`](Self::checkpoint_dyn)
/// and [`rewind_dyn`](Self::rewind_dyn) for `checkpoint` and `rewind`.
pub unsafe trait DynRewind: TempAllocator + Send {
    /// [`Rewind::checkpoint`], boxed.
    ///
    /// ```
    /// use tempalloc::{DynRewind, MallocAllocator};
    ///
    /// assert!(MallocAllocator::new().checkpoint_dyn().is_ok());
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Rewind::checkpoint`].
    fn checkpoint_dyn(&self) -> Result<Box<dyn Any + Send>, Error>;

    /// [`Rewind::rewind`] to a checkpoint from
    /// [`checkpoint_dyn`](Self::checkpoint_dyn).
    ///
    /// ```
    /// use tempalloc::{DynRewind, Error, MallocAllocator};
    ///
    /// let mut temp = MallocAllocator::new();
    /// assert_eq!(temp.rewind_dyn(Box::new(7u8)), Err(Error::ForeignCheckpoint));
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ForeignCheckpoint`] for a checkpoint of another type, else
    /// as [`Rewind::rewind`].
    fn rewind_dyn(&mut self, checkpoint: Box<dyn Any + Send>) -> Result<(), Error>;
}

// SAFETY: both calls go to `A`'s `Rewind`, which upholds the contract; a
// checkpoint of another type is refused before `A` sees it.
unsafe impl<A> DynRewind for A
where
    A: Rewind + Send + 'static,
    A::Checkpoint: Send + 'static,
{
    fn checkpoint_dyn(&self) -> Result<Box<dyn Any + Send>, Error> {
        try_box(Rewind::checkpoint(self)?)
    }

    fn rewind_dyn(&mut self, checkpoint: Box<dyn Any + Send>) -> Result<(), Error> {
        let checkpoint = checkpoint
            .downcast::<A::Checkpoint>()
            .map_err(|_| Error::ForeignCheckpoint)?;
        Rewind::rewind(self, *checkpoint)
    }
}

/// `Box::new(value)`, but [`Error::OutOfMemory`] where the heap refuses,
/// not an abort (`Box::try_new` is not stable).
fn try_box<T: Send + 'static>(value: T) -> Result<Box<dyn Any + Send>, Error> {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        // Allocates nothing.
        return Ok(Box::new(value));
    }
    // SAFETY: `layout` is not zero-sized.
    let p = NonNull::new(unsafe { std::alloc::alloc(layout) }.cast::<T>())
        .ok_or_else(|| Error::out_of_memory(layout))?;
    // SAFETY: `p` is fresh memory from the global allocator with `T`'s
    // layout, so writing a `T` there is sound, and `Box` may own it and
    // free it with that layout.
    unsafe {
        p.as_ptr().write(value);
        Ok(Box::from_raw(p.as_ptr()))
    }
}

/// A checkpoint of an [`AnyTemp`]: its variant's own checkpoint.
///
/// ```
/// use tempalloc::{AnyCheckpoint, AnyTemp, BumpAllocator, Rewind};
///
/// let temp = AnyTemp::from(BumpAllocator::new());
/// assert!(matches!(temp.checkpoint()?, AnyCheckpoint::Bump(_)));
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub enum AnyCheckpoint {
    /// Of [`AnyTemp::Caching`].
    Caching(Checkpoint),
    /// Of [`AnyTemp::Malloc`].
    Malloc(MallocCheckpoint),
    /// Of [`AnyTemp::Bump`].
    Bump(BumpCheckpoint),
    /// Of [`AnyTemp::Custom`].
    Custom(Box<dyn Any + Send>),
}

/// `$body` with `$t` bound to the allocator inside `$any`, whatever its
/// variant.
macro_rules! each {
    ($any:expr, $t:ident => $body:expr) => {
        match $any {
            AnyTemp::Caching($t) => $body,
            AnyTemp::Malloc($t) => $body,
            AnyTemp::Bump($t) => $body,
            AnyTemp::Custom($t) => $body,
        }
    };
}

impl fmt::Debug for AnyTemp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyTemp::Caching(t) => f.debug_tuple("Caching").field(t).finish(),
            AnyTemp::Malloc(t) => f.debug_tuple("Malloc").field(t).finish(),
            AnyTemp::Bump(t) => f.debug_tuple("Bump").field(t).finish(),
            AnyTemp::Custom(t) => f.debug_tuple("Custom").field(&t.stats()).finish(),
        }
    }
}

impl AnyTemp {
    /// As [`Rewind::frame`], without the trait import: runs `f` in a
    /// [`Frame`], then resets.
    ///
    /// ```
    /// use tempalloc::{AnyTemp, BumpAllocator, Error};
    ///
    /// let mut temp = AnyTemp::from(BumpAllocator::new());
    /// let n = temp.frame(|inf| Ok::<_, Error>(inf.scratch::<u8>(10)?.len()))?;
    /// assert_eq!(n, 10);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Rewind::frame`].
    pub fn frame<R, E: From<Error>>(
        &mut self,
        f: impl for<'f> FnOnce(&mut Frame<'f, Self>) -> Result<R, E>,
    ) -> Result<R, E> {
        run_frame(self, f)
    }

    /// A runtime's own [`Rewind`] allocator, boxed, beside the crate's: it
    /// runs frames as they do. Each checkpoint (each kernel and nested
    /// frame) is a small heap allocation (an [`Error::OutOfMemory`] if the
    /// heap refuses it, not an abort).
    ///
    /// ```
    /// use tempalloc::{AnyTemp, Error, FixedAllocator};
    ///
    /// // A `FixedAllocator` over a buffer the runtime owns for good.
    /// let buf = Box::leak(Box::new([std::mem::MaybeUninit::uninit(); 4096]));
    /// let mut temp = AnyTemp::custom(FixedAllocator::new(buf));
    /// let n = temp.frame(|inf| {
    ///     let act = inf.scratch_fill(16, 2u32)?;
    ///     inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch_copy(act)?.iter().sum::<u32>()))
    /// })?;
    /// assert_eq!(n, 32);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn custom<A>(temp: A) -> Self
    where
        A: Rewind + Send + 'static,
        A::Checkpoint: Send + 'static,
    {
        AnyTemp::Custom(Box::new(temp))
    }

    /// Gives back the memory no scratch uses now, as
    /// [`CachingAllocator::trim`]; the others hold no more than what is live
    /// after a reset (or, `BumpAllocator`, one chunk), and keep it.
    ///
    /// ```
    /// use tempalloc::{AnyTemp, CachingAllocator, TempAllocator};
    ///
    /// let mut temp = AnyTemp::from(CachingAllocator::new());
    /// temp.trim();
    /// assert_eq!(temp.stats().bytes_live, 0);
    /// ```
    pub fn trim(&mut self) {
        if let AnyTemp::Caching(t) = self {
            t.trim();
        }
    }

    /// Resets, then gives back all the memory it can: as
    /// [`CachingAllocator::release`] and [`BumpAllocator::release`]; a reset
    /// for the others.
    ///
    /// ```
    /// use tempalloc::{AnyTemp, BumpAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = AnyTemp::from(BumpAllocator::new());
    /// KernelContext::new(&temp).scratch::<u8>(4096)?;
    /// temp.release();
    /// assert_eq!(temp.stats().bytes_held, 0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn release(&mut self) {
        match self {
            AnyTemp::Caching(t) => t.release(),
            AnyTemp::Bump(t) => t.release(),
            AnyTemp::Malloc(t) => t.reset(),
            AnyTemp::Custom(t) => t.reset(),
        }
    }

    /// As [`CachingAllocator::check`] (the canaries, with the debug checks
    /// on); `Ok` for the others, which keep none.
    ///
    /// ```
    /// use tempalloc::{AnyTemp, MallocAllocator};
    ///
    /// assert_eq!(AnyTemp::from(MallocAllocator::new()).check(), Ok(()));
    /// ```
    ///
    /// # Errors
    ///
    /// As [`CachingAllocator::check`].
    pub fn check(&self) -> Result<(), Error> {
        match self {
            AnyTemp::Caching(t) => t.check(),
            _ => Ok(()),
        }
    }

    /// The allocator's own limit, if it has one:
    /// [`CachingConfig::max_bytes`](crate::CachingConfig::max_bytes) or
    /// [`BumpAllocator::with_limit`]'s.
    ///
    /// ```
    /// use tempalloc::{AnyTemp, BumpAllocator, MallocAllocator};
    ///
    /// assert_eq!(AnyTemp::from(BumpAllocator::with_limit(1 << 20)).max_bytes(), Some(1 << 20));
    /// assert_eq!(AnyTemp::from(MallocAllocator::new()).max_bytes(), None);
    /// ```
    pub fn max_bytes(&self) -> Option<usize> {
        match self {
            AnyTemp::Caching(t) => t.config().max_bytes,
            AnyTemp::Bump(t) => t.limit(),
            AnyTemp::Malloc(_) | AnyTemp::Custom(_) => None,
        }
    }
}

impl From<CachingAllocator> for AnyTemp {
    fn from(temp: CachingAllocator) -> Self {
        AnyTemp::Caching(temp)
    }
}

impl From<MallocAllocator> for AnyTemp {
    fn from(temp: MallocAllocator) -> Self {
        AnyTemp::Malloc(temp)
    }
}

impl From<BumpAllocator> for AnyTemp {
    fn from(temp: BumpAllocator) -> Self {
        AnyTemp::Bump(temp)
    }
}

// SAFETY: every call goes to the one allocator inside, which upholds the
// contract; the variant never changes through `&self`, and `reset` needs
// `&mut self` as the inner one's does.
unsafe impl TempAllocator for AnyTemp {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        each!(self, t => t.allocate(layout))
    }

    fn reset(&mut self) {
        each!(self, t => t.reset());
    }

    fn stats(&self) -> Stats {
        each!(self, t => t.stats())
    }

    #[inline]
    unsafe fn resize_in_place(&self, ptr: NonNull<u8>, old: Layout, new_size: usize) -> bool {
        // SAFETY: the caller's contract, which is the inner allocator's.
        each!(self, t => unsafe { t.resize_in_place(ptr, old, new_size) })
    }

    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, Error> {
        // SAFETY: the caller's contract, which is the inner allocator's.
        each!(self, t => unsafe { t.grow(ptr, old, new) })
    }

    /// The inner allocator's, so a context over an `AnyTemp` holding a
    /// `CachingAllocator` makes its request inlined, as over the allocator
    /// itself.
    #[inline]
    fn fast_path(&self) -> crate::temp::sealed::FastPath<'_> {
        each!(self, t => t.fast_path())
    }
}

// SAFETY: a checkpoint is the inner allocator's, tagged with its variant,
// and a rewind goes to the inner allocator only with a checkpoint of its
// own variant (another variant's is refused, and nothing changes), so the
// inner allocator's contract holds: it recycles only what came after its
// checkpoint, recycles nothing when it fails, and its memory is not inside
// it, so not inside this enum.
unsafe impl Rewind for AnyTemp {
    type Checkpoint = AnyCheckpoint;

    fn checkpoint(&self) -> Result<AnyCheckpoint, Error> {
        Ok(match self {
            AnyTemp::Caching(t) => AnyCheckpoint::Caching(t.checkpoint()?),
            AnyTemp::Malloc(t) => AnyCheckpoint::Malloc(Rewind::checkpoint(t)?),
            AnyTemp::Bump(t) => AnyCheckpoint::Bump(Rewind::checkpoint(t)?),
            AnyTemp::Custom(t) => AnyCheckpoint::Custom(t.checkpoint_dyn()?),
        })
    }

    /// # Errors
    ///
    /// [`Error::ForeignCheckpoint`] for a checkpoint of another variant,
    /// else what the inner allocator's rewind returns.
    fn rewind(&mut self, checkpoint: AnyCheckpoint) -> Result<(), Error> {
        match (self, checkpoint) {
            (AnyTemp::Caching(t), AnyCheckpoint::Caching(cp)) => t.rewind(cp),
            (AnyTemp::Malloc(t), AnyCheckpoint::Malloc(cp)) => t.rewind(cp),
            (AnyTemp::Bump(t), AnyCheckpoint::Bump(cp)) => t.rewind(cp),
            (AnyTemp::Custom(t), AnyCheckpoint::Custom(cp)) => t.rewind_dyn(cp),
            _ => Err(Error::ForeignCheckpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AnyTemp;
    use crate::temp::sealed::FastPath;
    use crate::{BumpAllocator, CachingAllocator, TempAllocator};

    #[test]
    fn a_caching_variant_gives_its_fast_path() {
        let caching = AnyTemp::Caching(CachingAllocator::new());
        assert!(matches!(caching.fast_path(), FastPath::Caching(_)));
        let bump = AnyTemp::Bump(BumpAllocator::new());
        assert!(matches!(bump.fast_path(), FastPath::Other));
    }
}
