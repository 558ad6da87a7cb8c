//! Checkpoints of a [`CachingAllocator`](super::CachingAllocator):
//! [`Checkpoint`], the marks it keeps of each region, and
//! `checkpoint`/`rewind`.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

use super::region::{FREE, Leased, Mark};
use super::{CachingAllocator, LockedState, regions};
use crate::frame::run_frame;
use crate::{Error, Frame, Rewind};

/// A position in a [`CachingAllocator`](crate::CachingAllocator)'s window,
/// from [`checkpoint`](crate::CachingAllocator::checkpoint), to be given to
/// [`rewind`](crate::CachingAllocator::rewind). It borrows nothing, so
/// scratch taken before it can still be in use; the rewind consumes it.
///
/// ```
/// use tempalloc::{CachingAllocator, KernelContext};
///
/// let mut temp = CachingAllocator::new();
/// let cp = temp.checkpoint()?;
/// KernelContext::new(&temp).scratch::<u8>(64)?;
/// temp.rewind(cp)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub struct Checkpoint {
    /// The allocator it belongs to.
    allocator: u64,
    /// The allocator's reset count when it was taken.
    resets: u64,
    /// How many checkpoints were open when it was taken: its index in the
    /// allocator's stack of open checkpoints.
    depth: usize,
    /// Tells it from an earlier checkpoint at the same depth.
    serial: u64,
}

/// A checkpoint as plain data, the fields of the C API's
/// `tempalloc_checkpoint_token`: C holds that by value, and gives it back to
/// be made a [`Checkpoint`] again. Any value is harmless: the rewind checks
/// all four fields against the allocator's records, and a value that passes is
/// the checkpoint it names.
#[cfg(feature = "capi")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parts {
    pub(crate) allocator: u64,
    pub(crate) resets: u64,
    pub(crate) depth: usize,
    pub(crate) serial: u64,
}

#[cfg(feature = "capi")]
impl Checkpoint {
    /// Its fields, for C to hold.
    pub(crate) fn into_parts(self) -> Parts {
        Parts {
            allocator: self.allocator,
            resets: self.resets,
            depth: self.depth,
            serial: self.serial,
        }
    }

    /// The checkpoint `parts` names: the one [`into_parts`](Self::into_parts)
    /// gave them, or none at all, which [`CachingAllocator::rewind`] refuses
    /// (another allocator's, consumed by a reset, closed by a rewind, made up).
    pub(crate) fn from_parts(parts: Parts) -> Self {
        Checkpoint {
            allocator: parts.allocator,
            resets: parts.resets,
            depth: parts.depth,
            serial: parts.serial,
        }
    }
}

/// How many checkpoints can be open at once (nested) before taking one
/// more may need memory: the allocator makes room for this many, with a
/// mark for each of 8 regions, when it is made. Frames use one per level
/// (inference, layer, kernel, a kernel's inner kernel).
pub(crate) const NESTED_CHECKPOINTS: usize = 8;

/// An open checkpoint, as the allocator keeps it.
#[derive(Debug)]
pub(super) struct Open {
    serial: u64,
    /// Where its marks start in `LockedState::marks`.
    marks: usize,
    /// Dedicated chunks then.
    dedicated: usize,
    /// Allocations with a canary then (debug checks).
    canaries: usize,
}

