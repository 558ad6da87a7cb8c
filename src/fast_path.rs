//! The fast path a [`KernelContext`](crate::KernelContext) inlines, at the
//! bottom of the layering: the state a request reads and writes when it
//! makes no call, and the bump on it. The allocators build on it (a
//! [`FixedAllocator`](crate::FixedAllocator) holds a [`FixedBump`]; a
//! `CachingAllocator` a [`CachingHeader`], and each of its regions a
//! [`BumpState`], which the calling thread finds through [`THREAD`]), and
//! the context and the `TempAllocator` trait name only these types, never
//! an allocator above them.
//!
//! An allocator keeps its state here as its first field, in a `#[repr(C)]`
//! struct, so that a pointer to the allocator, with its provenance, stands
//! for a pointer to the state (a context made over a pointer to the
//! allocator relies on it: `KernelContext::from_ptr`).

use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::{Relaxed, Release};

/// A [`FixedAllocator`](crate::FixedAllocator)'s buffer and where it is in
/// it: all its fast path reads and writes. Its first field. `pub` in a
/// private module, as `temp::sealed::FastPath`, which holds it, is: nothing
/// outside the crate can name it.
#[derive(Debug)]
pub struct FixedBump<'buf> {
    /// The buffer's first byte; carries the provenance of the whole buffer.
    pub(crate) base: NonNull<u8>,
    /// The buffer's length in bytes.
    pub(crate) capacity: usize,
    /// Bytes used from `base`: everything below is handed out (or padding),
    /// everything above is free. Invariant: `cursor <= capacity`.
    pub(crate) cursor: AtomicUsize,
    /// Requests served since the last reset or rewind (flushed into the
    /// allocator's totals then).
    pub(crate) count: AtomicUsize,
    /// Alignment padding below the cursor: the bytes live are `cursor -
    /// padding`. Counted instead of the live bytes because most requests
    /// need no padding, and so touch no counter but `count`.
    pub(crate) padding: AtomicUsize,
    /// Acts as the exclusive borrow of the buffer it stands for.
    _buf: PhantomData<&'buf mut [MaybeUninit<u8>]>,
}

impl<'buf> FixedBump<'buf> {
    /// The state of an allocator handing out `buf` from its start.
    pub(crate) fn new(buf: &'buf mut [MaybeUninit<u8>]) -> Self {
        let capacity = buf.len();
        // A slice is never longer than `isize::MAX` bytes, so `cursor + pad +
        // size` below cannot overflow.
        debug_assert!(capacity <= isize::MAX as usize);
        FixedBump {
            base: NonNull::from(buf).cast::<u8>(),
            capacity,
            cursor: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            padding: AtomicUsize::new(0),
            _buf: PhantomData,
        }
    }

    /// The fast path of a `FixedAllocator`'s `allocate`: `size` bytes (not
    /// zero) aligned to `align` from the buffer, or `None` (then `allocate`
    /// serves the request, or says why not). Any `size`, checked or not;
    /// an `align` of 0 is never served. Whoever moves the cursor past a
    /// range owns it, so threads may call it at once.
    ///
    /// # Safety
    ///
    /// `align` is a power of two or 0.
    #[inline(always)]
    pub(crate) unsafe fn fast(&self, size: usize, align: usize) -> Option<NonNull<[u8]>> {
        debug_assert!(align & align.wrapping_sub(1) == 0);
        if size == 0 {
            return None;
        }
        // Read once: the atomics below would make the compiler read it again.
        let base = self.base;
        let mut cursor = self.cursor.load(Relaxed);
        let (start, pad) = loop {
            debug_assert!(cursor <= self.capacity);
            // Padding that aligns the address `base + cursor` (not the offset).
            let pad =
                base.as_ptr().addr().wrapping_add(cursor).wrapping_neg() & align.wrapping_sub(1);
            // No overflow: `cursor <= capacity <= isize::MAX` and `pad <
            // align <= 2^(usize::BITS - 1)`; `size` is checked. With `align`
            // 0 (a mask of all ones) `start` is `2^usize::BITS - base`
            // (`base + cursor` is non-zero and in the address space), past
            // the buffer's end.
            let start = cursor + pad;
            let end = start.wrapping_add(size);
            if end < start || end > self.capacity {
                return None;
            }
            // Whoever moves the cursor past a range owns it.
            match self
                .cursor
                .compare_exchange_weak(cursor, end, Relaxed, Relaxed)
            {
                Ok(_) => break (start, pad),
                Err(now) => cursor = now,
            }
        };
        self.count.fetch_add(1, Relaxed);
        if pad != 0 {
            self.padding.fetch_add(pad, Release);
        }
        // SAFETY: `start + size <= capacity`, so `base + start` is inside the
        // buffer (or one past its end, impossible here as `size > 0`), which
        // `self` borrows for `'buf`, so it is live while `&self` is.
        let ptr = unsafe { base.add(start) };
        debug_assert_eq!(ptr.as_ptr().addr() & (align - 1), 0);
        Some(NonNull::slice_from_raw_parts(ptr, size))
    }
}

