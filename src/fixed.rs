//! [`FixedAllocator`]: a [`TempAllocator`] over a buffer the caller owns, for
//! targets without a heap.
//!
//! Only `core` is used here, so the module builds unchanged under `no_std`.

use core::alloc::Layout;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::{Acquire, Relaxed};

use crate::fast_path::FixedBump;
use crate::temp::dangling;
use crate::{Error, Rewind, Stats, TempAllocator};

/// A bump allocator over a caller-provided buffer: no system allocation,
/// ever, so it works without a global allocator (microcontrollers, or a
/// `static` arena on any target).
///
/// Requests are bumped from the start of the buffer, each aligned to any
/// power of two (the address is aligned, so the buffer itself may be only
/// 1-aligned); [`reset`](TempAllocator::reset) starts over from the start.
/// When the buffer is full a request is [`Error::BudgetExceeded`] with the
/// request's size, the bytes used and the capacity; nothing handed out is
/// touched. [`checkpoint`](Self::checkpoint) and [`rewind`](Self::rewind)
/// give back everything taken after a point.
///
/// `Send` and `Sync`, as every `TempAllocator` is, so worker threads may share
/// a kernel's context: the cursor moves by compare-and-swap, and the window's
/// request count (and alignment padding, when a request needs some) by
/// atomic adds (word-sized, so Cortex-M4 has them; 64-bit totals are flushed
/// in at reset and rewind, through `&mut`). That costs two locked
/// instructions a request on one thread; see the `FixedAllocator` section of
/// `docs/design.md`. Targets without compare-and-swap (Cortex-M0) cannot
/// build it.
///
/// ```
/// use core::mem::MaybeUninit;
/// use tempalloc::{Error, FixedAllocator, KernelContext, TempAllocator};
///
/// let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
/// let mut temp = FixedAllocator::new(&mut buf);
/// {
///     let ctx = KernelContext::new(&temp);
///     let tile = ctx.scratch::<f32>(64)?;
///     assert_eq!(tile.as_ptr() as usize % 4, 0);
///     assert!(matches!(ctx.scratch::<u8>(2048), Err(Error::BudgetExceeded { .. })));
/// }
/// temp.reset();
/// assert_eq!(temp.used(), 0);
/// # Ok::<(), Error>(())
/// ```
#[repr(C)]
pub struct FixedAllocator<'buf> {
    /// The buffer, the cursor and the counters the fast path moves: the
    /// first field of a `#[repr(C)]` struct, so that a pointer to the
    /// allocator stands for it (see `fast_path`).
    bump: FixedBump<'buf>,
    /// Requests served, and bytes requested and no longer live, up to the
    /// last flush.
    allocations: u64,
    bytes_requested: u64,
    /// The most bytes live in the current window, not counting those live now
    /// (flushed in at rewind, reset and `stats`, off the fast path).
    window_max: AtomicUsize,
    /// The most bytes live in the window that ended at the last reset.
    last_window_max: usize,
    /// The most bytes live in any ended window.
    high_water: usize,
    resets: u64,
    /// Tells this allocator's checkpoints from those of an earlier allocator
    /// over the same buffer.
    id: usize,
}

// The fields as the derived `Debug` showed them before the fast path's
// moved to `FixedBump`, in the same order.
impl fmt::Debug for FixedAllocator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bump = &self.bump;
        f.debug_struct("FixedAllocator")
            .field("base", &bump.base)
            .field("capacity", &bump.capacity)
            .field("cursor", &bump.cursor)
            .field("count", &bump.count)
            .field("allocations", &self.allocations)
            .field("bytes_requested", &self.bytes_requested)
            .field("padding", &bump.padding)
            .field("window_max", &self.window_max)
            .field("last_window_max", &self.last_window_max)
            .field("high_water", &self.high_water)
            .field("resets", &self.resets)
            .field("id", &self.id)
            .field("_buf", &PhantomData::<&mut [MaybeUninit<u8>]>)
            .finish()
    }
}

// SAFETY: the allocator owns an exclusive borrow of the buffer (a
// `&'buf mut [MaybeUninit<u8>]`, which is `Send`) and atomics; nothing in it
// is tied to the creating thread.
unsafe impl Send for FixedAllocator<'_> {}

// SAFETY: through `&self` the buffer is only carved, by compare-and-swap on
// the cursor, so each byte range goes to one caller; `base` is only read.
unsafe impl Sync for FixedAllocator<'_> {}

