//! Checkpoints of a `CachingAllocator`: they nest, every broken rule is an
//! error that names it and changes nothing, and the per-kernel patterns the
//! docs show take no memory after warm-up, with fresh threads per kernel
//! too. A rewind keeps what was taken before its checkpoint, whichever
//! thread took it.

use tempalloc::{CachingAllocator, Error, KernelContext, TempAllocator};

use crate::scenarios::{all_at_once, assert_disjoint, fast, scaled};
use crate::util::{addr, check, fill};

fn fast_allocator() -> CachingAllocator {
    CachingAllocator::with_config(fast())
}

#[test]
fn checkpoints_nest_and_each_rewind_returns_to_its_own_mark() {
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
    // Past what the region holds: it grows (a heap region moves on).
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
    // 5000 bytes rounded up to the next 64-byte boundary.
    assert_eq!(
        addr(KernelContext::new(&temp).allocate_temp(5000, 64).unwrap()),
        a2 + 5000_usize.next_multiple_of(64)
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
fn checkpoints_nest_deeper_than_the_records_made_room_for() {
    // The books have room for 8 open checkpoints from the start; deeper
    // ones make room (fallibly: `checkpoint` returns a `Result`). Under
    // Miri 17 levels, not 20: still past 8 and 16 open checkpoints (the
    // books grow twice), with 136 buffer checks in the rewinds, not 190.
    let depth = scaled(20, 17);
    for config in [fast(), fast().debug_checks(true)] {
        let mut temp = CachingAllocator::with_config(config);
        let mut open = Vec::new();
        let mut bufs = Vec::new();
        for level in 0..depth {
            open.push(temp.checkpoint().unwrap());
            let buf = fill(
                KernelContext::new(&temp)
                    .allocate_temp(100 + level, 64)
                    .unwrap(),
                level,
            );
            bufs.push((buf.as_ptr(), buf.len()));
        }
        assert_disjoint(bufs.iter().map(|&(at, len)| (at as usize, len)).collect());
        // Innermost first: each rewind recycles one level's scratch.
        for level in (0..depth).rev() {
            temp.rewind(open.pop().unwrap()).unwrap();
            let live: usize = (0..level).map(|l| 100 + l).sum();
            assert_eq!(temp.stats().bytes_live, live, "level {level}");
            // SAFETY: the outer levels' buffers were taken before this
            // level's checkpoint and are not recycled by its rewind.
            for (l, &(at, len)) in bufs.iter().enumerate().take(level) {
                check(unsafe { std::slice::from_raw_parts(at, len) }, l);
            }
        }
        assert_eq!(temp.stats().canary_violations, 0);
    }
}

#[test]
fn every_checkpoint_rule_is_an_error_that_names_it() {
    let mut temp = fast_allocator();
    let other = fast_allocator();
    let kept = fill(
        KernelContext::new(&temp).allocate_temp(1000, 64).unwrap(),
        1,
    )
    .as_ptr();

    // Another allocator's.
    let err = temp.rewind(other.checkpoint().unwrap()).unwrap_err();
    assert_eq!(err, Error::ForeignCheckpoint);
    assert!(err.to_string().contains("another allocator"), "{err}");

    // Outer rewound first: the inner one is closed, whatever it marked.
    let outer = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(100, 8).unwrap();
    let inner = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(200, 8).unwrap();
    temp.rewind(outer).unwrap();
    let err = temp.rewind(inner).unwrap_err();
    assert_eq!(err, Error::CheckpointClosed { depth: 1, open: 0 });

    // A later checkpoint at the same depth does not revive the closed one.
    let again = temp.checkpoint().unwrap();
    let stale_twin = {
        let cp = temp.checkpoint().unwrap();
        temp.rewind(cp).unwrap();
        temp.checkpoint().unwrap()
    };
    temp.rewind(again).unwrap();
    assert!(matches!(
        temp.rewind(stale_twin),
        Err(Error::CheckpointClosed { depth: 1, open: 0 })
    ));

    // Taken before a reset.
    // SAFETY: 1000 bytes taken before every checkpoint, not reset yet.
    check(unsafe { std::slice::from_raw_parts(kept, 1000) }, 1);
    let cp = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(100, 8).unwrap();
    temp.reset();
    let err = temp.rewind(cp).unwrap_err();
    assert_eq!(
        err,
        Error::StaleCheckpoint {
            taken_at: 0,
            now: 1
        }
    );
    assert!(err.to_string().contains("reset"), "{err}");

    // Nothing changed: checkpoints still work, with debug checks clean.
    let cp = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(100, 8).unwrap();
    temp.rewind(cp).unwrap();
    assert_eq!(temp.stats().bytes_live, 0);
    assert_eq!(temp.stats().canary_violations, 0);
}

#[test]
fn debug_checks_see_no_false_canary_damage_after_out_of_order_rewinds() {
    let mut temp = CachingAllocator::with_config(fast().debug_checks(true));
    let outer = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(300, 8).unwrap();
    let inner = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(300, 8).unwrap();
    temp.rewind(outer).unwrap();
    assert!(temp.rewind(inner).is_err());
    KernelContext::new(&temp).allocate_temp(700, 8).unwrap();
    assert_eq!(temp.check(), Ok(()));
    temp.reset();
    assert_eq!(temp.stats().canary_violations, 0);
}

#[test]
fn live_bytes_and_the_window_high_water_follow_each_window() {
    let mut temp = fast_allocator();
    KernelContext::new(&temp).allocate_temp(3000, 8).unwrap();
    let cp = temp.checkpoint().unwrap();
    KernelContext::new(&temp).allocate_temp(5000, 8).unwrap();
    temp.rewind(cp).unwrap();
    let s = temp.stats();
    assert_eq!((s.bytes_live, s.window_high_water), (3000, 8000));
    temp.reset();
    let s = temp.stats();
    assert_eq!(
        (s.bytes_live, s.window_high_water, s.high_water),
        (0, 8000, 8000)
    );
    KernelContext::new(&temp).allocate_temp(100, 8).unwrap();
    temp.reset();
    let s = temp.stats();
    assert_eq!((s.window_high_water, s.high_water), (100, 8000));
}

#[test]
fn the_per_kernel_pattern_takes_memory_once() {
    // The pattern from the docs, verbatim: debug checks as the build has them.
    let mut temp = CachingAllocator::new();
    for _ in 0..3 {
        for _ in 0..10 {
            let cp = temp.checkpoint().unwrap();
            KernelContext::new(&temp).scratch::<u8>(1000).unwrap();
            temp.rewind(cp).unwrap();
        }
        temp.reset();
    }
    assert_eq!(temp.stats().system_allocations, 1);
}

#[test]
fn the_per_kernel_pattern_with_fresh_threads_per_kernel_takes_no_memory_after_warm_up() {
    let threads = 4;
    for config in [fast(), fast().debug_checks(true)] {
        let mut temp = CachingAllocator::with_config(config);
        let inference_scratch = fill(
            KernelContext::new(&temp).allocate_temp(5000, 64).unwrap(),
            9,
        )
        .as_ptr();
        let mut after_first = None;
        for inference in 0..scaled(3, 2) {
            for _kernel in 0..scaled(10, 2) {
                let cp = temp.checkpoint().unwrap();
                all_at_once(&temp, threads, 2, 1000);
                temp.rewind(cp).unwrap();
            }
            let s = temp.stats();
            let after = *after_first.get_or_insert(s.system_allocations);
            assert_eq!(s.system_allocations, after, "inference {inference}: {s}");
            assert_eq!(s.bytes_live, 5000, "{s}");
        }
        // SAFETY: 5000 bytes taken before every checkpoint, not reset since.
        check(
            unsafe { std::slice::from_raw_parts(inference_scratch, 5000) },
            9,
        );
        temp.reset();
    }
}

#[test]
fn frames_with_fresh_threads_per_kernel_take_no_memory_after_warm_up() {
    // `frame` and `kernel` (a checkpoint and a rewind per kernel) with the
    // kernel's work split over fresh scoped threads, as `thread::scope`
    // runtimes do; kernels of different sizes (the same for each of a
    // kernel's threads, whichever region each leases).
    let (threads, unit) = (scaled(4, 2), scaled(64 << 10, 4 << 10));
    for config in [fast(), fast().reserve(None)] {
        let mut temp = CachingAllocator::with_config(config);
        let mut warm = None;
        for inference in 0..scaled(5, 3) {
            let r: Result<(), Error> = temp.frame(|inf| {
                let act = fill(inf.allocate_temp(unit, 64)?, 1000);
                for kernel in 0..4 {
                    inf.kernel(|ctx| {
                        std::thread::scope(|s| {
                            for t in 0..threads {
                                s.spawn(move || {
                                    let size = unit * (1 + kernel % 3);
                                    check(fill(ctx.allocate_temp(size, 64).unwrap(), t), t);
                                });
                            }
                        });
                        Ok(())
                    })?;
                    check(act, 1000);
                }
                Ok(())
            });
            assert_eq!(r, Ok(()));
            let s = temp.stats();
            // The first inference takes the memory; a heap region may move
            // to a block sized to its peak at the reset that ends it.
            if inference >= 1 {
                let after = *warm.get_or_insert(s.system_allocations);
                assert_eq!(
                    s.system_allocations, after,
                    "{:?}, inference {inference}: {s}",
                    config.reserve
                );
            }
        }
    }
}

#[test]
fn scratch_a_worker_took_before_a_checkpoint_outlives_the_rewind() {
    // A worker takes inference-long scratch and exits; kernels of fresh
    // threads come and go under checkpoints. Its region had a mark at every
    // checkpoint, so it stays leased through the rewinds: no later thread
    // bumps over its scratch.
    let size = scaled(256 << 10, 8 << 10);
    let mut temp = fast_allocator();
    let kept = std::thread::scope(|s| {
        s.spawn(|| {
            fill(
                KernelContext::new(&temp).allocate_temp(size, 64).unwrap(),
                55,
            )
        })
        .join()
        .unwrap()
    });
    let (at, len) = (kept.as_ptr(), kept.len());
    for kernel in 0..scaled(6, 3) {
        let cp = temp.checkpoint().unwrap();
        let mut ranges = all_at_once(&temp, 3, 2, size / 2);
        ranges.push((at as usize, len));
        assert_disjoint(ranges);
        temp.rewind(cp).unwrap();
        assert_eq!(temp.stats().bytes_live, size, "kernel {kernel}");
        // SAFETY: taken before every checkpoint; no reset since.
        check(unsafe { std::slice::from_raw_parts(at, len) }, 55);
    }
    temp.reset();
}
