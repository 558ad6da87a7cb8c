//! What a kernel sees: [`KernelContext`], and the runtime's per-call helper.

use core::alloc::Layout;
use core::fmt;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use std::sync::OnceLock;

use allocator_api2::alloc::{AllocError, Allocator};
use bytemuck::Zeroable;

use crate::{Error, TempAllocator};

/// The context a runtime hands a kernel on every execute call: a temp
/// allocator (or none) and the kernel's failure state.
///
/// Scratch slices borrow the allocator for `'a`, and the runtime can only
/// [`reset`](TempAllocator::reset) it once every context and slice is gone.
///
/// ```
/// use tempalloc::{KernelContext, MallocAllocator, TempAllocator};
///
/// fn softmax_kernel(ctx: &KernelContext, x: &mut [f32]) {
///     let Ok(tmp) = ctx.scratch::<f32>(x.len()) else {
///         return ctx.fail(tempalloc::Error::NoTempAllocator);
///     };
///     let max = x.iter().copied().fold(f32::MIN, f32::max);
///     for (t, v) in tmp.iter_mut().zip(x.iter()) {
///         *t = (v - max).exp();
///     }
///     let sum: f32 = tmp.iter().sum();
///     for (v, t) in x.iter_mut().zip(tmp.iter()) {
///         *v = t / sum;
///     }
/// }
///
/// let mut temp = MallocAllocator::new();
/// let mut x = [1.0, 2.0, 3.0];
/// softmax_kernel(&KernelContext::new(&temp), &mut x);
/// temp.reset();
/// assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
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
pub struct KernelContext<'a, A: ?Sized + TempAllocator + 'a = dyn TempAllocator + 'a> {
    temp: Option<&'a A>,
    failure: OnceLock<Error>,
}

/// A [`KernelContext`] that worker threads of one kernel can share: its
/// allocator is `Sync` (such as `CachingAllocator` or [`MallocAllocator`](crate::MallocAllocator)),
/// so `&SyncKernelContext` crosses threads and each worker takes its own
/// scratch.
///
/// ```
/// use tempalloc::{MallocAllocator, SyncKernelContext};
///
/// let temp = MallocAllocator::new();
/// let ctx = SyncKernelContext::new_sync(&temp);
/// std::thread::scope(|s| {
///     for worker in 0..2u8 {
///         let ctx = &ctx;
///         s.spawn(move || {
///             let tile = ctx.scratch::<u8>(1024).unwrap();
///             tile.fill(worker);
///             assert!(tile.iter().all(|&b| b == worker));
///         });
///     }
/// });
/// ```
pub type SyncKernelContext<'a> = KernelContext<'a, dyn TempAllocator + Sync + 'a>;

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
}

impl<'a> SyncKernelContext<'a> {
    /// A context that worker threads may share, over a `Sync` allocator.
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, SyncKernelContext};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = SyncKernelContext::new_sync(&temp);
    /// assert_eq!(ctx.scratch::<f64>(2)?, &[0.0, 0.0]);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    #[inline]
    pub fn new_sync(temp: &'a (dyn TempAllocator + Sync)) -> Self {
        Self::from_ref(Some(temp))
    }
}

