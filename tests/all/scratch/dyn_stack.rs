//! `KernelContext::mem_stack` (feature `dyn-stack`), with `dyn-stack` alone.

use dyn_stack::StackReq;
use tempalloc::{CachingAllocator, Error, KernelContext, TempAllocator, with_context};

#[test]
fn the_stack_has_the_requested_size_and_alignment() {
    let temp = CachingAllocator::new();
    let ctx = KernelContext::new(&temp);
    let req = StackReq::new_aligned::<f64>(100, 128).and(StackReq::new::<u8>(3));
    let stack = ctx.mem_stack(req).expect("scratch");
    assert_eq!(stack.len_bytes(), req.size_bytes());
    assert_eq!(stack.as_ptr().addr() % 128, 0);
    let (a, stack) = stack.make_aligned_with::<f64>(100, 128, |i| i as f64);
    let (b, _) = stack.make_with::<u8>(3, |i| i as u8);
    assert_eq!((a[99], b[2]), (99.0, 2));
    assert_eq!(ctx.failure(), None);
}

#[test]
fn an_overflowed_request_is_an_error_recorded_in_the_context() {
    let temp = CachingAllocator::new();
    let ctx = KernelContext::new(&temp);
    let err = ctx
        .mem_stack(StackReq::OVERFLOW)
        .map(|_| ())
        .expect_err("no stack for an overflowed request");
    assert_eq!(
        err,
        Error::SizeOverflow {
            size: usize::MAX,
            align: 0
        }
    );
    assert_eq!(ctx.failure(), Some(err));
    let too_big = StackReq::new::<u64>(usize::MAX / 16);
    assert!(ctx.mem_stack(too_big).is_err());
}

#[test]
fn without_a_temp_allocator_there_is_no_stack() {
    let ctx = KernelContext::without_temp();
    let err = ctx.mem_stack(StackReq::new::<u8>(8)).map(|_| ());
    assert_eq!(err, Err(Error::NoTempAllocator));
}

#[test]
fn stacks_of_warm_kernels_make_no_system_allocation() {
    let mut temp = CachingAllocator::new();
    let kernel = |temp: &mut CachingAllocator, n: usize| {
        with_context(temp, |ctx| {
            let stack = ctx.mem_stack(StackReq::new::<f32>(n))?;
            let (v, _) = stack.make_with::<f32>(n, |i| i as f32);
            Ok::<_, Error>(v.iter().sum::<f32>())
        })
    };
    kernel(&mut temp, 4096).unwrap();
    let warm = temp.stats().system_allocations;
    for n in [16, 4096, 1000] {
        assert_eq!(
            kernel(&mut temp, n),
            Ok((0..n).map(|i| i as f32).sum::<f32>())
        );
    }
    assert_eq!(temp.stats().system_allocations, warm);
}
