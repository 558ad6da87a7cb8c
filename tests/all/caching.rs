//! `CachingAllocator` and `BlockCache`: reuse, convergence, budgets,
//! checkpoints, threads and cache sharing.

use std::alloc::Layout;
use std::sync::Arc;

use tempalloc::{BlockCache, CachingAllocator, CachingConfig, Error, KernelContext, TempAllocator};

use tempalloc::trace::{Decode, Mixed, Steady, Trace};

use crate::util::{addr, check, fill};

/// The release configuration: debug checks (canaries, poisoning, every
/// request through the locked path) are off, so these tests run the lock-free
/// fast path in every build. `debug_checks.rs` covers the checks.
fn fast() -> CachingConfig {
    CachingConfig::default().debug_checks(false)
}

fn fast_allocator() -> CachingAllocator {
    CachingAllocator::with_config(fast())
}

/// `n`, or `small` under Miri, which interprets every instruction (thread
/// spawns and pattern bytes are what make these tests slow there).
const fn scaled(n: usize, small: usize) -> usize {
    if cfg!(miri) { small } else { n }
}

/// Sizes a kernel window asks for, in order.
const WINDOW: [(usize, usize); 5] = [
    (4096, 64),
    (65536, 64),
    (262144, 64),
    (1024, 16),
    (512, 128),
];

/// Runs one window of `WINDOW` requests and returns their addresses.
fn run_window(temp: &mut CachingAllocator) -> Vec<usize> {
    let addrs = {
        let ctx = KernelContext::new(temp);
        WINDOW
            .iter()
            .map(|&(size, align)| addr(ctx.allocate_temp(size, align).unwrap()))
            .collect()
    };
    temp.reset();
    addrs
}

#[test]
fn reset_hands_back_the_same_addresses() {
    let mut temp = fast_allocator();
    run_window(&mut temp); // warm-up: learns the window's size
    let first = run_window(&mut temp);
    for _ in 0..10 {
        assert_eq!(run_window(&mut temp), first);
    }
}

#[test]
fn warm_up_converges_and_then_makes_no_system_calls() {
    let mut temp = fast_allocator();
    run_window(&mut temp);
    let warm = temp.stats();
    // The first window outgrew the 64 KiB first commit, so it grew again.
    assert!(warm.system_allocations > 1, "{warm}");
    let peak: usize = WINDOW.iter().map(|&(s, _)| s).sum();
    if !cfg!(miri) {
        // Grown in place: the first window already holds within the target.
        assert!(warm.bytes_held as f64 <= 1.25 * peak as f64, "{warm}");
    }
    // A heap-block region (Miri) takes one block sized to the peak here.
    run_window(&mut temp);
    let converged = temp.stats();
    for _ in 0..50 {
        run_window(&mut temp);
    }
    let after = temp.stats();
    assert_eq!(
        after.system_allocations, converged.system_allocations,
        "{after}"
    );
    assert_eq!(after.system_frees, converged.system_frees, "{after}");
    assert_eq!(after.high_water, peak);
    assert!(after.bytes_held as f64 <= 1.25 * peak as f64, "{after}");
}

#[test]
fn growing_windows_keep_converging() {
    // Like decode: every window a little larger than the last.
    let mut temp = fast_allocator();
    let mut grows = 0;
    let steps = scaled(400, 60);
    for step in 0..steps {
        let before = temp.stats().system_allocations;
        {
            let ctx = KernelContext::new(&temp);
            ctx.allocate_temp(100_000 + step * 1000, 64).unwrap();
            ctx.allocate_temp(50_000 + step * 500, 64).unwrap();
        }
        temp.reset();
        grows += usize::from(temp.stats().system_allocations > before);
        let s = temp.stats();
        // Held never passes 1.25x the peak window, once a window has ended.
        assert!(
            s.bytes_held as f64 <= 1.25 * s.high_water as f64 + 4096.0 * 2.0,
            "step {step}: {s}"
        );
    }
    // Size classes grow by 12.5%: the growth takes a few dozen steps, not one each.
    assert!(
        grows < 40.min(steps / 2),
        "{grows} of {steps} windows needed a system allocation"
    );
    // The same shape again: no system calls.
    let s = temp.stats();
    {
        let ctx = KernelContext::new(&temp);
        ctx.allocate_temp(100_000 + (steps - 1) * 1000, 64).unwrap();
        ctx.allocate_temp(50_000 + (steps - 1) * 500, 64).unwrap();
    }
    temp.reset();
    assert_eq!(temp.stats().system_allocations, s.system_allocations);
}

