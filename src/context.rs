//! What a kernel sees: [`KernelContext`], and the runtime's per-call helper.
//! The context as an `allocator_api2` allocator is in `allocator.rs`; the
//! fast path it inlines, in `fast.rs`.

use core::alloc::Layout;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::{self, NonNull};

use bytemuck::Zeroable;

use crate::failure::{FailureSlot, NoteSlot};
use crate::temp::sealed::FastPath;
use crate::{Error, TempAllocator};

mod allocator;
mod fast;

use fast::Fast;

/// The context a runtime hands a kernel on every execute call: a temp
/// allocator (or none) and the kernel's failure state.
///
/// There is one context type for every kernel. Every [`TempAllocator`] is
/// `Sync`, and so is the context: a kernel may hand `&KernelContext` to its
/// worker threads (scoped threads, a rayon pool), and each takes its own
/// scratch; [`fail`](Self::fail) from any of them is kept. Kernels call other
/// kernels with the same `ctx`. Runtimes make a context with
/// [`with_context`], [`Frame::kernel`](crate::Frame::kernel) or
/// [`new`](Self::new).
///
/// Scratch slices borrow the allocator for `'a`, and the runtime can only
/// [`reset`](TempAllocator::reset) it once every context and slice is gone.
///
/// ```
/// use tempalloc::{with_context, Error, KernelContext, MallocAllocator};
///
/// fn softmax_kernel(ctx: &KernelContext, x: &mut [f32]) -> Result<(), Error> {
///     let tmp = ctx.scratch::<f32>(x.len())?;
///     let max = x.iter().copied().fold(f32::MIN, f32::max);
///     for (t, v) in tmp.iter_mut().zip(x.iter()) {
///         *t = (v - max).exp();
///     }
///     let sum: f32 = tmp.iter().sum();
///     for (v, t) in x.iter_mut().zip(tmp.iter()) {
///         *v = t / sum;
///     }
///     Ok(())
/// }
///
/// let mut temp = MallocAllocator::new();
/// let mut x = [1.0, 2.0, 3.0];
/// with_context(&mut temp, |ctx| softmax_kernel(ctx, &mut x))?;
/// assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
/// # Ok::<(), Error>(())
/// ```
///
/// Worker threads share the context:
///
/// ```
/// use tempalloc::{with_context, CachingAllocator, Error, KernelContext};
///
/// fn threaded(ctx: &KernelContext) -> Result<u32, Error> {
///     std::thread::scope(|s| {
///         let workers: Vec<_> = (0..2u32)
///             .map(|w| s.spawn(move || -> Result<u32, Error> {
///                 let tile = ctx.scratch_fill(256, w)?;
///                 Ok(tile.iter().sum())
///             }))
///             .collect();
///         workers.into_iter().map(|h| h.join().unwrap()).sum()
///     })
/// }
///
/// let mut temp = CachingAllocator::new();
/// assert_eq!(with_context(&mut temp, threaded)?, 256);
/// # Ok::<(), Error>(())
/// ```
///
/// A slice cannot be used after the reset that recycles it:
///
/// ```compile_fail,E0502
/// use tempalloc::{KernelContext, MallocAllocator, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// let ctx = KernelContext::new(&temp);
/// let tile = ctx.scratch::<f32>(16).unwrap();
/// temp.reset(); // error: `temp` is still borrowed by `tile`
/// tile[0] = 1.0;
/// ```
///
/// Nor can the allocator be reset while a context is alive:
///
/// ```compile_fail,E0502
/// use tempalloc::{KernelContext, MallocAllocator, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// let ctx = KernelContext::new(&temp);
/// temp.reset(); // error: `temp` is borrowed by `ctx`
/// let _ = ctx.allocate_temp(8, 8);
/// ```
pub struct KernelContext<'a> {
    /// The allocator, as a pointer, not a reference: a [`Frame`](crate::Frame) keeps its
    /// context while its kernels rewind the allocator through `&mut`, which
    /// a stored `&'a` would not survive. Each call makes a `&` for itself.
    temp: Option<NonNull<dyn TempAllocator + 'a>>,
    /// The same allocator's fast-path state (its first field) when the
    /// context makes its requests itself.
    fast: Fast<'a>,
    failure: FailureSlot,
    /// The last request refused through the `Allocator` trait: its numbers,
    /// for an `Err` the kernel returns, never a failure of its own.
    noted: NoteSlot,
    /// Acts as the `&'a dyn TempAllocator` it stands for.
    _temp: PhantomData<&'a dyn TempAllocator>,
}

