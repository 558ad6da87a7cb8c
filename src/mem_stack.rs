//! `dyn-stack` interop (feature `dyn-stack`): a [`MemStack`] carved from a
//! kernel's scratch, for code written against `dyn-stack`'s convention
//! (faer's `*_scratch()` functions and the routines that take
//! `&mut MemStack`; `gemm::gemm` takes none, it allocates inside): ask the
//! library for its [`StackReq`], take the stack from the context, call the
//! library.

use dyn_stack::{MemStack, StackReq};

use crate::{Error, KernelContext};

impl KernelContext<'_> {
    /// A [`MemStack`] over fresh scratch of `req.size_bytes()` bytes aligned
    /// to `req.align_bytes()`: exactly what `req` asks for. It lives until
    /// the reset that ends this kernel's scope, like any scratch.
    ///
    /// ```
    /// use dyn_stack::StackReq;
    /// use tempalloc::{KernelContext, MallocAllocator};
    ///
    /// let temp = MallocAllocator::new();
    /// let ctx = KernelContext::new(&temp);
    /// let req = StackReq::new::<f64>(256).and(StackReq::new::<u32>(10));
    /// let stack = ctx.mem_stack(req)?;
    /// let (values, stack) = stack.make_with::<f64>(256, |i| i as f64);
    /// let (_indices, _) = stack.make_with::<u32>(10, |i| i as u32);
    /// assert_eq!(values[255], 255.0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::SizeOverflow`] (with `usize::MAX` as the size and 0 as the
    /// alignment) for a request whose size overflowed while it was built
    /// (`StackReq::OVERFLOW`), else as
    /// [`allocate_temp`](KernelContext::allocate_temp). The error is also
    /// recorded in the context ([`fail`](KernelContext::fail)), as a kernel
    /// would.
    pub fn mem_stack(&self, req: StackReq) -> Result<&mut MemStack, Error> {
        let result = match req.align_bytes() {
            0 => Err(Error::SizeOverflow {
                size: usize::MAX,
                align: 0,
            }),
            align => self.allocate_temp(req.size_bytes(), align),
        };
        match result {
            Ok(buffer) => Ok(MemStack::new(buffer)),
            Err(error) => {
                self.fail(error);
                Err(error)
            }
        }
    }
}