#[test]
fn smaller_windows_reuse_the_block() {
    let mut temp = fast_allocator();
    KernelContext::new(&temp)
        .allocate_temp(1 << 20, 64)
        .unwrap();
    temp.reset();
    let s = temp.stats();
    for size in [10, 1000, 100_000, 1 << 20] {
        KernelContext::new(&temp).allocate_temp(size, 4096).unwrap();
        temp.reset();
    }
    assert_eq!(temp.stats().system_allocations, s.system_allocations);
}

#[test]
fn budget_exceeded_leaves_earlier_allocations_intact() {
    let mut temp = CachingAllocator::with_config(fast().max_bytes(Some(1 << 20)));
    {
        let ctx = KernelContext::new(&temp);
        let a = fill(ctx.allocate_temp(30_000, 64).unwrap(), 1);
        let b = fill(ctx.allocate_temp(20_000, 8).unwrap(), 2);
        let err = ctx.allocate_temp(2 << 20, 64).unwrap_err();
        match err {
            Error::BudgetExceeded {
                requested,
                held,
                limit,
            } => {
                assert_eq!(limit, 1 << 20);
                assert!(held + requested > limit, "{err}");
            }
            other => panic!("expected BudgetExceeded, got {other}"),
        }
        check(a, 1);
        check(b, 2);
        // Still usable after the refusal.
        let c = fill(ctx.allocate_temp(1000, 64).unwrap(), 3);
        check(a, 1);
        check(c, 3);
    }
    temp.reset();
    assert!(temp.stats().bytes_held <= 1 << 20);
}

#[test]
fn checkpoints_nest_three_deep() {
    let mut temp = fast_allocator();
    let inference = fill(
        KernelContext::new(&temp).allocate_temp(10_000, 64).unwrap(),
        0,
    );
    let inference_ptr = inference.as_ptr();

    let cp1 = temp.checkpoint().unwrap();
    let a1 = addr(KernelContext::new(&temp).allocate_temp(3000, 64).unwrap());
    let cp2 = temp.checkpoint().unwrap();
    let a2 = addr(KernelContext::new(&temp).allocate_temp(5000, 64).unwrap());
    let cp3 = temp.checkpoint().unwrap();
    // Past the first commit: the region grows (a heap region moves on).
    let a3 = addr(
        KernelContext::new(&temp)
            .allocate_temp(200_000, 64)
            .unwrap(),
    );
    let deep = temp.stats();

    temp.rewind(cp3).unwrap();
    assert_eq!(temp.stats().bytes_live, 10_000 + 3000 + 5000);
    // The memory stays for the next kernel: the same request again takes
    // nothing from the system.
    let cp3 = temp.checkpoint().unwrap();
    let again = addr(
        KernelContext::new(&temp)
            .allocate_temp(200_000, 64)
            .unwrap(),
    );
    assert_eq!(again, a3);
    assert_eq!(temp.stats().system_allocations, deep.system_allocations);
    temp.rewind(cp3).unwrap();
    assert_eq!(
        addr(KernelContext::new(&temp).allocate_temp(5000, 64).unwrap()),
        a2 + 5056
    );
    temp.rewind(cp2).unwrap();
    assert_eq!(
        addr(KernelContext::new(&temp).allocate_temp(5000, 64).unwrap()),
        a2
    );
    temp.rewind(cp1).unwrap();
    assert_eq!(
        addr(KernelContext::new(&temp).allocate_temp(3000, 64).unwrap()),
        a1
    );
    assert_ne!(a3, a1);

    // The inference's scratch was never recycled: its bytes are intact.
    // SAFETY: the 10 000 bytes at `inference_ptr` were allocated before every
    // checkpoint, so no rewind recycled them, and no reset has happened.
    let inference = unsafe { std::slice::from_raw_parts(inference_ptr, 10_000) };
    check(inference, 0);
    let s = temp.stats();
    assert_eq!(s.high_water, 10_000 + 3000 + 5000 + 200_000);
    assert_eq!(s.allocations, 8);
}