#[cfg(feature = "std")]
pub(crate) use caching::{BumpState, CachingHeader, THREAD, leased};

/// A `CachingAllocator`'s part: `std` only, as the thread-local is.
#[cfg(feature = "std")]
mod caching {
    use core::cell::Cell;
    use core::ptr::{self, NonNull};
    use core::sync::atomic::Ordering::Relaxed;
    use core::sync::atomic::{AtomicPtr, AtomicUsize};

    /// What a `CachingAllocator`'s fast path reads of the allocator: its
    /// first field. `pub`, unreachable outside the crate, as [`FixedBump`](super::FixedBump).
    pub struct CachingHeader {
        /// This window's token: a thread that remembers it leases the region
        /// it remembers (see [`Thread::remember`]).
        pub(crate) window: u64,
        /// Requests below this size may take the fast path: the dedicated
        /// threshold, or 0 with the debug checks, whose requests all take
        /// the slow path (so the fast path has no instruction for them).
        pub(crate) fast_below: usize,
    }

    impl CachingHeader {
        /// The fast path of a `CachingAllocator`'s `allocate`: `size` bytes
        /// aligned to `align` bumped in the calling thread's region, or
        /// `None` (then `allocate` serves the request, or says why not).
        /// Any `size`, checked or not; an `align` of 0 is never served.
        ///
        /// # Safety
        ///
        /// `align` is a power of two or 0, and `self` is the header of a
        /// live allocator, whose regions live while `&self` does (they are
        /// freed only when the allocator drops).
        #[inline(always)]
        pub(crate) unsafe fn fast(&self, size: usize, align: usize) -> Option<NonNull<[u8]>> {
            let (window, bump) = leased();
            if window != self.window || size >= self.fast_below {
                return None;
            }
            // SAFETY: the calling thread remembers this allocator's current
            // token, so it leases the region whose bump state `bump` is, a
            // region of this allocator (`Thread::remember`'s contract), alive
            // while `&self` is (the caller's promise); and it makes no other
            // change to the region during this call. The caller's promise on
            // `align` is `bump_raw`'s.
            unsafe { (*bump).bump_raw(size, align) }
        }
    }

    /// What a region's fast path reads and writes: its first field. Only the
    /// region's leaseholder writes it, so relaxed loads and stores (plain
    /// moves) suffice, and other threads read it without a data race.
    /// `Default` only for a new region, which sets `base` to dangling.
    #[derive(Default)]
    pub(crate) struct BumpState {
        /// Start of the current chunk; dangling when there is none.
        pub(crate) base: AtomicPtr<u8>,
        /// Offset of the first free byte in the current chunk.
        pub(crate) cursor: AtomicUsize,
        /// Bytes usable in the current chunk.
        pub(crate) limit: AtomicUsize,
        /// Bytes requested and not yet flushed into the totals.
        pub(crate) live: AtomicUsize,
        /// Requests since the last flush (wraps rather than overflows).
        pub(crate) count: AtomicUsize,
        /// Index of the current chunk.
        pub(crate) chunk: AtomicUsize,
        /// Bytes the window used before the current chunk, laid out as one
        /// chunk would hold them (see `region::used_before_next`).
        pub(crate) used_before: AtomicUsize,
        /// Usable bytes of all the chunks: what the region holds.
        pub(crate) held: AtomicUsize,
    }

