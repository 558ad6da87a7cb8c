//! `BumpAllocator`: bumpalo underneath, chunks kept across resets, a limit.

use tempalloc::{BumpAllocator, Error, KernelContext, Rewind, TempAllocator};

use crate::util::{Lcg, check, fill, refuses_foreign_and_stale};

/// Runs one window of `shape` (sizes at 64 B alignment), checks the patterns
/// and resets.
fn window(temp: &mut BumpAllocator, shape: &[usize]) {
    {
        let ctx = KernelContext::new(&*temp);
        let bufs: Vec<_> = shape
            .iter()
            .enumerate()
            .map(|(tag, &s)| fill(ctx.allocate_temp(s, 64).unwrap(), tag))
            .collect();
        for (tag, buf) in bufs.iter().enumerate() {
            check(buf, tag);
        }
    }
    temp.reset();
}

#[test]
fn a_reset_keeps_the_chunk_for_the_same_shape() {
    let mut temp = BumpAllocator::new();
    let shape = [64, 100, 32];
    window(&mut temp, &shape);
    let first = temp.stats();
    assert_eq!(
        first.system_allocations, 1,
        "a small window fits in one chunk"
    );
    assert!(first.bytes_held >= shape.iter().sum());
    for _ in 0..5 {
        window(&mut temp, &shape);
        let s = temp.stats();
        assert_eq!(
            s.system_allocations, first.system_allocations,
            "no new chunk for the same shape"
        );
        assert_eq!(s.system_frees, 0);
        assert_eq!(s.bytes_held, first.bytes_held);
    }
}

#[test]
fn a_large_shape_settles_to_zero_system_allocations() {
    let mut temp = BumpAllocator::new();
    let mut rng = Lcg(7);
    // Fewer buffers under Miri, which interprets every byte written; 12
    // still take several chunks the first time.
    let n = if cfg!(miri) { 12 } else { 200 };
    let shape: Vec<usize> = (0..n).map(|_| 16 + rng.below(20_000) as usize).collect();
    let total: usize = shape.iter().sum();
    window(&mut temp, &shape);
    let s = temp.stats();
    assert!(
        s.system_allocations > 1,
        "the first window needs several chunks"
    );
    assert_eq!(
        s.system_frees,
        s.system_allocations - 1,
        "reset keeps one chunk, frees the rest"
    );
    // Each window that outgrows the kept chunk ends with a chunk at least
    // twice as large, so after a few windows one chunk holds the whole shape.
    for _ in 0..4 {
        window(&mut temp, &shape);
    }
    let settled = temp.stats();
    assert!(settled.bytes_held >= total);
    // Under Miri two settled windows show the chunk is kept.
    for _ in 0..if cfg!(miri) { 2 } else { 5 } {
        window(&mut temp, &shape);
        let s = temp.stats();
        assert_eq!(s.system_allocations, settled.system_allocations);
        assert_eq!(s.system_frees, settled.system_frees);
        assert_eq!(s.bytes_held, settled.bytes_held);
    }
}

#[test]
fn the_limit_is_reported_with_the_numbers() {
    let limit = 64 * 1024;
    let temp = BumpAllocator::with_limit(limit);
    let ctx = KernelContext::new(&temp);
    let small = fill(ctx.allocate_temp(1024, 64).unwrap(), 1);
    let held = temp.stats().bytes_held;
    assert_eq!(
        ctx.scratch::<u8>(1 << 20).unwrap_err(),
        Error::BudgetExceeded {
            requested: 1 << 20,
            held,
            limit
        }
    );
    check(small, 1);
    assert!(temp.stats().bytes_held <= limit);
}

#[test]
fn the_bump_underneath_is_the_one_that_serves() {
    let mut temp = BumpAllocator::new();
    KernelContext::new(&temp).scratch::<u64>(16).unwrap();
    let held = temp.stats().bytes_held;
    assert!(temp.bump().allocated_bytes() >= 16 * 8);
    assert_eq!(temp.bump().allocated_bytes(), held);
}

#[test]
fn bump_allocator_is_send_and_sync() {
    fn shareable<T: Send + Sync>(_: T) {}
    shareable(BumpAllocator::new());
}

/// One inference in frames: an activation buffer from the frame, then
/// `kernels` kernels that each check it and take `scratch` bytes.
fn inference(temp: &mut BumpAllocator, kernels: usize, scratch: usize) -> Result<(), Error> {
    temp.frame(|inf| {
        let act = fill(inf.allocate_temp(1000, 64)?, 1);
        for tag in 2..2 + kernels {
            inf.kernel(|ctx| {
                check(act, 1);
                check(fill(ctx.allocate_temp(scratch, 64)?, tag), tag);
                Ok(())
            })?;
            check(act, 1);
        }
        // A rewind recycles nothing: every kernel's scratch still counts.
        assert_eq!(inf.stats().bytes_live, 1000 + kernels * scratch);
        Ok(())
    })
}

#[test]
fn frames_keep_frame_scratch_and_recycle_at_the_reset() {
    let mut temp = BumpAllocator::new();
    inference(&mut temp, 5, 3000).unwrap();
    let first = temp.stats();
    assert_eq!((first.resets, first.bytes_live), (1, 0));
    assert_eq!(first.window_high_water, 1000 + 5 * 3000);
    // The bump keeps its largest chunk, so the same inference soon needs
    // no new chunk.
    for _ in 0..3 {
        inference(&mut temp, 5, 3000).unwrap();
    }
    let settled = temp.stats();
    inference(&mut temp, 5, 3000).unwrap();
    assert_eq!(temp.stats().system_allocations, settled.system_allocations);
}

#[test]
fn a_kernel_failure_inside_a_frame_is_returned_and_the_frame_goes_on() {
    let mut temp = BumpAllocator::with_limit(64 * 1024);
    let r = temp.frame(|inf| {
        let act = inf.scratch_fill(16, 7u32)?;
        let big = inf.kernel(|ctx| Ok(ctx.scratch::<u8>(1 << 20)?.len()));
        assert!(matches!(big, Err(Error::BudgetExceeded { .. })), "{big:?}");
        inf.kernel(|ctx| Ok(ctx.scratch_copy(act)?.iter().sum::<u32>()))
    });
    assert_eq!(r, Ok::<_, Error>(16 * 7));
    assert_eq!(temp.stats().bytes_live, 0);
}

#[test]
fn stale_and_foreign_checkpoints_are_refused_and_closed_ones_do_nothing() {
    let mut temp = BumpAllocator::new();
    refuses_foreign_and_stale(&mut temp, &BumpAllocator::new());
    let outer = temp.checkpoint().unwrap();
    let kept = fill(KernelContext::new(&temp).allocate_temp(100, 8).unwrap(), 3).as_mut_ptr();
    let inner = temp.checkpoint().unwrap();
    temp.rewind(outer).unwrap();
    temp.rewind(inner).unwrap();
    // SAFETY: no rewind recycles bump memory, and no reset came since the
    // buffer was handed out, so its 100 bytes are still valid and ours.
    check(unsafe { std::slice::from_raw_parts(kept, 100) }, 3);
    assert_eq!(temp.stats().bytes_live, 100);
}