#[test]
fn stale_checkpoints_are_refused() {
    let mut temp = fast_allocator();
    let cp = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(100, 8).unwrap();
    temp.reset();
    assert_eq!(
        temp.rewind(cp).unwrap_err(),
        Error::StaleCheckpoint {
            taken_at: 0,
            now: 1
        }
    );

    let other = fast_allocator();
    assert_eq!(
        temp.rewind(other.checkpoint().unwrap()).unwrap_err(),
        Error::ForeignCheckpoint
    );
    // A checkpoint inside a block an earlier rewind released: bad_input.rs.
}

#[test]
fn threads_write_and_verify_their_own_scratch() {
    for threads in 2..=scaled(4, 2) {
        let mut temp = fast_allocator();
        let buffers = scaled(50, 8);
        for round in 0..scaled(3, 2) {
            let ctx = KernelContext::new(&temp);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let ctx = &ctx;
                    s.spawn(move || {
                        let tag = |i: usize| round * 1000 + t * 100 + i;
                        let bufs: Vec<_> = (0..buffers)
                            .map(|i| fill(ctx.allocate_temp(100 + i * 37, 64).unwrap(), tag(i)))
                            .collect();
                        for (i, buf) in bufs.iter().enumerate() {
                            check(buf, tag(i));
                        }
                    });
                }
            });
            let s = temp.stats();
            assert_eq!(s.allocations as usize, (round + 1) * threads * buffers);
            temp.reset();
        }
    }
}

#[test]
fn allocators_share_one_block_cache() {
    let cache = Arc::new(BlockCache::with_idle_budget(16 << 20));
    let mut a = CachingAllocator::with_cache(Arc::clone(&cache), fast());
    let b = CachingAllocator::with_cache(Arc::clone(&cache), fast());
    let a_ptr = addr(KernelContext::new(&a).allocate_temp(200_000, 64).unwrap());
    a.release();
    assert!(cache.idle_bytes() >= 200_000);
    let b_ptr = addr(KernelContext::new(&b).allocate_temp(200_000, 64).unwrap());
    assert_eq!(a_ptr, b_ptr, "b got the block a gave back");
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.system_allocations), (1, 1, 1));
    assert_eq!(b.stats().cache_hits, 1);
    assert_eq!(b.stats().system_allocations, 0);
}

#[test]
fn cache_frees_least_recently_used_down_to_its_budget() {
    let cache = Arc::new(BlockCache::with_idle_budget(600 << 10));
    let sizes = [256 << 10, 128 << 10, 384 << 10];
    let mut allocators: Vec<_> = sizes
        .iter()
        .map(|&size| {
            let temp = CachingAllocator::with_cache(Arc::clone(&cache), fast());
            KernelContext::new(&temp).allocate_temp(size, 4096).unwrap();
            temp
        })
        .collect();
    assert_eq!(cache.stats().bytes_held, sizes.iter().sum::<usize>());
    // Given back in order: 256 KiB, 128 KiB (idle 384 KiB), then 384 KiB: over
    // budget, so the oldest (256 KiB) goes, leaving 128 + 384 = 512 KiB.
    for temp in &mut allocators {
        temp.release();
    }
    assert_eq!(cache.idle_bytes(), (128 + 384) << 10);
    assert_eq!(cache.stats().system_frees, 1);
    assert_eq!(
        cache.trim(400 << 10),
        128 << 10,
        "trim frees the least recently used first"
    );
    assert_eq!(cache.idle_bytes(), 384 << 10);
    assert_eq!(cache.release_all(), 384 << 10);
    let s = cache.stats();
    assert_eq!(
        (s.bytes_held, s.system_allocations, s.system_frees),
        (0, 3, 3)
    );
}

#[test]
fn hard_limit_frees_idle_blocks_before_refusing() {
    let cache = Arc::new(BlockCache::with_limits(8 << 20, Some(1 << 20)));
    let mut a = CachingAllocator::with_cache(Arc::clone(&cache), fast());
    KernelContext::new(&a).allocate_temp(600 << 10, 64).unwrap();
    a.release();
    assert!(cache.idle_bytes() >= 600 << 10); // a whole size class
    // 800 KiB does not fit beside the idle 600 KiB block: the idle one goes.
    let b = CachingAllocator::with_cache(Arc::clone(&cache), fast());
    KernelContext::new(&b).allocate_temp(800 << 10, 64).unwrap();
    assert_eq!(cache.idle_bytes(), 0);
    // Nothing idle is left to free, so this one is refused.
    let err = KernelContext::new(&a)
        .allocate_temp(800 << 10, 64)
        .unwrap_err();
    assert!(
        matches!(err, Error::BudgetExceeded { limit, .. } if limit == 1 << 20),
        "{err}"
    );
}