impl CachingAllocator {
    /// Takes a checkpoint: a later [`rewind`](Self::rewind) to it recycles
    /// everything allocated after it, while what was allocated before stays
    /// allocated and unchanged.
    ///
    /// A runtime takes one before each kernel and rewinds after it, so the
    /// kernel's scratch serves the next kernel while scratch that lives for
    /// the whole inference stays put. It costs the lock and a few loads per
    /// region in use; up to [8 nested](crate::Frame) with 8 regions in use,
    /// no allocation. Take it while no other thread is allocating from this
    /// allocator, so that "before" is well defined.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let kv = KernelContext::new(&temp).scratch::<u8>(1000)?.as_mut_ptr();
    /// let cp = temp.checkpoint()?;
    /// let a = KernelContext::new(&temp).scratch::<u8>(500)?.as_mut_ptr();
    /// temp.rewind(cp)?;
    /// let b = KernelContext::new(&temp).scratch::<u8>(500)?.as_mut_ptr();
    /// assert_eq!(a, b); // the kernel's scratch was recycled...
    /// assert_ne!(kv, b); // ...the inference's was not
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// Scratch allocated after a checkpoint cannot be used after the rewind:
    ///
    /// ```compile_fail,E0502
    /// use tempalloc::{CachingAllocator, KernelContext};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let cp = temp.checkpoint().unwrap();
    /// let ctx = KernelContext::new(&temp);
    /// let tile = ctx.scratch::<f32>(16).unwrap();
    /// temp.rewind(cp).unwrap(); // error: `temp` is still borrowed by `tile`
    /// tile[0] = 1.0;
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when there is no memory for the checkpoint's
    /// records (more nested checkpoints or regions than were made room for);
    /// nothing changes then.
    pub fn checkpoint(&self) -> Result<Checkpoint, Error> {
        self.no_short_reset();
        let mut state = self.lock();
        let LockedState {
            regions,
            open,
            marks,
            ..
        } = &mut *state;
        open.try_reserve(1)
            .map_err(|_| Error::out_of_memory(Layout::new::<Open>()))?;
        let oom = Error::OutOfMemory {
            size: size_of::<Mark>() * regions.len(),
            align: align_of::<Mark>(),
        };
        marks.try_reserve(regions.len()).map_err(|_| oom)?;
        let at = marks.len();
        marks.extend(super::regions(regions).filter_map(|r| r.mark()));
        let serial = state.next_serial;
        state.next_serial += 1;
        let depth = state.open.len();
        let open = Open {
            serial,
            marks: at,
            dedicated: state.dedicated.len(),
            canaries: state.debug.len(),
        };
        state.open.push(open);
        Ok(Checkpoint {
            allocator: self.id,
            resets: self.totals.resets,
            depth,
            serial,
        })
    }

    /// Recycles everything allocated since `checkpoint` was taken. Needs
    /// `&mut self`: no scratch from after the checkpoint can still be in use
    /// and no other thread can be allocating. Checkpoints nest: rewinding
    /// one also closes those taken after it, which cannot be rewound then.
    ///
    /// Regions that were empty at the checkpoint become FREE, so the worker
    /// threads of the next kernel, fresh or not, take over their memory.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let outer = temp.checkpoint()?;
    /// KernelContext::new(&temp).scratch::<u8>(100)?;
    /// let inner = temp.checkpoint()?;
    /// KernelContext::new(&temp).scratch::<u8>(200)?;
    /// temp.rewind(inner)?;
    /// assert_eq!(temp.stats().bytes_live, 100);
    /// temp.rewind(outer)?;
    /// assert_eq!(temp.stats().bytes_live, 0);
    /// assert_eq!(temp.stats().high_water, 300);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Nothing changes when the checkpoint cannot be rewound to:
    /// [`Error::ForeignCheckpoint`] when it belongs to another allocator,
    /// [`Error::StaleCheckpoint`] when a reset came after it, and
    /// [`Error::CheckpointClosed`] when a rewind to an earlier checkpoint
    /// already released it.
    pub fn rewind(&mut self, checkpoint: Checkpoint) -> Result<(), Error> {
        let (mut state, account) = super::exclusive(&mut self.core, self.reachable);
        let state = &mut *state;
        let open = check(self.id, self.totals.resets, state, &checkpoint)?;
        let (from, dedicated, canaries) = (open.marks, open.dedicated, open.canaries);
        // The marks taken at this checkpoint: up to the next one's.
        let to = state
            .open
            .get(checkpoint.depth + 1)
            .map_or(state.marks.len(), |next| next.marks);
        if self.config.debug_checks {
            // Before any chunk goes back: the memory is still ours to poison.
            self.totals.canary_violations += state.debug.recycle(canaries);
        }
        let mut live = state.dedicated_live();
        // The new window first, as at a reset.
        self.windows.next(&mut self.header.window);
        let (last, thread) = super::lease::last_lease(self.id);
        for region in regions(&state.regions) {
            let mark = state.marks[from..to]
                .iter()
                .find(|m| ptr::eq(m.region, region));
            let next = if last == Some(NonNull::from(region)) {
                thread
            } else {
                FREE
            };
            // SAFETY: `&mut self` (and the lock, if other allocators can
            // reach this one): no thread holds a guard of the region or can
            // make one, and this is its one guard.
            live += unsafe { Leased::new(region) }.rewind(mark, next, &mut self.totals);
        }
        state.window_high = state.window_high.max(live);
        state.marks.truncate(from);
        state.open.truncate(checkpoint.depth);
        state.free_dedicated(dedicated, account);
        // The calling thread keeps its region if it leases it (a region with
        // a mark keeps its leaseholder, whoever that is).
        if let Some(last) = last.filter(|m| super::deref(m).lease(thread)) {
            super::lease::record(self.header.window, self.id, last);
        }
        Ok(())
    }
}