// SAFETY: the context is a `&'a dyn TempAllocator` (which is `Send` and
// `Sync`, as every `TempAllocator` is `Sync`) kept as a pointer, the first
// field of the same allocator, a `CachingAllocator` or `FixedAllocator`
// (both `Sync`), as a pointer that reaches nothing else, and a
// `FailureSlot`, which is `Send` and `Sync`.
unsafe impl Send for KernelContext<'_> {}
// SAFETY: through `&KernelContext` the pointers only reach the allocator
// by `&self` (every `TempAllocator` is `Sync`) and the slots are changed
// only under their own atomic protocol (`FailureSlot` and `NoteSlot` are
// `Sync`), so `&KernelContext` may cross threads.
unsafe impl Sync for KernelContext<'_> {}

impl<'a> KernelContext<'a> {
    /// A context whose scratch comes from `temp`.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, KernelContext};
    ///
    /// let temp = BumpAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// assert_eq!(ctx.scratch::<u32>(4)?, &[0, 0, 0, 0]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    #[inline]
    pub fn new(temp: &'a dyn TempAllocator) -> Self {
        Self::from_ref(Some(temp))
    }

    /// A context without a temp allocator: every request is
    /// [`Error::NoTempAllocator`], as in a runtime that has none.
    ///
    /// ```
    /// use tempalloc::{Error, KernelContext};
    ///
    /// let ctx = KernelContext::without_temp();
    /// assert_eq!(ctx.allocate_temp(16, 8).unwrap_err(), Error::NoTempAllocator);
    /// ```
    #[inline]
    pub fn without_temp() -> Self {
        Self::from_ref(None)
    }

    #[inline]
    fn from_ref(temp: Option<&'a dyn TempAllocator>) -> Self {
        // Pointers from `&'a` references, valid for `'a`.
        let fast = match temp.map(|t| t.fast_path()) {
            #[cfg(feature = "std")]
            Some(FastPath::Caching(caching)) => Fast::caching(NonNull::from(caching)),
            Some(FastPath::Fixed(fixed)) => Fast::fixed(NonNull::from(fixed)),
            Some(FastPath::Other) | None => Fast::OTHER,
        };
        KernelContext {
            temp: temp.map(NonNull::from),
            fast,
            failure: FailureSlot::new(),
            noted: NoteSlot::new(),
            _temp: PhantomData,
        }
    }

