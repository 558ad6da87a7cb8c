//! [`AnyTemp`]: one of the crate's allocators, chosen at run time, with
//! frames.

use core::alloc::Layout;
use core::ptr::NonNull;

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
/// New variants may be added, so a `match` on it needs a wildcard arm.
#[derive(Debug)]
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
}

/// `$body` with `$t` bound to the allocator inside `$any`, whatever its
/// variant.
macro_rules! each {
    ($any:expr, $t:ident => $body:expr) => {
        match $any {
            AnyTemp::Caching($t) => $body,
            AnyTemp::Malloc($t) => $body,
            AnyTemp::Bump($t) => $body,
        }
    };
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
            _ => Err(Error::ForeignCheckpoint),
        }
    }
}