/// A position in a [`FixedAllocator`] to [`rewind`](FixedAllocator::rewind)
/// to: everything allocated after it is given back at once.
///
/// A checkpoint from before the last reset is refused with
/// [`Error::StaleCheckpoint`], one from another allocator with
/// [`Error::ForeignCheckpoint`].
///
/// ```
/// use core::mem::MaybeUninit;
/// use tempalloc::{FixedAllocator, KernelContext};
///
/// let mut buf = [MaybeUninit::<u8>::uninit(); 256];
/// let mut temp = FixedAllocator::new(&mut buf);
/// let cp = temp.checkpoint();
/// KernelContext::new(&temp).scratch::<u8>(100)?;
/// temp.rewind(cp)?;
/// assert_eq!(temp.used(), 0);
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedCheckpoint {
    /// The allocator's id and its buffer's address and length: which
    /// allocator the checkpoint is of.
    id: usize,
    base: usize,
    capacity: usize,
    cursor: usize,
    padding: usize,
    resets: u64,
}

impl<'buf> FixedAllocator<'buf> {
    /// An allocator handing out `buf`, from its start. `buf` may be empty
    /// (every non-empty request is then `BudgetExceeded`) and may have any
    /// alignment.
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use tempalloc::{FixedAllocator, TempAllocator};
    ///
    /// let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    /// let temp = FixedAllocator::new(&mut buf);
    /// assert_eq!((temp.capacity(), temp.stats().bytes_held), (4096, 4096));
    /// ```
    #[must_use]
    pub fn new(buf: &'buf mut [MaybeUninit<u8>]) -> Self {
        FixedAllocator {
            bump: FixedBump::new(buf),
            allocations: 0,
            bytes_requested: 0,
            window_max: AtomicUsize::new(0),
            last_window_max: 0,
            high_water: 0,
            resets: 0,
            id: next_id(),
        }
    }

