//! `tempalloc::testing::FailAt` and the blanket `TempAllocator` impls.

use tempalloc::testing::FailAt;
use tempalloc::{
    BumpAllocator, CachingAllocator, Error, KernelContext, MallocAllocator, TempAllocator,
    with_context,
};

use crate::util::{check, fill};

#[test]
fn fail_at_fails_exactly_the_nth_request_and_keeps_the_rest() {
    for n in 1..=4u64 {
        let e = Error::BudgetExceeded {
            requested: 1,
            held: 2,
            limit: 3,
        };
        let mut temp = FailAt::new(CachingAllocator::new(), n).with_error(e);
        let mut served = Vec::new();
        let r = with_context(&mut temp, |ctx| {
            for tag in 0..5 {
                match ctx.allocate_temp(100 + tag, 8) {
                    Ok(_) => served.push(tag),
                    Err(err) => {
                        assert_eq!(err, e);
                        assert_eq!(tag as u64, n - 1);
                    }
                }
            }
            Ok::<_, Error>(())
        });
        assert_eq!(r, Ok(()), "the kernel handled it");
        assert_eq!(served.len(), 4, "n = {n}");
        assert_eq!(temp.requests(), 5);
        assert_eq!(temp.inner().stats().allocations, 4);
    }
}

#[test]
fn fail_at_defaults_to_out_of_memory_for_the_request() {
    let temp = FailAt::new(MallocAllocator::new(), 2);
    let ctx = KernelContext::new(&temp);
    let first = fill(ctx.allocate_temp(64, 8).unwrap(), 1);
    assert_eq!(
        ctx.allocate_temp(300, 64).unwrap_err(),
        Error::OutOfMemory {
            size: 300,
            align: 64
        }
    );
    check(first, 1);
    assert!(ctx.allocate_temp(300, 64).is_ok(), "only the nth fails");
    let never = FailAt::new(MallocAllocator::new(), 0);
    let ctx = KernelContext::new(&never);
    assert!((0..10).all(|_| ctx.scratch::<u8>(1).is_ok()));
}

#[test]
fn boxes_and_mutable_borrows_are_allocators() {
    fn run(mut temp: impl TempAllocator) -> Result<u64, Error> {
        let sum = with_context(&mut temp, |ctx| {
            Ok(ctx.scratch_fill(4, 2u64)?.iter().sum::<u64>())
        })?;
        assert_eq!(sum, 8);
        Ok(temp.stats().resets)
    }
    let mut boxed: Box<dyn TempAllocator> = Box::new(BumpAllocator::new());
    assert_eq!(run(&mut boxed), Ok(1));
    assert_eq!(run(&mut boxed), Ok(2));
    assert_eq!(run(Box::new(MallocAllocator::new())), Ok(1));
    let mut caching = CachingAllocator::new();
    assert_eq!(run(&mut caching), Ok(1));
    assert_eq!(caching.stats().resets, 1);
    // `&mut Box<dyn TempAllocator>` and the box itself, as `dyn`.
    let dynamic: &mut dyn TempAllocator = &mut boxed;
    assert_eq!(
        with_context(dynamic, |ctx| Ok::<_, Error>(ctx.scratch::<u8>(3)?.len())),
        Ok(3)
    );
    assert_eq!(boxed.stats().resets, 3);
}

#[test]
fn a_failure_injected_into_a_frame_comes_out_and_keeps_earlier_scratch() {
    use tempalloc::Rewind;
    for n in 2..=5u64 {
        let mut temp = FailAt::new(CachingAllocator::new(), n);
        let mut kernels_done = 0;
        let r = temp.frame(|inf| {
            let act = fill(inf.allocate_temp(1000, 64)?, 1); // request 1
            for k in 0..4 {
                inf.kernel(|ctx| {
                    fill(ctx.allocate_temp(500, 64)?, 10 + k); // requests 2..=5
                    Ok(())
                })?;
                kernels_done += 1;
                check(act, 1);
            }
            Ok(())
        });
        assert_eq!(
            r,
            Err(Error::OutOfMemory {
                size: 500,
                align: 64
            }),
            "n = {n}"
        );
        assert_eq!(kernels_done, n - 2, "n = {n}");
        // The allocator is fine afterwards.
        assert_eq!(
            temp.frame(|inf| Ok::<_, Error>(inf.scratch::<u8>(10)?.len())),
            Ok(10)
        );
    }
}