    /// A context over the allocator `temp` points to.
    ///
    /// # Safety
    ///
    /// Now, and whenever a method of the context runs during `'a`, `temp`
    /// points to a live allocator that nothing uses exclusively.
    #[inline]
    pub(crate) unsafe fn from_ptr<A: TempAllocator + 'a>(temp: NonNull<A>) -> Self {
        // SAFETY: the caller's promise: `temp` points to a live allocator
        // that nothing uses exclusively now.
        let answer = unsafe { temp.as_ref() }.fast_path();
        // Pointers made from `temp`, not from the reference (which the
        // frame's `&mut` to the allocator, between the context's calls,
        // would invalidate), and only where the answer is at `temp` itself:
        // the first field of the `#[repr(C)]` allocator there (`A` is
        // `CachingAllocator` or `FixedAllocator`), so that `temp`, with its
        // provenance over the whole allocator, stands for it at every call.
        let fast = match answer {
            #[cfg(feature = "std")]
            FastPath::Caching(c) if ptr::addr_eq(c, temp.as_ptr()) => Fast::caching(temp.cast()),
            FastPath::Fixed(f) if ptr::addr_eq(f, temp.as_ptr()) => Fast::fixed(temp.cast()),
            _ => Fast::OTHER,
        };
        KernelContext {
            temp: Some(temp),
            fast,
            failure: FailureSlot::new(),
            noted: NoteSlot::new(),
            _temp: PhantomData,
        }
    }

    /// The temp allocator behind this context, if any, for as long as the
    /// context is borrowed (a frame's context may not lend its allocator
    /// into the frame's kernels).
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// assert!(KernelContext::new(&MallocAllocator::new()).temp().is_some());
    /// assert!(KernelContext::without_temp().temp().is_none());
    /// ```
    #[inline]
    pub fn temp(&self) -> Option<&dyn TempAllocator> {
        // SAFETY: `new` took a `&'a`, and `from_ptr`'s caller promised that
        // the allocator is live and used by nothing exclusively while a
        // method of the context runs, which the borrow of `self` spans.
        self.temp.map(|temp| unsafe { temp.as_ref() })
    }

    /// `layout.size()` bytes aligned to `layout.align()` from the temp
    /// allocator.
    ///
    /// ```
    /// use std::alloc::Layout;
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let p = KernelContext::new(&temp).allocate(Layout::new::<[u64; 8]>())?;
    /// assert!(p.len() >= 64);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoTempAllocator`] without an allocator, else what the
    /// allocator returns.
    #[inline]
    pub fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        self.take(layout.size(), layout.align())
    }

    /// `size` bytes aligned to `align`, the one check of both on the way:
    /// the fast path of a `CachingAllocator` or `FixedAllocator`, inlined,
    /// where `align` is a power of two (or 0, which their fast paths never
    /// serve) and the allocator serves the request there; else
    /// [`take_slow`](Self::take_slow). A layout known when the kernel is
    /// compiled (`scratch::<f32>(n)`) folds the check of `align`.
    #[inline(always)]
    fn take(&self, size: usize, align: usize) -> Result<NonNull<[u8]>, Error> {
        // A power of two or 0: one instruction fewer than `is_power_of_two`.
        let aligns = align & align.wrapping_sub(1) == 0;
        match self.fast.serve(size, align, aligns) {
            Some(ptr) => Ok(ptr),
            None => self.take_slow(size, align),
        }
    }

    /// What the fast path did not serve: bad input gets its [`Error`]
    /// here, with its numbers, and a valid request goes to the allocator
    /// (through `dyn`), which serves it or says why not.
    #[cold]
    #[inline(never)]
    fn take_slow(&self, size: usize, align: usize) -> Result<NonNull<[u8]>, Error> {
        let layout =
            Layout::from_size_align(size, align).map_err(|_| Error::layout(size, align))?;
        match self.temp() {
            Some(temp) => temp.allocate(layout),
            None => Err(Error::NoTempAllocator),
        }
    }

    /// `size` bytes aligned to `align`: the byte-level call a C runtime has.
    ///
    /// ```
    /// use tempalloc::{Error, KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let buf = ctx.allocate_temp(4096, 4096)?;
    /// assert_eq!((buf.len(), buf.as_ptr() as usize % 4096), (4096, 0));
    /// assert_eq!(ctx.allocate_temp(8, 12).unwrap_err(), Error::InvalidAlignment { align: 12 });
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAlignment`] when `align` is not a power of two,
    /// [`Error::SizeOverflow`] when `size` padded to `align` passes
    /// `isize::MAX`, else as [`allocate`](Self::allocate).
    #[inline]
    pub fn allocate_temp(
        &self,
        size: usize,
        align: usize,
    ) -> Result<&'a mut [MaybeUninit<u8>], Error> {
        let ptr = self.take(size, align)?.cast::<MaybeUninit<u8>>();
        // SAFETY: `TempAllocator` guarantees `size` bytes at `ptr`, aligned,
        // disjoint from every other live allocation and valid until the
        // allocator is reset or dropped, which needs `&mut A`: impossible
        // while `'a` borrows it. `MaybeUninit<u8>` needs no initialisation.
        Ok(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr(), size) })
    }

    /// `len` elements of `T`, uninitialised. To fill them without `unsafe`,
    /// take them initialised instead: [`scratch_with`](Self::scratch_with)
    /// (element `i` is `f(i)`), [`scratch_fill`](Self::scratch_fill),
    /// [`scratch_copy`](Self::scratch_copy), or
    /// [`scratch`](Self::scratch) for zeroes (a type of your own derives
    /// [`Zeroable`] with the `derive` feature).
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let tile = ctx.scratch_uninit::<f32>(64)?;
    /// let tile: Vec<f32> = tile.iter_mut().map(|x| *x.write(1.5)).collect();
    /// assert_eq!(tile.len(), 64);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::SizeOverflow`] when `len * size_of::<T>()` passes
    /// `isize::MAX`, else as [`allocate`](Self::allocate).
    #[inline]
    pub fn scratch_uninit<T>(&self, len: usize) -> Result<&'a mut [MaybeUninit<T>], Error> {
        // Past `isize::MAX`, `take` says so (or `overflow`, past `usize::MAX`).
        let size = len.checked_mul(size_of::<T>());
        let size = size.ok_or_else(|| overflow(align_of::<T>()))?;
        let ptr = self.take(size, align_of::<T>())?.cast::<MaybeUninit<T>>();
        // SAFETY: as in `allocate_temp`: room for `len` values of `T`, aligned
        // for `T`, exclusive to us for `'a`; `MaybeUninit` needs no init.
        Ok(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr(), len) })
    }

    /// `len` elements of `T`, zero-initialised. `T` is a plain numeric type
    /// (anything [`Zeroable`]: integers, floats, arrays of them).
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let scales = ctx.scratch::<f32>(8)?;
    /// assert!(scales.iter().all(|&s| s == 0.0));
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`scratch_uninit`](Self::scratch_uninit).
    #[inline]
    pub fn scratch<T: Zeroable>(&self, len: usize) -> Result<&'a mut [T], Error> {
        let slice = self.scratch_uninit::<T>(len)?;
        let ptr = slice.as_mut_ptr().cast::<T>();
        // SAFETY: `ptr` is valid for `len` writes of `T` (just allocated), and
        // all-zero bytes are a valid `T` because `T: Zeroable`; after the
        // write every element is initialised, so the `&mut [T]` is sound.
        unsafe {
            ptr.write_bytes(0, len);
            Ok(core::slice::from_raw_parts_mut(ptr, len))
        }
    }

    /// `len` elements of `T`, zeroed, aligned to the larger of `align` and
    /// `align_of::<T>()`: a 64 B SIMD tile or a 4096 B page-aligned panel of
    /// `f32` without a wrapper type.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let panel = ctx.scratch_aligned::<f32>(1000, 64)?;
    /// assert_eq!(panel.as_ptr() as usize % 64, 0);
    /// assert!(panel.iter().all(|&x| x == 0.0));
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAlignment`] when `align` is not a power of two, else
    /// as [`scratch_uninit`](Self::scratch_uninit).
    #[inline]
    pub fn scratch_aligned<T: Zeroable>(
        &self,
        len: usize,
        align: usize,
    ) -> Result<&'a mut [T], Error> {
        if !align.is_power_of_two() {
            return Err(Error::InvalidAlignment { align });
        }
        let align = align.max(align_of::<T>());
        // Past `isize::MAX`, `take` says so (or `overflow`, past `usize::MAX`).
        let size = len.checked_mul(size_of::<T>());
        let size = size.ok_or_else(|| overflow(align))?;
        let ptr = self.take(size, align)?.cast::<T>().as_ptr();
        // SAFETY: room for `len` values of `T` at `ptr`, aligned (to more
        // than `T` needs), exclusive to us for `'a`; all-zero bytes are a
        // valid `T` (`T: Zeroable`), so after the write every element is
        // initialised.
        unsafe {
            ptr.write_bytes(0, len);
            Ok(core::slice::from_raw_parts_mut(ptr, len))
        }
    }

    /// A copy of `src` in scratch, aligned to `align_of::<T>()`.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let x = ctx.scratch_copy(&[3.0f32, 1.0, 2.0])?;
    /// x.sort_by(f32::total_cmp);
    /// assert_eq!(x, &[1.0, 2.0, 3.0]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`scratch_uninit`](Self::scratch_uninit).
    #[inline]
    pub fn scratch_copy<T: Copy>(&self, src: &[T]) -> Result<&'a mut [T], Error> {
        let dst = self.scratch_uninit::<T>(src.len())?;
        for (d, s) in dst.iter_mut().zip(src) {
            d.write(*s);
        }
        // SAFETY: every element was written just above.
        Ok(unsafe { assume_init(dst) })
    }

    /// `len` copies of `value`, aligned to `align_of::<T>()`.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// assert_eq!(ctx.scratch_fill(3, f32::NEG_INFINITY)?, &[f32::NEG_INFINITY; 3]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`scratch_uninit`](Self::scratch_uninit).
    #[inline]
    pub fn scratch_fill<T: Copy>(&self, len: usize, value: T) -> Result<&'a mut [T], Error> {
        self.scratch_with(len, |_| value)
    }

    /// `len` elements, element `i` being `f(i)`, aligned to
    /// `align_of::<T>()`. `f` runs in index order.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// assert_eq!(ctx.scratch_with(4, |i| (i * i) as u16)?, &[0, 1, 4, 9]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`scratch_uninit`](Self::scratch_uninit).
    #[inline]
    pub fn scratch_with<T: Copy>(
        &self,
        len: usize,
        mut f: impl FnMut(usize) -> T,
    ) -> Result<&'a mut [T], Error> {
        let dst = self.scratch_uninit::<T>(len)?;
        for (i, d) in dst.iter_mut().enumerate() {
            d.write(f(i));
        }
        // SAFETY: every element was written just above (a panic in `f`
        // leaves before this line, and `T: Copy` has nothing to drop).
        Ok(unsafe { assume_init(dst) })
    }

    /// What every runtime entry point does with the kernel's result: a
    /// failure recorded with [`fail`](Self::fail) wins; else the result is
    /// the kernel's own. A refusal noted through the `Allocator` trait is
    /// not a failure: the kernel handled it, or returned an error of its own
    /// (which a refusal it handled earlier must not hide).
    #[inline]
    pub(crate) fn finish<R, E: From<Error>>(&self, result: Result<R, E>) -> Result<R, E> {
        match self.failure.get() {
            Some(e) => Err(E::from(e)),
            None => result,
        }
    }

    /// Keeps the numbers of a request refused where only `AllocError` can
    /// be returned, for the caller that sees it ([`failure`](Self::failure),
    /// `ScratchVecExt`'s `try_` methods).
    #[inline]
    pub(crate) fn note(&self, error: Error) {
        self.noted.set(error);
    }

    /// The last refusal [`note`](Self::note) kept.
    #[cfg(feature = "alloc")]
    #[inline]
    pub(crate) fn noted(&self) -> Option<Error> {
        self.noted.get()
    }

    /// Records that the kernel failed, so the runtime can see why without a
    /// panic; [`with_context`] and [`Frame::kernel`](crate::Frame::kernel)
    /// return it, even when the kernel returns `Ok`. The first failure is
    /// kept; later ones are ignored. (A request refused through the
    /// `Allocator` trait is not recorded here: see [`failure`](Self::failure).) Worker
    /// threads may call it at once, and it never waits: a call that loses the
    /// race returns before the winner's error may be visible, which
    /// [`failure`](Self::failure) shows once the winning call has returned
    /// (at the latest when the workers are joined).
    ///
    /// ```
    /// use tempalloc::{Error, KernelContext};
    ///
    /// fn kernel(ctx: &KernelContext, n: usize) {
    ///     // A kernel that returns nothing reports through the context.
    ///     if let Err(e) = ctx.scratch::<f32>(n) {
    ///         return ctx.fail(e);
    ///     }
    /// }
    ///
    /// let ctx = KernelContext::without_temp();
    /// kernel(&ctx, 16);
    /// ctx.fail(Error::InvalidAlignment { align: 3 });
    /// assert_eq!(ctx.failure(), Some(Error::NoTempAllocator));
    /// ```
    #[inline]
    pub fn fail(&self, error: Error) {
        self.failure.set(error);
    }

    /// The failure the kernel recorded with [`fail`](Self::fail), else the
    /// last request a collection asked of the context (through the
    /// `Allocator` trait) and was refused: the numbers its `AllocError`
    /// could not carry. Only the first fails the kernel; the second is for
    /// the kernel to handle, or to put in an `Err` of its own.
    ///
    /// ```
    /// use tempalloc::{Error, FixedAllocator, KernelContext, ScratchVec};
    /// # use core::mem::MaybeUninit;
    ///
    /// let mut buf = [MaybeUninit::uninit(); 64];
    /// let temp = FixedAllocator::new(&mut buf);
    /// let ctx = KernelContext::new(&temp);
    /// assert_eq!(ctx.failure(), None);
    /// let mut v = ScratchVec::<u8>::new_in(&ctx);
    /// assert!(v.try_reserve(100).is_err());
    /// assert!(matches!(ctx.failure(), Some(Error::BudgetExceeded { requested: 100, .. })));
    /// ```
    #[inline]
    pub fn failure(&self) -> Option<Error> {
        self.failure.get().or_else(|| self.noted.get())
    }
}

