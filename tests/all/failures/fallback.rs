//! Where no address space can be reserved (`CachingConfig::reserve(None)`,
//! a reservation the system refuses, Miri, `ulimit -v`,
//! `TEMPALLOC_RESERVE=off`), regions are heap blocks: every test here shows,
//! through `CacheStats::heap_blocks` and `reservations`, that the fallback
//! happened, and that it keeps the promises: every request served, aligned
//! and disjoint, and one block per region sized to its peak once the
//! windows repeat, in frames too.

use tempalloc::testing::SystemCall;
use tempalloc::{CacheStats, CachingAllocator, KernelContext, TempAllocator};

use crate::scenarios::{
    assert_disjoint, converges, fast, fresh_threads, mapped, page, range, scaled,
};
use crate::util::{Refusing, check, fill};

/// Windows of two buffers, 100 000 and 300 000 bytes (less under Miri),
/// patterned and checked, with a reset after each; returns the cache's
/// counters before the last window and after it.
fn windows(temp: &mut CachingAllocator) -> (CacheStats, CacheStats) {
    let (a, b) = (scaled(100_000, 10_000), scaled(300_000, 30_000));
    let mut before = temp.cache().stats();
    for _ in 0..4 {
        before = temp.cache().stats();
        let ctx = KernelContext::new(temp);
        let x = fill(ctx.allocate_temp(a, 64).unwrap(), 1);
        let y = fill(ctx.allocate_temp(b, 4096).unwrap(), 2);
        assert_eq!(y.as_ptr() as usize % 4096, 0);
        check(x, 1);
        check(y, 2);
        temp.reset();
    }
    (before, temp.cache().stats())
}

/// Panics unless the memory behind `temp` was heap blocks only, and the
/// last window (`before` to `after`) took no new one.
fn assert_heap_blocks_only(what: &str, before: CacheStats, after: CacheStats) {
    assert_eq!(after.reservations, 0, "{what}: {after}");
    assert!(after.heap_blocks > 0, "{what}: {after}");
    assert_eq!(
        after.heap_blocks, before.heap_blocks,
        "{what}, last window: {after}"
    );
    assert_eq!(
        after.system_allocations, before.system_allocations,
        "{what}, last window: {after}"
    );
}

#[test]
fn by_default_regions_grow_in_reservations_where_there_are_any() {
    // The contrast that makes the tests below mean something; where
    // nothing is reserved, the default is the fallback itself.
    let (before, after) = windows(&mut CachingAllocator::with_config(fast()));
    if mapped() {
        assert!(after.reservations > 0, "{after}");
        assert_eq!(after.heap_blocks, 0, "{after}");
    } else {
        assert_heap_blocks_only("no reservations here", before, after);
    }
}

#[test]
fn tempalloc_reserve_off_refuses_every_reservation() {
    // CI's `fallback` step sets it for the whole OS test list; a run that
    // ignored it would test the mapped regions twice and the fallback never.
    if std::env::var_os("TEMPALLOC_RESERVE").is_some_and(|v| v == "off") {
        assert!(!mapped());
        let (before, after) = windows(&mut CachingAllocator::with_config(fast()));
        assert_heap_blocks_only("TEMPALLOC_RESERVE=off", before, after);
    }
}

#[test]
fn without_reservations_regions_are_heap_blocks() {
    let (before, after) = windows(&mut CachingAllocator::with_config(fast().reserve(None)));
    assert_heap_blocks_only("reserve(None)", before, after);
}

#[test]
fn a_reservation_the_system_refuses_falls_back_to_heap_blocks() {
    // Every size the reservation halves down to is refused too.
    let _refusing = Refusing::every(SystemCall::Reserve);
    let mut temp = CachingAllocator::with_config(fast());
    let (before, after) = windows(&mut temp);
    assert_heap_blocks_only("refused reservation", before, after);
    let s = temp.stats();
    let peak = scaled(400_000, 40_000);
    assert!(s.bytes_held >= peak, "{s}");
    // One block sized to the peak (and the 4096-aligned buffer's padding)
    // serves the window.
    assert!(s.bytes_held <= peak + peak / 8 + 4096 + page(), "{s}");
}

#[test]
fn a_commit_the_system_refuses_is_served_by_a_heap_block() {
    let temp = CachingAllocator::with_config(fast());
    let _refusing = Refusing::every(SystemCall::Commit);
    let a = fill(
        KernelContext::new(&temp)
            .allocate_temp(100_000, 64)
            .unwrap(),
        1,
    );
    check(a, 1);
    let s = temp.cache().stats();
    assert_eq!(s.heap_blocks, 1, "{s}");
    // Without reservations there is no commit to refuse: the heap block
    // served at once.
    assert_eq!(s.refusals >= 1, mapped(), "{s}");
}

/// The main thread outgrows its heap block (8 KiB, then 60 KiB in a 64 KiB
/// block), and, in `with_worker`, a worker allocates 64 KiB after it.
fn outgrowing(temp: &CachingAllocator, with_worker: bool) {
    let k = 1 << 10;
    let ctx = KernelContext::new(temp);
    fill(ctx.allocate_temp(8 * k, 64).unwrap(), 1);
    fill(ctx.allocate_temp(60 * k, 64).unwrap(), 2);
    if with_worker {
        std::thread::scope(|s| {
            let worker = s.spawn(|| {
                fill(
                    KernelContext::new(temp).allocate_temp(64 * k, 64).unwrap(),
                    3,
                )
                .len()
            });
            assert_eq!(worker.join().unwrap(), 64 * k);
        });
    }
}

