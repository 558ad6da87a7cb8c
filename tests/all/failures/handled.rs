//! A refusal a kernel handles stays handled. A request
//! refused through the `Allocator` trait (a `ScratchVec` or `FrameVec` that
//! cannot grow) neither turns the kernel's `Ok` into an `Err` nor replaces
//! an `Err` the kernel returns; `ctx.failure()` has its numbers.

use tempalloc::{
    CachingAllocator, CachingConfig, Error, FrameVec, KernelContext, ScratchVec, ScratchVecExt,
    with_context,
};

const MIB: usize = 1 << 20;

fn capped() -> CachingAllocator {
    CachingAllocator::with_config(CachingConfig::default().max_bytes(Some(MIB)))
}

/// Asks for 8 MiB, and on refusal falls back to 4 KiB.
fn fallback(ctx: &KernelContext) -> Result<usize, Error> {
    let mut v = ScratchVec::<u8>::new_in(ctx);
    if v.try_reserve(8 << 20).is_err() {
        assert!(
            matches!(ctx.failure(), Some(Error::BudgetExceeded { requested, .. }) if requested == 8 << 20),
            "{:?}",
            ctx.failure()
        );
        v.try_reserve_exact(4096)
            .map_err(|_| Error::NoTempAllocator)?;
    }
    v.resize(v.capacity(), 1);
    Ok(v.len())
}

#[test]
fn a_scratch_vec_refusal_handled_by_a_fallback_is_ok() {
    let mut temp = capped();
    assert_eq!(with_context(&mut temp, fallback), Ok(4096));
    assert_eq!(temp.frame(|inf| inf.kernel(fallback)), Ok(4096));
    // The same as when the fallback follows a refused `scratch`.
    let r = with_context(&mut temp, |ctx| match ctx.scratch::<u8>(8 << 20) {
        Ok(s) => Ok(s.len()),
        Err(_) => Ok::<_, Error>(ctx.scratch::<u8>(4096)?.len()),
    });
    assert_eq!(r, Ok(4096));
}

/// A kernel's own error.
#[derive(Debug, PartialEq)]
enum KernelError {
    Scratch(Error),
    Shape(usize),
}

impl From<Error> for KernelError {
    fn from(e: Error) -> Self {
        KernelError::Scratch(e)
    }
}

#[test]
fn an_err_the_kernel_returns_after_a_handled_refusal_comes_out_as_it_is() {
    let mut temp = capped();
    // Falls back after the refusal, then finds its input's shape wrong.
    let kernel = |ctx: &KernelContext| -> Result<usize, KernelError> {
        fallback(ctx)?;
        Err(KernelError::Shape(3))
    };
    assert_eq!(with_context(&mut temp, kernel), Err(KernelError::Shape(3)));
    assert_eq!(
        temp.frame(|inf| inf.kernel(kernel)),
        Err(KernelError::Shape(3))
    );
    // An `Err` the kernel made from the refusal keeps what the kernel put
    // in it: here the numbers, from `ctx.failure()`.
    let kernel = |ctx: &KernelContext| {
        let mut v = ScratchVec::<u8>::new_in(ctx);
        v.try_reserve(8 << 20)
            .map_err(|_| ctx.failure().unwrap_or(Error::NoTempAllocator))?;
        Ok::<_, Error>(v.capacity())
    };
    for r in [
        with_context(&mut temp, kernel),
        temp.frame(|inf| inf.kernel(kernel)),
    ] {
        assert!(
            matches!(r, Err(Error::BudgetExceeded { requested, limit: MIB, .. }) if requested == 8 << 20),
            "{r:?}"
        );
    }
    // `fail` still wins over an `Ok`, and over the kernel's own `Err`.
    let r = with_context(&mut temp, |ctx| {
        ctx.fail(Error::InvalidAlignment { align: 3 });
        Ok::<_, Error>(())
    });
    assert_eq!(r, Err(Error::InvalidAlignment { align: 3 }));
    let r = with_context(&mut temp, |ctx| {
        ctx.fail(Error::InvalidAlignment { align: 3 });
        Err::<(), _>(KernelError::Shape(1))
    });
    assert_eq!(
        r,
        Err(KernelError::Scratch(Error::InvalidAlignment { align: 3 }))
    );
}

#[test]
fn a_frame_whose_frame_vec_refusal_was_handled_is_ok() {
    let mut temp = capped();
    let r = temp.frame(|inf| {
        let mut tokens = FrameVec::new_in(inf.allocator());
        tokens.try_push(1u32)?;
        // Growing inside a kernel is refused (past the capacity); the kernel
        // keeps the value for later instead.
        let pending = inf.kernel(|_ctx| {
            let e = (0..64).try_for_each(|i| tokens.try_push(i)).unwrap_err();
            assert!(
                matches!(e, Error::FrameSuspended { depth: 1, open: 2 }),
                "{e}"
            );
            Ok::<_, Error>(7)
        })?;
        tokens.try_push(pending)?;
        // Over the budget: refused with the numbers, and handled.
        let mut big = FrameVec::<u8>::new_in(inf.allocator());
        let e = big.try_extend_from_slice(&[0; 2 * MIB]).unwrap_err();
        assert!(matches!(e, Error::BudgetExceeded { limit: MIB, .. }), "{e}");
        Ok::<_, Error>(tokens.last().copied())
    });
    assert_eq!(r, Ok(Some(7)));
}

#[test]
fn a_later_refusal_reports_its_own_numbers() {
    let mut temp = capped();
    let r = with_context(&mut temp, |ctx| {
        let mut v = ScratchVec::<u8>::new_in(ctx);
        assert!(v.try_reserve(8 << 20).is_err());
        let e = v.try_extend_from_slice(&[0; 2 * MIB]).unwrap_err();
        assert!(
            matches!(e, Error::BudgetExceeded { requested, .. } if requested == 2 * MIB),
            "{e}"
        );
        Ok::<_, Error>(())
    });
    assert_eq!(r, Ok(()));
}
