//! `BumpAllocator`: bumpalo underneath, chunks kept across resets, a limit.

use tempalloc::{BumpAllocator, Error, KernelContext, TempAllocator};

use crate::util::{Lcg, check, fill};

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
    // Fewer buffers under Miri, which interprets every byte written.
    let n = if cfg!(miri) { 30 } else { 200 };
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
    for _ in 0..5 {
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