    impl BumpState {
        /// Carves `size` bytes aligned to `align` from the current chunk, or
        /// `None` if they do not fit (any `size`: the caller need not have
        /// checked it against `isize::MAX`). An `align` of 0 never fits.
        ///
        /// # Safety
        ///
        /// `align` is a power of two or 0, and the caller may change the
        /// region this is the bump state of: it holds the region's one
        /// guard (a `Leased`), or is its leaseholder in a call that makes
        /// no guard of it, so no one else changes the region meanwhile.
        #[inline(always)]
        pub(crate) unsafe fn bump_raw(&self, size: usize, align: usize) -> Option<NonNull<[u8]>> {
            debug_assert!(align & align.wrapping_sub(1) == 0);
            let base = self.base.load(Relaxed);
            let cursor = self.cursor.load(Relaxed);
            let pad = base.addr().wrapping_add(cursor).wrapping_neg() & align.wrapping_sub(1);
            // No overflow: `cursor <= limit <= isize::MAX` and `pad < align <=
            // 2^(usize::BITS - 1)`; `size` is checked. With `align` 0 (a mask
            // of all ones) `start` is `2^usize::BITS - base` (`base + cursor`
            // is non-zero and in the address space), past the chunk's end.
            let start = cursor + pad;
            let end = start.checked_add(size)?;
            if end > self.limit.load(Relaxed) {
                return None;
            }
            self.cursor.store(end, Relaxed);
            // No overflow: live bytes sit in chunks.
            self.live.store(self.live.load(Relaxed) + size, Relaxed);
            self.count
                .store(self.count.load(Relaxed).wrapping_add(1), Relaxed);
            // `wrapping_add`: a region without a chunk has a dangling `base`,
            // where a zero-sized request may land; otherwise it equals `add`.
            let ptr = base.wrapping_add(start);
            debug_assert!(ptr.addr() % align == 0);
            // SAFETY: `base` is a chunk start or dangling, neither null, and
            // the offset stays in the chunk (or below `align` past the
            // dangling one).
            Some(NonNull::slice_from_raw_parts(
                unsafe { NonNull::new_unchecked(ptr) },
                size,
            ))
        }
    }

    /// What a thread knows: its last lease, and who it is.
    pub(crate) struct Thread {
        /// The window token the last lease was taken under, and the region's
        /// bump state (its first field, standing for the region): the fast
        /// path's look-up. A raw pointer, null at first, not `NonNull`: its
        /// niche would cost the fast path a test of it.
        lease: Cell<(u64, *const BumpState)>,
        /// The id of the allocator the region belongs to (0: none), and the
        /// thread's serial (0 until it needs one).
        pub(crate) ids: Cell<(u64, u64)>,
    }

    thread_local! {
        /// Const-initialised with no destructor: reading it is a plain load,
        /// it works in any thread-local destructor, and one block of it is
        /// one look-up where thread-locals cost a call (a shared library).
        pub(crate) static THREAD: Thread = const {
            Thread { lease: Cell::new((0, ptr::null())), ids: Cell::new((0, 0)) }
        };
    }

    impl Thread {
        /// The window token the thread last leased a region under, and the
        /// region's bump state. If the token is an allocator's current one,
        /// the region is that allocator's and the thread holds its lease
        /// ([`remember`](Self::remember)'s contract).
        #[inline(always)]
        pub(crate) fn lease(&self) -> (u64, *const BumpState) {
            self.lease.get()
        }

        /// Remembers that the thread leases the region whose bump state is
        /// at `bump` under the token `window`.
        ///
        /// # Safety
        ///
        /// `self` is the calling thread's, and whenever `window` is an
        /// allocator's current token while a call into that allocator
        /// through `&self` runs, the calling thread holds the lease of the
        /// region at `bump`, a region of that allocator: `window` is a token
        /// of the allocator that owns the region (tokens are never
        /// reused), and the thread leases the region under it (or is about
        /// to, under `&mut` to the allocator, before any such call).
        #[inline]
        pub(crate) unsafe fn remember(&self, window: u64, bump: *const BumpState) {
            self.lease.set((window, bump));
        }
    }

    /// The calling thread's [`Thread::lease`].
    #[inline(always)]
    pub(crate) fn leased() -> (u64, *const BumpState) {
        THREAD.with(Thread::lease)
    }
}