    /// The buffer's length in bytes.
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use tempalloc::FixedAllocator;
    ///
    /// let mut buf = [MaybeUninit::<u8>::uninit(); 100];
    /// assert_eq!(FixedAllocator::new(&mut buf).capacity(), 100);
    /// ```
    #[inline]
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.bump.capacity
    }

    /// Bytes used since the last reset (or rewind), alignment padding
    /// included: the next request starts here.
    ///
    /// ```
    /// use core::alloc::Layout;
    /// use core::mem::MaybeUninit;
    /// use tempalloc::{FixedAllocator, TempAllocator};
    ///
    /// let mut buf = [MaybeUninit::<u8>::uninit(); 100];
    /// let temp = FixedAllocator::new(&mut buf);
    /// temp.allocate(Layout::new::<[u8; 10]>())?;
    /// assert_eq!(temp.used(), 10);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    #[inline]
    #[must_use]
    pub fn used(&self) -> usize {
        self.bump.cursor.load(Relaxed)
    }

    /// The current position, to [`rewind`](Self::rewind) to later.
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use tempalloc::FixedAllocator;
    ///
    /// let mut buf = [MaybeUninit::<u8>::uninit(); 64];
    /// let mut temp = FixedAllocator::new(&mut buf);
    /// let cp = temp.checkpoint();
    /// assert_eq!(temp.rewind(cp), Ok(()));
    /// ```
    #[must_use]
    pub fn checkpoint(&self) -> FixedCheckpoint {
        // Padding first, as in `live`: then `cursor >= padding`. Taken while
        // other threads allocate, the checkpoint falls somewhere among their
        // requests, and a padding added in between may stay counted as live
        // bytes after a rewind to it; nothing else can differ.
        let padding = self.bump.padding.load(Acquire);
        FixedCheckpoint {
            id: self.id,
            base: self.bump.base.as_ptr().addr(),
            capacity: self.bump.capacity,
            cursor: self.bump.cursor.load(Relaxed),
            padding,
            resets: self.resets,
        }
    }

    /// Gives back everything allocated after `checkpoint` was taken.
    /// Checkpoints nest: rewinding to an inner one, then to an outer one, is
    /// fine. Taking `&mut self` means no buffer allocated after the
    /// checkpoint can still be borrowed.
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use tempalloc::{Error, FixedAllocator, KernelContext, TempAllocator};
    ///
    /// let mut buf = [MaybeUninit::<u8>::uninit(); 256];
    /// let mut temp = FixedAllocator::new(&mut buf);
    /// let cp = temp.checkpoint();
    /// KernelContext::new(&temp).scratch::<u8>(100)?;
    /// temp.rewind(cp)?;
    /// temp.reset();
    /// assert_eq!(temp.rewind(cp), Err(Error::StaleCheckpoint { taken_at: 0, now: 1 }));
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::StaleCheckpoint`] when a reset came after the checkpoint or
    /// an earlier rewind already went before it; [`Error::ForeignCheckpoint`]
    /// when it belongs to another allocator (over another buffer, or an
    /// earlier one over this buffer). The allocator is then unchanged.
    pub fn rewind(&mut self, checkpoint: FixedCheckpoint) -> Result<(), Error> {
        let cursor = *self.bump.cursor.get_mut();
        let ours = checkpoint.id == self.id
            && checkpoint.base == self.bump.base.as_ptr().addr()
            && checkpoint.capacity == self.bump.capacity;
        if !ours {
            return Err(Error::ForeignCheckpoint);
        }
        if checkpoint.resets != self.resets
            || checkpoint.cursor > cursor
            || checkpoint.padding > *self.bump.padding.get_mut()
        {
            return Err(Error::StaleCheckpoint {
                taken_at: checkpoint.resets,
                now: self.resets,
            });
        }
        self.flush_window();
        self.flush_counts(checkpoint.cursor - checkpoint.padding);
        *self.bump.cursor.get_mut() = checkpoint.cursor;
        *self.bump.padding.get_mut() = checkpoint.padding;
        Ok(())
    }

    /// Bytes handed out and live: the cursor less the padding. Padding is
    /// added (Release) after the cursor moved past it, so once the Acquire
    /// load sees it, the cursor load sees that move too: never negative.
    #[inline]
    fn live(&self) -> usize {
        let padding = self.bump.padding.load(Acquire);
        let cursor = self.bump.cursor.load(Relaxed);
        debug_assert!(padding <= cursor);
        cursor.saturating_sub(padding)
    }

    /// Flushes the bytes live now into the current window's maximum.
    #[inline]
    fn flush_window(&mut self) {
        let live = self.live();
        let max = self.window_max.get_mut();
        *max = (*max).max(live);
    }

    /// Flushes the window's counters into the totals, down to `keep_live`
    /// live bytes (the caller then moves the cursor and padding there).
    fn flush_counts(&mut self, keep_live: usize) {
        // Saturating: a checkpoint taken while other threads allocated may
        // count a padding as live (see `checkpoint`).
        let live = self.live();
        self.bytes_requested += live.saturating_sub(keep_live) as u64;
        self.allocations += core::mem::take(self.bump.count.get_mut()) as u64;
    }

    /// Why `layout` does not fit: the buffer is full.
    #[cold]
    #[inline(never)]
    fn full(&self, layout: Layout) -> Error {
        Error::BudgetExceeded {
            requested: layout.size(),
            held: self.bump.cursor.load(Relaxed),
            limit: self.bump.capacity,
        }
    }

    /// What [`fast`](Self::fast) does not serve: a zero-sized request,
    /// counted and served without touching the buffer, or one that does not
    /// fit.
    #[cold]
    #[inline(never)]
    fn allocate_slow(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if layout.size() == 0 {
            self.bump.count.fetch_add(1, Relaxed);
            return Ok(dangling(layout));
        }
        Err(self.full(layout))
    }

    /// The fast path of [`allocate`](TempAllocator::allocate): `size`
    /// bytes (not zero) aligned to `align` from the buffer, or `None` (then
    /// `allocate` serves the request, or says why not). Any `size`,
    /// checked or not; an `align` of 0 is never served. A
    /// [`KernelContext`](crate::KernelContext) inlines the same
    /// ([`FixedBump::fast`], on the allocator's first field).
    ///
    /// # Safety
    ///
    /// `align` is a power of two or 0.
    #[inline(always)]
    pub(crate) unsafe fn fast(&self, size: usize, align: usize) -> Option<NonNull<[u8]>> {
        // SAFETY: the caller's promise is `FixedBump::fast`'s.
        unsafe { self.bump.fast(size, align) }
    }
}

/// A new allocator id. Where the target has no atomic read-modify-write
/// (`thumbv6m`), every id is 0 and a checkpoint is told apart by its buffer's
/// address and length only; a checkpoint of an earlier allocator over the same
/// buffer is then accepted, which is still memory-safe as `rewind` takes
/// `&mut self`.
fn next_id() -> usize {
    #[cfg(target_has_atomic = "ptr")]
    {
        use core::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
    #[cfg(not(target_has_atomic = "ptr"))]
    {
        0
    }
}

// SAFETY: every allocation is `[start, start + size)` with `start` at or past
// the cursor and `start + size <= capacity`, after which the cursor moves to
// `start + size`; so allocations are disjoint and inside the buffer, which is
// exclusively borrowed for `'buf`, longer than the allocator lives. The cursor
// moves back only in `reset` and `rewind`, both `&mut self`, so no buffer
// handed out before can still be borrowed then. `start` is chosen so that
// `base + start` is aligned to `layout.align()`.
unsafe impl TempAllocator for FixedAllocator<'_> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        // SAFETY: a `Layout`'s alignment is a power of two.
        let fast = unsafe { self.fast(layout.size(), layout.align()) };
        fast.map_or_else(|| self.allocate_slow(layout), Ok)
    }

    #[inline]
    fn fast_path(&self) -> crate::temp::sealed::FastPath<'_> {
        crate::temp::sealed::FastPath::Fixed(&self.bump)
    }

    /// Moves the cursor from the allocation's end to its new end, if the
    /// cursor is still there (it is the newest) and the buffer holds it.
    #[inline]
    unsafe fn resize_in_place(&self, ptr: NonNull<u8>, old: Layout, new_size: usize) -> bool {
        if old.size() == 0 || new_size < old.size() {
            return false;
        }
        // An offset into the buffer: the caller's contract.
        let start = ptr
            .as_ptr()
            .addr()
            .wrapping_sub(self.bump.base.as_ptr().addr());
        let (Some(end), Some(new_end)) =
            (start.checked_add(old.size()), start.checked_add(new_size))
        else {
            return false;
        };
        // Whoever moves the cursor past a range owns it, as in `allocate`.
        new_end <= self.bump.capacity
            && self
                .bump
                .cursor
                .compare_exchange(end, new_end, Relaxed, Relaxed)
                .is_ok()
    }

    fn reset(&mut self) {
        self.flush_window();
        self.flush_counts(0);
        let window = *self.window_max.get_mut();
        self.last_window_max = window;
        self.high_water = self.high_water.max(window);
        *self.window_max.get_mut() = 0;
        *self.bump.cursor.get_mut() = 0;
        *self.bump.padding.get_mut() = 0;
        self.resets += 1;
    }

    fn stats(&self) -> Stats {
        let live = self.live();
        let window = self.window_max.load(Relaxed).max(live);
        Stats {
            allocations: self.allocations + self.bump.count.load(Relaxed) as u64,
            bytes_requested: self.bytes_requested + live as u64,
            resets: self.resets,
            // The whole buffer is held from the start; none of it from the
            // system.
            bytes_held: self.bump.capacity,
            high_water: self.high_water.max(window),
            bytes_live: live,
            window_high_water: self.last_window_max.max(window),
            ..Stats::default()
        }
    }
}