/// Which rule, if any, keeps `checkpoint` from being rewound to (`now`:
/// the allocator's resets so far); if none, the open checkpoint.
fn check<'s>(
    allocator: u64,
    now: u64,
    state: &'s LockedState,
    checkpoint: &Checkpoint,
) -> Result<&'s Open, Error> {
    if checkpoint.allocator != allocator {
        return Err(Error::ForeignCheckpoint);
    }
    if checkpoint.resets != now {
        return Err(Error::StaleCheckpoint {
            taken_at: checkpoint.resets,
            now,
        });
    }
    match state.open.get(checkpoint.depth) {
        Some(open) if open.serial == checkpoint.serial => Ok(open),
        _ => Err(Error::CheckpointClosed {
            depth: checkpoint.depth,
            open: state.open.len(),
        }),
    }
}

// SAFETY: `CachingAllocator::rewind` recycles what was allocated after the
// checkpoint in every region and keeps earlier chunks and cursors, and fails
// without change on a stale, closed or foreign checkpoint. Scratch lives in
// chunks (mappings or heap blocks from the block cache) that the regions
// own, so none of it is inside the `CachingAllocator` value.
unsafe impl Rewind for CachingAllocator {
    type Checkpoint = Checkpoint;

    #[inline]
    fn checkpoint(&self) -> Result<Checkpoint, Error> {
        CachingAllocator::checkpoint(self)
    }

    #[inline]
    fn rewind(&mut self, checkpoint: Checkpoint) -> Result<(), Error> {
        CachingAllocator::rewind(self, checkpoint)
    }
}

impl CachingAllocator {
    /// Runs `f` with a [`Frame`] (usually one inference), then resets: every
    /// buffer taken in the frame is recycled at once, also when `f` panics.
    /// Scratch from the frame lives until it ends; each
    /// [`kernel`](Frame::kernel) is rewound when it returns.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let r: Result<f32, Error> = temp.frame(|inf| {
    ///     let act = inf.scratch::<f32>(1024)?;          // lives for the inference
    ///     for _ in 0..3 {
    ///         inf.kernel(|ctx| {
    ///             let tmp = ctx.scratch::<f32>(256)?;   // recycled when the kernel returns
    ///             tmp[0] = act[0]; act[1] += 1.0; Ok(())
    ///         })?;
    ///     }
    ///     Ok(act[1])
    /// });
    /// assert_eq!(r?, 3.0);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What `f` returns.
    pub fn frame<R, E: From<Error>>(
        &mut self,
        f: impl for<'f> FnOnce(&mut Frame<'f, Self>) -> Result<R, E>,
    ) -> Result<R, E> {
        self.adopt_largest();
        run_frame(self, f)
    }
}
