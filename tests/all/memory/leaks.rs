//! Leaks: every allocator gives back all it took, counted two ways — by its
//! own `Stats` and by the test binary's counting global allocator
//! (`counting.rs`).

use std::sync::Arc;

use tempalloc::{
    BlockCache, BumpAllocator, CachingAllocator, CachingConfig, KernelContext, MallocAllocator,
    TempAllocator,
};

use crate::counting::counts;
use crate::util::{ALLOCATORS, FIXED, check, fill};

/// Runs `f` and checks that it freed, on this thread, every allocation it
/// made. Returns the allocations it made.
fn balanced(what: &str, f: impl FnOnce()) -> u64 {
    let before = counts();
    f();
    let after = counts();
    let allocs = after.allocs - before.allocs;
    let frees = after.frees - before.frees;
    assert_eq!(allocs, frees, "{what}: {allocs} allocations, {frees} frees");
    assert_eq!(
        after.bytes_allocated - before.bytes_allocated,
        after.bytes_freed - before.bytes_freed,
        "{what}: bytes"
    );
    allocs
}

/// A few windows of patterned scratch, with resets in between.
fn exercise(temp: &mut dyn TempAllocator) {
    let sizes = if cfg!(miri) {
        [0, 10, 200, 1000]
    } else {
        [0, 100, 70_000, 300_000]
    };
    for window in 0..3 {
        {
            let ctx = KernelContext::new(temp);
            let bufs: Vec<&mut [u8]> = sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| fill(ctx.allocate_temp(size * (window + 1), 64).unwrap(), i))
                .collect();
            bufs.iter().enumerate().for_each(|(i, b)| check(b, i));
            // Under Miri, which interprets each push, 100: still several
            // growths.
            let mut v = allocator_api2::vec::Vec::new_in(&ctx);
            v.extend(0..if cfg!(miri) { 100 } else { 1000u32 });
        }
        temp.reset();
    }
}

#[test]
fn every_allocator_frees_everything_on_drop() {
    for (name, make) in ALLOCATORS {
        let mut system_allocations = 0;
        let counted = balanced(name, || {
            let mut temp = make();
            exercise(&mut *temp);
            system_allocations = temp.stats().system_allocations;
        });
        assert!(
            counted >= system_allocations,
            "{name}: {counted} counted, {system_allocations} in Stats"
        );
        // Only a fixed allocator serves everything without the system.
        assert_eq!(system_allocations > 0, *name != FIXED, "{name}");
    }
}

#[test]
fn stats_balance_after_reset_or_release() {
    // MallocAllocator frees everything at reset.
    balanced("MallocAllocator", || {
        let mut temp = MallocAllocator::new();
        exercise(&mut temp);
        let s = temp.stats();
        assert_eq!(
            (s.system_allocations, s.bytes_held),
            (s.system_frees, 0),
            "{s}"
        );
    });
    // BumpAllocator keeps its newest chunk.
    balanced("BumpAllocator", || {
        let mut temp = BumpAllocator::new();
        exercise(&mut temp);
        let s = temp.stats();
        assert_eq!(s.system_allocations - s.system_frees, 1, "{s}");
    });
    // CachingAllocator gives everything back on release.
    for debug_checks in [false, true] {
        balanced("CachingAllocator", || {
            let mut temp =
                CachingAllocator::with_config(CachingConfig::default().debug_checks(debug_checks));
            exercise(&mut temp);
            assert!(temp.stats().system_allocations > 0);
            temp.release();
            let s = temp.stats();
            assert_eq!(s.bytes_held, 0, "{s}");
            assert!(s.system_frees > 0, "{s}");
        });
    }
}

#[test]
fn a_shared_cache_frees_its_idle_blocks_when_dropped() {
    balanced("shared BlockCache", || {
        let cache = Arc::new(BlockCache::with_idle_budget(64 << 20));
        let config = CachingConfig::default().dedicated_threshold(Some(200_000));
        for _ in 0..2 {
            let mut a = CachingAllocator::with_cache(Arc::clone(&cache), config);
            let mut b = CachingAllocator::with_cache(Arc::clone(&cache), config);
            exercise(&mut a);
            exercise(&mut b);
        }
        // The allocators are gone; their blocks sit idle in the cache.
        let s = cache.stats();
        assert_eq!(s.bytes_held, cache.idle_bytes());
        assert!(s.system_allocations > s.system_frees, "{s}");
        drop(cache);
    });
}
