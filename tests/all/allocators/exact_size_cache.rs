//! The model of ExecuTorch's `CPUCachingAllocator` the benchmarks compare
//! against (`examples/common/exact_size_cache.rs`): it must behave like it.

#[path = "../../../examples/common/exact_size_cache.rs"]
mod model;

use std::alloc::Layout;

use model::{DEFAULT_CAP, ExactSizeCache};
use tempalloc::trace::Trace;
use tempalloc::{Error, Rewind, TempAllocator};

use crate::util::refuses_foreign_and_stale;

fn alloc(temp: &ExactSizeCache, size: usize, align: usize) -> *mut u8 {
    let p = temp
        .allocate(Layout::from_size_align(size, align).unwrap())
        .unwrap();
    assert_eq!(p.len(), size);
    let ptr = p.cast::<u8>().as_ptr();
    assert_eq!(ptr as usize % align.max(64), 0, "{size} B at {align}");
    // The whole buffer is writable.
    // SAFETY: the allocator handed out `size` bytes at `ptr`.
    unsafe { ptr.write_bytes(0xAB, size) };
    ptr
}

#[test]
fn same_size_comes_back_at_the_same_address_after_reset() {
    let mut temp = ExactSizeCache::new();
    assert_eq!(temp.cap(), DEFAULT_CAP);
    let first = alloc(&temp, 1000, 64) as usize;
    let second = alloc(&temp, 1000, 64) as usize;
    assert_ne!(first, second);
    temp.reset();
    let again = [
        alloc(&temp, 1000, 64) as usize,
        alloc(&temp, 1000, 64) as usize,
    ];
    assert!(
        again.contains(&first) && again.contains(&second),
        "{again:x?} vs {first:x} {second:x}"
    );
    let s = temp.stats();
    assert_eq!(
        (s.system_allocations, s.cache_hits, s.cache_misses),
        (2, 2, 2)
    );
    // Held: two blocks of 1000 + 63 bytes.
    assert_eq!(s.bytes_held, 2 * 1063);
}

#[test]
fn no_reuse_across_sizes() {
    let mut temp = ExactSizeCache::new();
    let big = alloc(&temp, 4096, 64);
    temp.reset();
    // Smaller, larger, and the same size at another alignment (which grows
    // the block by a different amount): all misses.
    for (size, align) in [(4095, 64), (1000, 64), (4097, 64), (4096, 128)] {
        let p = alloc(&temp, size, align);
        assert_ne!(p, big, "{size} B at {align} reused the 4096 B block");
    }
    let s = temp.stats();
    assert_eq!(
        (s.cache_hits, s.cache_misses, s.system_allocations),
        (0, 5, 5)
    );
    assert_eq!(s.bytes_held, 4159 + 4158 + 1063 + 4160 + 4223);
    temp.reset();
    // After the reset every block is cached, nothing is freed.
    assert_eq!(temp.stats().system_frees, 0);
}

#[test]
fn small_alignments_are_raised_to_64() {
    let temp = ExactSizeCache::new();
    for align in [1, 2, 8, 16, 32] {
        let p = alloc(&temp, 24, align);
        assert_eq!(p as usize % 64, 0);
    }
    // Every block is 24 + 63 bytes whatever was asked.
    assert_eq!(temp.stats().bytes_held, 5 * 87);
    let p = alloc(&temp, 10, 4096);
    assert_eq!(p as usize % 4096, 0);
}

#[test]
fn above_the_cap_reset_frees_everything() {
    let cap = 100_000u32;
    let mut temp = ExactSizeCache::with_cap(cap);
    // Under the cap: a reset caches.
    alloc(&temp, 40_000, 64);
    temp.reset();
    alloc(&temp, 40_000, 64);
    assert_eq!(temp.stats().cache_hits, 1);
    // A miss takes the total past the cap (allowed), and the next reset frees
    // cached and live blocks alike and starts from zero.
    alloc(&temp, 30_000, 64);
    alloc(&temp, 35_000, 64);
    assert!(temp.stats().bytes_held > cap as usize);
    temp.reset();
    let s = temp.stats();
    assert_eq!((s.bytes_held, s.system_frees), (0, 3));
    // So the same size is a miss again: the cliff.
    alloc(&temp, 40_000, 64);
    let s = temp.stats();
    assert_eq!(
        (s.cache_misses, s.system_allocations, s.bytes_held),
        (4, 4, 40_063)
    );
}

