//! `MallocAllocator`: one system allocation per non-empty request, all freed
//! at reset.

use tempalloc::{KernelContext, MallocAllocator, TempAllocator};

use crate::util::{check, fill};

#[test]
fn every_non_empty_request_is_one_system_allocation() {
    let mut temp = MallocAllocator::new();
    let sizes = [100usize, 0, 4096, 7, 0, 65_536, 1];
    let mut expected_held = 0;
    let mut expected_system = 0;
    {
        let ctx = KernelContext::new(&temp);
        for (i, &size) in sizes.iter().enumerate() {
            ctx.allocate_temp(size, 1 << (i % 8)).unwrap();
            expected_held += size;
            expected_system += u64::from(size != 0);
            let s = temp.stats();
            assert_eq!(s.allocations, i as u64 + 1);
            assert_eq!(s.system_allocations, expected_system);
            assert_eq!(s.bytes_held, expected_held);
            assert_eq!(s.high_water, expected_held);
            assert_eq!(s.system_frees, 0);
        }
    }
    temp.reset();
    let s = temp.stats();
    assert_eq!(s.system_frees, expected_system);
    assert_eq!(
        (s.bytes_held, s.resets, s.high_water),
        (0, 1, expected_held)
    );
    assert_eq!(s.bytes_requested, expected_held as u64);
    assert_eq!((s.cache_hits, s.cache_misses), (0, 0));
}

#[test]
fn reset_frees_everything_every_time() {
    let mut temp = MallocAllocator::new();
    for window in 1..=4u64 {
        let ctx = KernelContext::new(&temp);
        let bufs: Vec<_> = (0..10)
            .map(|i| fill(ctx.allocate_temp(1000 * (i + 1), 64).unwrap(), i))
            .collect();
        for (tag, buf) in bufs.iter().enumerate() {
            check(buf, tag);
        }
        assert_eq!(temp.stats().bytes_held, 55_000);
        temp.reset();
        let s = temp.stats();
        assert_eq!(s.bytes_held, 0);
        assert_eq!(s.system_allocations, 10 * window);
        assert_eq!(s.system_frees, 10 * window);
        assert_eq!(s.resets, window);
    }
}

#[test]
fn reset_without_allocations_frees_nothing() {
    let mut temp = MallocAllocator::new();
    temp.reset();
    temp.reset();
    let s = temp.stats();
    assert_eq!((s.resets, s.system_frees, s.bytes_held), (2, 0, 0));
}

#[test]
fn malloc_allocator_is_send_and_sync() {
    fn shareable<T: Send + Sync>(_: &T) {}
    shareable(&MallocAllocator::new());
}