#[test]
fn heap_blocks_converge_when_a_worker_allocates_after_the_thread_that_outgrew() {
    // Once the windows repeat, no heap block is taken any more: the worker
    // does not take the block the main thread needs, nor the reverse.
    let mut temp = CachingAllocator::with_config(fast().reserve(None).min_block_size(64 << 10));
    let mut blocks = Vec::new();
    converges(&mut temp, |temp| {
        outgrowing(temp, true);
        blocks.push(temp.cache().stats().heap_blocks);
    });
    assert!(
        blocks[1..].iter().all(|&n| n == blocks[1]),
        "heap blocks after each window: {blocks:?}"
    );
    assert_eq!(temp.cache().stats().reservations, 0);
}

#[test]
fn a_heap_region_that_outgrew_its_block_converges_to_one_block_sized_to_its_peak() {
    // Its second block was doubled (128 KiB) to chain few blocks in the
    // window that outgrew; what it keeps for the windows after must be one
    // block for its peak (8 KiB page-aligned, then 60 KiB), within a size
    // class, as the docs promise, not whichever larger block it had.
    let mut temp = CachingAllocator::with_config(fast().reserve(None).min_block_size(64 << 10));
    converges(&mut temp, |temp| outgrowing(temp, false));
    let s = temp.stats();
    let peak = (8 << 10).max(page()) + (60 << 10);
    assert!(s.bytes_held <= peak + peak / 8 + page(), "{s}");
}

// Under Miri, which reserves nothing, also the one run of
// memory::footprint::workloads_converge_to_zero_system_allocations_within_the_memory_target:
// with `reserve(Some(..))` every reservation falls back to the same heap
// blocks, with the same stats at every pass (checked under `cfg(miri)`).
#[test]
fn workloads_on_heap_blocks_converge_within_the_memory_target() {
    crate::memory::footprint::workloads_converge(fast().reserve(None));
}

#[test]
fn heap_blocks_converge_when_one_block_needs_more_padding_than_a_chain() {
    // Across two blocks the 64-aligned request starts a block and needs no
    // padding; in one block it needs some. The peak must count it, or a
    // block "holds the peak" that every window outgrows.
    let k = 1 << 10;
    let mut temp = CachingAllocator::with_config(fast().reserve(None).min_block_size(16 * k));
    converges(&mut temp, |temp| {
        let ctx = KernelContext::new(temp);
        fill(ctx.allocate_temp(100, 8).unwrap(), 1);
        fill(ctx.allocate_temp(64 * k - 100, 64).unwrap(), 2);
    });
    assert!(temp.cache().stats().heap_blocks > 0);
}

#[test]
fn heap_blocks_in_frames_converge_with_fresh_threads_per_kernel() {
    // Frame scratch, then kernels that outgrow the frame's block on the
    // calling thread and on fresh threads: after the first inferences no
    // heap block is taken, and what is held is one block per region.
    let k = 1 << 10;
    let (threads, tile) = (scaled(3, 2), scaled(32, 8) * k);
    let config = fast().reserve(None).min_block_size(16 * k);
    let mut temp = CachingAllocator::with_config(config);
    let mut blocks = Vec::new();
    for _inference in 0..scaled(6, 4) {
        let r: Result<(), tempalloc::Error> = temp.frame(|inf| {
            let act = fill(inf.allocate_temp(8 * k, 64)?, 100);
            for kernel in 0..3 {
                inf.kernel(|ctx| {
                    let mine = fill(ctx.allocate_temp(tile, 64)?, kernel);
                    assert_disjoint(fresh_threads_in(ctx, threads, tile));
                    check(mine, kernel);
                    Ok(())
                })?;
                check(act, 100);
            }
            Ok(())
        });
        assert_eq!(r, Ok(()));
        blocks.push(temp.cache().stats().heap_blocks);
    }
    assert!(
        blocks[2..].iter().all(|&n| n == blocks[2]),
        "heap blocks taken after each inference: {blocks:?}"
    );
    let s = temp.stats();
    let one_block = |peak: usize| peak + peak / 8 + page();
    let most = one_block(8 * k + tile + 64) + threads * one_block(tile + threads);
    assert!(s.bytes_held <= most, "{s}");
}

/// `threads` fresh threads each take a buffer of about `tile` bytes through
/// a kernel's context, pattern it and check it; returns the buffers' ranges.
fn fresh_threads_in(ctx: &KernelContext<'_>, threads: usize, tile: usize) -> Vec<(usize, usize)> {
    fresh_threads(threads, |t, _| {
        let buf = fill(ctx.allocate_temp(tile + t, 64).unwrap(), t);
        check(buf, t);
        range(buf)
    })
}

#[test]
fn mapped_and_heap_regions_honour_alignments_past_a_page() {
    for config in [fast(), fast().reserve(None)] {
        let mut temp = CachingAllocator::with_config(config);
        let ctx = KernelContext::new(&temp);
        let mut ranges = Vec::new();
        for align in [8192, 1 << 16, 1 << 21] {
            let buf = fill(ctx.allocate_temp(100, align).unwrap(), align);
            assert_eq!(buf.as_ptr() as usize % align, 0, "{:?}", config.reserve);
            ranges.push(range(buf));
        }
        assert_disjoint(ranges);
        temp.reset();
    }
}