impl<'a, A: ?Sized + TempAllocator + 'a> KernelContext<'a, A> {
    #[inline]
    fn from_ref(temp: Option<&'a A>) -> Self {
        KernelContext {
            temp,
            failure: OnceLock::new(),
        }
    }

    /// The temp allocator behind this context, if any.
    ///
    /// ```
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// assert!(KernelContext::new(&MallocAllocator::new()).temp().is_some());
    /// assert!(KernelContext::without_temp().temp().is_none());
    /// ```
    #[inline]
    pub fn temp(&self) -> Option<&'a A> {
        self.temp
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
        match self.temp {
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
        let layout =
            Layout::from_size_align(size, align).map_err(|_| Error::layout(size, align))?;
        let ptr = self.allocate(layout)?.cast::<MaybeUninit<u8>>();
        // SAFETY: `TempAllocator` guarantees `size` bytes at `ptr`, aligned,
        // disjoint from every other live allocation and valid until the
        // allocator is reset or dropped, which needs `&mut A`: impossible
        // while `'a` borrows it. `MaybeUninit<u8>` needs no initialisation.
        Ok(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr(), size) })
    }

    /// `len` elements of `T`, uninitialised.
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
        let layout = Layout::array::<T>(len).map_err(|_| Error::SizeOverflow {
            size: len.saturating_mul(size_of::<T>()),
            align: align_of::<T>(),
        })?;
        let ptr = self.allocate(layout)?.cast::<MaybeUninit<T>>();
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

    /// Records that the kernel failed, so the runtime can see why without a
    /// panic. The first failure is kept; later ones are ignored.
    ///
    /// ```
    /// use tempalloc::{Error, KernelContext};
    ///
    /// let ctx = KernelContext::without_temp();
    /// ctx.fail(Error::NoTempAllocator);
    /// ctx.fail(Error::InvalidAlignment { align: 3 });
    /// assert_eq!(ctx.failure(), Some(Error::NoTempAllocator));
    /// ```
    #[inline]
    pub fn fail(&self, error: Error) {
        // The first failure explains the rest, so a second `set` is dropped.
        let _ = self.failure.set(error);
    }

    /// The failure the kernel recorded, if any.
    ///
    /// ```
    /// use tempalloc::KernelContext;
    ///
    /// assert_eq!(KernelContext::without_temp().failure(), None);
    /// ```
    #[inline]
    pub fn failure(&self) -> Option<Error> {
        self.failure.get().copied()
    }
}

impl<A: ?Sized + TempAllocator> fmt::Debug for KernelContext<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelContext")
            .field("has_temp", &self.temp.is_some())
            .field("failure", &self.failure())
            .finish()
    }
}

/// A context is an [`allocator_api2`] allocator, so kernels can build
/// collections in scratch. `deallocate` does nothing: the reset recycles.
///
/// ```
/// use allocator_api2::vec::Vec;
/// use tempalloc::{KernelContext, MallocAllocator};
///
/// let temp = MallocAllocator::new();
/// let ctx = KernelContext::new(&temp);
/// let mut v = Vec::new_in(&ctx);
/// v.extend(0..1000u32);
/// assert_eq!(v.iter().sum::<u32>(), 499_500);
/// ```
// SAFETY: memory from `allocate` stays valid for `'a`, which outlives every
// `&KernelContext<'a>` (the allocator type here) and so every clone of it;
// `deallocate` keeps it valid too, which the trait allows.
unsafe impl<A: ?Sized + TempAllocator> Allocator for &KernelContext<'_, A> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        KernelContext::allocate(self, layout).map_err(|_| AllocError)
    }

    #[inline]
    unsafe fn deallocate(&self, _ptr: NonNull<u8>, _layout: Layout) {}
}

/// The runtime's per-execute pattern in one call: makes a context over
/// `temp`, runs `f` with it, resets `temp` and returns what `f` returned.
///
/// ```
/// use tempalloc::{with_context, MallocAllocator, TempAllocator};
///
/// let mut temp = MallocAllocator::new();
/// for step in 0..3 {
///     let sum = with_context(&mut temp, |ctx| {
///         let x = ctx.scratch::<u32>(100).unwrap();
///         x.iter_mut().enumerate().for_each(|(i, v)| *v = i as u32 + step);
///         x.iter().sum::<u32>()
///     });
///     assert_eq!(sum, 4950 + 100 * step);
/// }
/// assert_eq!(temp.stats().resets, 3);
/// ```
pub fn with_context<R>(temp: &mut dyn TempAllocator, f: impl FnOnce(&KernelContext<'_>) -> R) -> R {
    let result = f(&KernelContext::new(temp));
    temp.reset();
    result
}