/// Frames over a caller's buffer, the same as over a
/// [`CachingAllocator`](crate::CachingAllocator): inference-long scratch and
/// per-kernel rewinds, without `std`.
///
/// ```
/// use core::mem::MaybeUninit;
/// use tempalloc::{FixedAllocator, Rewind};
///
/// let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
/// let mut temp = FixedAllocator::new(&mut buf);
/// let sum = temp.frame(|inf| {
///     let act = inf.scratch_fill::<f32>(16, 1.0)?;
///     inf.kernel(|ctx| {
///         let tmp = ctx.scratch_copy(act)?;
///         Ok(tmp.iter().sum::<f32>())
///     })
/// })?;
/// assert_eq!((sum, temp.used()), (16.0, 0));
/// # Ok::<(), tempalloc::Error>(())
/// ```
// SAFETY: `rewind` moves the cursor back to the checkpoint's, so only memory
// handed out after the checkpoint is reused; what came before stays below
// the cursor, untouched. A refused checkpoint (stale, foreign, or behind an
// earlier rewind) changes nothing. The memory is the caller's buffer,
// borrowed for `'buf`, never inside the `FixedAllocator` value.
unsafe impl Rewind for FixedAllocator<'_> {
    type Checkpoint = FixedCheckpoint;

    /// Never fails: the checkpoint is a copy of the cursor.
    #[inline]
    fn checkpoint(&self) -> Result<FixedCheckpoint, Error> {
        Ok(FixedAllocator::checkpoint(self))
    }

    #[inline]
    fn rewind(&mut self, checkpoint: FixedCheckpoint) -> Result<(), Error> {
        FixedAllocator::rewind(self, checkpoint)
    }
}