#[test]
fn exactly_at_the_cap_still_caches() {
    let mut temp = ExactSizeCache::with_cap(1063);
    alloc(&temp, 1000, 64);
    temp.reset();
    assert_eq!(temp.stats().system_frees, 0);
    alloc(&temp, 1000, 64);
    assert_eq!(temp.stats().cache_hits, 1);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "asks the system for isize::MAX / 2 bytes, which Miri rejects"
)]
fn requests_that_cannot_be_a_block_are_errors() {
    let temp = ExactSizeCache::new();
    // The largest layout at 64: growing it by 63 leaves no valid block layout.
    let largest = Layout::from_size_align(isize::MAX as usize + 1 - 64, 64).unwrap();
    assert!(matches!(
        temp.allocate(largest),
        Err(tempalloc::Error::SizeOverflow { .. })
    ));
    // A valid block the system cannot provide.
    let huge = Layout::from_size_align(isize::MAX as usize / 2, 64).unwrap();
    assert!(matches!(
        temp.allocate(huge),
        Err(tempalloc::Error::OutOfMemory { .. })
    ));
    assert_eq!(temp.stats().bytes_held, 0);
}

#[test]
fn replayed_decode_holds_every_size_it_ever_saw() {
    // Sizes grow every step, so the cache keeps one block per size.
    // Half the steps under Miri: the sizes still grow every step.
    let steps = if cfg!(miri) { 25 } else { 50 };
    let trace = tempalloc::trace::Decode {
        layers: 2,
        steps,
        ..Default::default()
    }
    .generate();
    let mut temp = ExactSizeCache::with_cap(u32::MAX);
    let report = trace.replay(&mut temp).unwrap();
    assert!(report.held_over_peak() > 5.0, "{report}");
    // Each SDPA size was a miss once, then a hit for the next layer.
    let s = temp.stats();
    assert!(s.cache_hits > 0 && s.cache_misses > steps as u64, "{s}");
}

#[test]
fn empty_trace_replays() {
    let mut temp = ExactSizeCache::new();
    let report = Trace::new().replay(&mut temp).unwrap();
    assert_eq!(report.requests, 0);
}

#[test]
fn a_rewind_recycles_the_blocks_served_after_the_checkpoint() {
    let mut temp = ExactSizeCache::new();
    let kept = alloc(&temp, 1000, 64);
    let cp = temp.checkpoint().unwrap();
    let after = [alloc(&temp, 2000, 64), alloc(&temp, 1000, 64)];
    temp.rewind(cp).unwrap();
    assert_eq!(temp.stats().system_frees, 0, "under the cap: cached");
    // The blocks come back for the same sizes; the kept one is still live.
    assert_eq!(alloc(&temp, 2000, 64), after[0]);
    assert_eq!(alloc(&temp, 1000, 64), after[1]);
    assert_ne!(alloc(&temp, 1000, 64), kept);
    let s = temp.stats();
    assert_eq!((s.cache_hits, s.cache_misses), (2, 4));
}

#[test]
fn over_the_cap_a_rewind_frees_what_is_not_live() {
    let mut temp = ExactSizeCache::with_cap(4096);
    let kept = temp.checkpoint().unwrap();
    alloc(&temp, 100, 64);
    temp.rewind(kept).unwrap();
    // Cached: 163 B; live: 1063 B; then 5063 B more take it past the cap.
    let live = alloc(&temp, 1000, 64);
    let cp = temp.checkpoint().unwrap();
    alloc(&temp, 5000, 64);
    temp.rewind(cp).unwrap();
    let s = temp.stats();
    assert_eq!((s.system_frees, s.bytes_held), (2, 1063));
    // SAFETY: the block is still live: the rewind freed only later blocks.
    let byte = unsafe { live.read() };
    assert_eq!(byte, 0xAB);
    temp.reset();
    assert_eq!(temp.stats().system_frees, 2, "under the cap again: cached");
}

#[test]
fn stale_and_foreign_checkpoints_change_nothing() {
    let mut temp = ExactSizeCache::new();
    alloc(&temp, 1000, 64);
    refuses_foreign_and_stale(&mut temp, &ExactSizeCache::new());
    alloc(&temp, 1000, 64);
    assert_eq!(temp.stats().cache_hits, 1);
}

#[test]
fn frames_run_on_the_model() {
    let mut temp = ExactSizeCache::new();
    for _ in 0..2 {
        let sum = temp.frame(|inf| {
            let act = inf.scratch_fill(100, 1u32)?;
            let mut sum = 0;
            for _ in 0..3 {
                sum += inf.kernel(|ctx| Ok(ctx.scratch_copy(act)?.iter().sum::<u32>()))?;
            }
            Ok::<_, Error>(sum)
        });
        assert_eq!(sum, Ok(300));
    }
    // One block for the activations and one the three kernels share, each
    // served again in the second inference.
    let s = temp.stats();
    assert_eq!((s.cache_misses, s.cache_hits), (2, 6));
}