#[test]
fn dedicated_blocks_are_recycled_at_reset() {
    let size = scaled(3 << 20, 96 << 10);
    let config = fast()
        .dedicated_threshold(Some(size / 2))
        .idle_budget(64 << 20);
    let mut temp = CachingAllocator::with_config(config);
    for _ in 0..5 {
        {
            let ctx = KernelContext::new(&temp);
            let big = fill(ctx.allocate_temp(size, 4096).unwrap(), 7);
            let small = fill(ctx.allocate_temp(1000, 64).unwrap(), 8);
            assert_eq!(addr(big) % 4096, 0);
            check(big, 7);
            check(small, 8);
        }
        temp.reset();
    }
    let s = temp.stats();
    // One dedicated block and one bump block, each taken from the system once.
    assert_eq!(s.system_allocations, 2, "{s}");
    assert_eq!(s.cache_hits, 4, "{s}");
    assert_eq!(s.high_water, size + 1000);
}

#[test]
fn drop_gives_everything_back() {
    let cache = Arc::new(BlockCache::with_idle_budget(0));
    {
        let mut temp = CachingAllocator::with_cache(Arc::clone(&cache), fast());
        for size in [1000, 100_000, 3_000_000] {
            KernelContext::new(&temp).allocate_temp(size, 64).unwrap();
        }
        temp.reset();
        KernelContext::new(&temp).allocate_temp(10, 64).unwrap();
        assert!(cache.stats().bytes_held > 0);
    }
    let s = cache.stats();
    assert_eq!((s.bytes_held, s.idle_bytes), (0, 0), "{s}");
    assert!(s.system_frees > 0, "{s}");
}

#[test]
fn layouts_past_the_block_alignment_are_honoured() {
    let mut temp = fast_allocator();
    for align in [8192, 1 << 16, 1 << 21] {
        let p = temp
            .allocate(Layout::from_size_align(100, align).unwrap())
            .unwrap();
        assert_eq!(p.cast::<u8>().as_ptr() as usize % align, 0);
    }
    temp.reset();
}

/// The three reference workloads, small enough for a debug build (and
/// smaller under Miri), with their ARCHITECTURE.md shapes.
fn workloads() -> Vec<(&'static str, Trace)> {
    vec![
        (
            "steady",
            Steady {
                layers: scaled(32, 4),
                inferences: 3,
            }
            .generate(),
        ),
        (
            "decode",
            Decode {
                layers: scaled(2, 1),
                prompt: scaled(128, 8),
                steps: scaled(320, 6),
                ..Decode::default()
            }
            .generate(),
        ),
        (
            "mixed",
            Mixed {
                inferences: scaled(32, 2),
                ..Mixed::default()
            }
            .generate(),
        ),
    ]
}

#[test]
fn workloads_converge_to_zero_system_allocations_within_the_memory_target() {
    for (name, trace) in workloads() {
        let mut temp = fast_allocator();
        let warm_up = trace.replay(&mut temp).unwrap();
        assert!(
            warm_up.system_allocations > 0,
            "{name}: the warm-up takes memory"
        );
        if !cfg!(miri) {
            // The region grows in place: within the target from the first
            // window on, not only once converged.
            assert!(
                warm_up.held_over_peak() <= 1.25,
                "{name}, warm-up: {warm_up}"
            );
        }
        for pass in 0..2 {
            let report = trace.replay(&mut temp).unwrap();
            assert_eq!(
                report.system_allocations, 0,
                "{name}, pass {pass}: {report}"
            );
            let s = temp.stats();
            assert!(report.held_over_peak() <= 1.25, "{name}: {report}");
            assert_eq!(s.high_water, trace.peak_live_bytes(), "{name}");
        }
    }
}

#[test]
fn prefault_and_huge_page_blocks_serve_requests() {
    let config = fast()
        .prefault(true)
        .huge_pages(true)
        .min_block_size(4 << 20);
    let mut temp = CachingAllocator::with_config(config);
    for round in 0..scaled(3, 2) {
        {
            let ctx = KernelContext::new(&temp);
            let big = fill(ctx.allocate_temp(3 << 20, 4096).unwrap(), round);
            check(big, round);
        }
        temp.reset();
    }
    let s = temp.stats();
    assert_eq!(s.system_allocations, 1, "{s}");
    assert!(s.bytes_held >= 4 << 20, "{s}");
}