impl fmt::Debug for KernelContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelContext")
            .field("has_temp", &self.temp.is_some())
            .field("failure", &self.failure())
            .finish()
    }
}

/// The runtime's per-execute pattern in one call: makes a context over
/// `temp`, runs `f` with it, resets `temp` and returns `f`'s result, except
/// that a failure the kernel recorded with [`KernelContext::fail`] (from any
/// thread) wins over an `Ok`: no error is lost.
///
/// A refusal a collection met (an `Allocator`-trait request, whose
/// `AllocError` has no numbers) is the kernel's to handle: it neither turns
/// the kernel's `Ok` into an `Err` nor replaces an `Err` the kernel returns.
/// [`KernelContext::failure`] has its numbers, and
/// [`ScratchVecExt`](crate::ScratchVecExt)'s `try_` methods return them.
///
/// `f` returns its own error type, anything [`Error`] converts into (`E:
/// From<Error>`); a recorded failure is converted with `From`. Where the
/// result goes through `?` into a function returning `Result<_, Error>`,
/// Rust infers `E = Error`; where nothing says which (an `unwrap`, an
/// `assert_eq!`), name it once: `Ok::<_, Error>(..)`.
///
/// ```
/// use tempalloc::{with_context, Error, MallocAllocator, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// for step in 0..3 {
///     let sum = with_context(&mut temp, |ctx| {
///         let x = ctx.scratch::<u32>(100)?;
///         x.iter_mut().enumerate().for_each(|(i, v)| *v = i as u32 + step);
///         Ok::<_, Error>(x.iter().sum::<u32>())
///     })?;
///     assert_eq!(sum, 4950 + 100 * step);
/// }
/// assert_eq!(temp.stats().resets, 3);
///
/// // A recorded failure is returned even when the kernel says `Ok`.
/// let r = with_context(&mut temp, |ctx| {
///     ctx.fail(Error::InvalidAlignment { align: 3 });
///     Ok(())
/// });
/// assert_eq!(r, Err(Error::InvalidAlignment { align: 3 }));
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
///
/// The kernel's recorded failure, else what `f` returns.
pub fn with_context<R, E: From<Error>>(
    temp: &mut dyn TempAllocator,
    f: impl FnOnce(&KernelContext<'_>) -> Result<R, E>,
) -> Result<R, E> {
    let result = {
        let ctx = KernelContext::new(temp);
        ctx.finish(f(&ctx))
    };
    temp.reset();
    result
}

/// A request of more than `usize::MAX` bytes, aligned to `align`.
#[cold]
#[inline(never)]
fn overflow(align: usize) -> Error {
    Error::SizeOverflow {
        size: usize::MAX,
        align,
    }
}

/// # Safety
///
/// Every element of `s` is initialised.
#[inline]
unsafe fn assume_init<T>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and the caller promises
    // every element is initialised.
    unsafe { &mut *(core::ptr::from_mut(s) as *mut [T]) }
}
