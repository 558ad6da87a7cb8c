//! Frames: inference and kernel scopes, nesting, failures, panics, threads
//! and the zero-system-allocation steady state, over every `Rewind`
//! allocator (only `FixedAllocator` without `std`).

use std::panic::{AssertUnwindSafe, catch_unwind};

#[cfg(feature = "std")]
use tempalloc::{CachingAllocator, CachingConfig, MallocAllocator};
use tempalloc::{Error, FixedAllocator, Frame, KernelContext, Rewind, TempAllocator, with_context};

use crate::util::{check, fill};

const ROUNDS: usize = if cfg!(miri) { 3 } else { 20 };

#[cfg(feature = "std")]
fn caching() -> CachingAllocator {
    CachingAllocator::with_config(CachingConfig::default().min_block_size(64 * 1024))
}

/// Runs the generic test body `$body::<A>(&mut A)` once per `Rewind`
/// allocator that shares a window: a `CachingAllocator` (with `std`) and a
/// `FixedAllocator` over a 1 MiB buffer.
macro_rules! for_each_rewind {
    ($body:ident) => {{
        #[cfg(feature = "std")]
        $body(&mut caching());
        // The same through the run-time choice (`AnyTemp`).
        #[cfg(feature = "std")]
        $body(&mut tempalloc::AnyTemp::from(caching()));
        // Uninitialised without a per-byte loop, which Miri would interpret.
        let mut buf = Box::<[u8]>::new_uninit_slice(1 << 20);
        $body(&mut FixedAllocator::new(&mut buf));
    }};
}

#[test]
fn inference_scratch_lives_across_kernels_and_kernel_scratch_is_recycled() {
    for_each_rewind!(inference_and_three_kernels);
}

fn inference_and_three_kernels<A: Rewind>(temp: &mut A) {
    let r: Result<f32, Error> = temp.frame(|inf| {
        let act = inf.scratch::<f32>(1024)?;
        act[0] = 7.0;
        for _ in 0..3 {
            inf.kernel(|ctx| {
                let tmp = ctx.scratch::<f32>(256)?;
                tmp[0] = act[0];
                act[1] += 1.0;
                Ok(())
            })?;
        }
        Ok(act[1])
    });
    assert_eq!(r, Ok(3.0));
    let s = temp.stats();
    assert_eq!(s.resets, 1, "the frame ended in a reset");
    // Three kernels of 1 KiB each, recycled in turn: never more than one live.
    assert_eq!(s.high_water, 4096 + 1024);
}

#[test]
fn a_kernel_gets_the_same_memory_every_call_and_frame_scratch_is_intact() {
    for_each_rewind!(same_memory_every_call);
}

fn same_memory_every_call<A: Rewind>(temp: &mut A) {
    temp.frame(|inf| {
        let act = inf.allocate_temp(3000, 64)?;
        let act = fill(act, 1);
        let mut seen = None;
        for round in 0..ROUNDS {
            let addr = inf.kernel(|ctx| {
                let tile = ctx.allocate_temp(5000, 64)?;
                fill(tile, 100 + round);
                Ok(tile.as_ptr() as usize)
            })?;
            assert_eq!(*seen.get_or_insert(addr), addr, "round {round}");
            check(act, 1);
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Nested frames over any `Rewind` allocator: each layer frame starts where
/// the last one did (same addresses), and the outer scratch stays intact.
/// Returns the bytes live inside a layer, seen from the inner frame.
fn nested<A: Rewind>(temp: &mut A) -> Vec<(usize, usize)> {
    let mut seen = Vec::new();
    temp.frame(|inf| {
        let weights = fill(inf.allocate_temp(1000, 16)?, 1);
        for layer in 0..ROUNDS {
            inf.frame(|l| {
                let kv = fill(l.allocate_temp(700, 64)?, 2 + layer);
                l.kernel(|ctx| {
                    fill(ctx.allocate_temp(300, 8)?, 999);
                    Ok(())
                })?;
                check(kv, 2 + layer);
                seen.push((kv.as_ptr() as usize, l.stats().bytes_live));
                Ok(())
            })?;
            check(weights, 1);
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    seen
}

#[test]
fn nested_frames_rewind_to_where_they_started() {
    fn same_addresses<A: Rewind>(temp: &mut A) {
        let seen = nested(temp);
        assert!(seen.iter().all(|&(addr, _)| addr == seen[0].0), "{seen:?}");
    }
    for_each_rewind!(same_addresses);
    // MallocAllocator frees exactly what the inner frame took.
    #[cfg(feature = "std")]
    {
        let seen = nested(&mut MallocAllocator::new());
        assert!(seen.iter().all(|&(_, live)| live == 1700), "{seen:?}");
    }
}

#[test]
fn a_recorded_failure_wins_over_ok_and_is_the_first_one() {
    for_each_rewind!(recorded_failure_wins);
}

fn recorded_failure_wins<A: Rewind>(temp: &mut A) {
    let r = temp.frame(|inf| {
        inf.kernel(|ctx| {
            let e = ctx.allocate_temp(8, 24).unwrap_err();
            ctx.fail(e);
            ctx.fail(Error::NoTempAllocator);
            Ok(5)
        })
    });
    assert_eq!(r, Err(Error::InvalidAlignment { align: 24 }));
    // The next kernel starts clean.
    assert_eq!(temp.frame(|inf| inf.kernel(|_| Ok::<_, Error>(5))), Ok(5));
}

#[test]
fn an_error_returned_by_a_kernel_comes_out_of_the_frame() {
    for_each_rewind!(returned_error_comes_out);
}

fn returned_error_comes_out<A: Rewind>(temp: &mut A) {
    let r: Result<(), Error> =
        temp.frame(|inf| inf.kernel(|ctx| ctx.scratch_aligned::<f32>(4, 3).map(drop)));
    assert_eq!(r, Err(Error::InvalidAlignment { align: 3 }));
}

#[test]
fn a_panicking_kernel_is_rewound_and_the_frame_goes_on() {
    for_each_rewind!(panicking_kernel);
}

fn panicking_kernel<A: Rewind>(temp: &mut A) {
    temp.frame(|inf| {
        let act = fill(inf.allocate_temp(512, 64)?, 3);
        let mut at = 0;
        // The kernel's result comes out only if it did not panic.
        let caught = catch_unwind(AssertUnwindSafe(|| {
            inf.kernel(|ctx| -> Result<(), Error> {
                at = fill(ctx.allocate_temp(4096, 64)?, 4).as_ptr() as usize;
                panic!("kernel bug");
            })
        }));
        assert!(caught.is_err(), "the kernel returned: {caught:?}");
        // The unwind rewound the kernel: the next one gets the same memory.
        let next = inf.kernel(|ctx| Ok(ctx.allocate_temp(4096, 64)?.as_ptr() as usize))?;
        assert_eq!(next, at);
        check(act, 3);
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(temp.stats().bytes_live, 0);
}

#[test]
fn a_panicking_frame_still_resets() {
    for_each_rewind!(panicking_frame);
}

fn panicking_frame<A: Rewind>(temp: &mut A) {
    // The frame's result comes out only if it did not panic.
    let caught = catch_unwind(AssertUnwindSafe(|| {
        temp.frame(|inf| -> Result<(), Error> {
            inf.scratch::<u8>(1000)?;
            panic!("runtime bug");
        })
    }));
    assert!(caught.is_err(), "the frame returned: {caught:?}");
    assert_eq!(temp.stats().resets, 1);
    // And it still works.
    assert_eq!(
        temp.frame(|inf| Ok::<_, Error>(inf.scratch::<u8>(10)?.len())),
        Ok(10)
    );
}

#[cfg(feature = "std")]
#[test]
fn frames_work_over_malloc_and_free_each_kernel() {
    let mut temp = MallocAllocator::new();
    temp.frame(|inf| {
        let act = fill(inf.allocate_temp(100, 8)?, 5);
        for round in 0..ROUNDS {
            inf.kernel(|ctx| {
                fill(ctx.allocate_temp(200, 8)?, round);
                fill(ctx.allocate_temp(300, 64)?, round + 1);
                Ok(())
            })?;
            let s = inf.stats();
            assert_eq!(s.system_frees, 2 * (round as u64 + 1));
            assert_eq!(s.bytes_live, 100);
        }
        check(act, 5);
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(temp.stats().bytes_held, 0);
}

#[test]
fn a_kernel_calls_another_kernel_with_its_context() {
    fn inner(ctx: &KernelContext) -> Result<u32, Error> {
        Ok(ctx.scratch_fill(10, 2u32)?.iter().sum())
    }
    fn outer(ctx: &KernelContext) -> Result<u32, Error> {
        let mine = ctx.scratch_fill(10, 1u32)?;
        Ok(inner(ctx)? + mine.iter().sum::<u32>())
    }
    fn both_ways<A: Rewind>(temp: &mut A) {
        assert_eq!(temp.frame(|inf| inf.kernel(outer)), Ok(30));
        assert_eq!(with_context(temp, outer), Ok(30));
    }
    for_each_rewind!(both_ways);
}

/// A kernel whose workers share `ctx`: scoped threads, each with its own
/// tile, checked after all were written. One worker may fail.
fn threaded_kernel(ctx: &KernelContext, fail_worker: Option<usize>) -> Result<u64, Error> {
    let workers = if cfg!(miri) { 2 } else { 4 };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || -> Result<u64, Error> {
                    if Some(w) == fail_worker {
                        // A worker that reports through the context only.
                        if let Err(e) = ctx.allocate_temp(8, 48) {
                            ctx.fail(e);
                        }
                        return Ok(0);
                    }
                    let tile = ctx.scratch_with(TILE, |i| (w * TILE + i) as u64)?;
                    let bytes = fill(ctx.allocate_temp(777, 64)?, w);
                    check(bytes, w);
                    Ok(tile.iter().sum())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

fn expected_sum(workers: u64) -> u64 {
    let tile = TILE as u64;
    (0..workers)
        .map(|w| w * tile * tile + tile * (tile - 1) / 2)
        .sum()
}

/// A worker's typed tile, in elements: fewer under Miri, which writes and
/// sums each one; the scratch path is the same at any length.
const TILE: usize = if cfg!(miri) { 100 } else { 1000 };

#[test]
fn a_threaded_kernel_runs_through_with_context_and_frames() {
    for_each_rewind!(threaded_both_ways);
}

fn threaded_both_ways<A: Rewind>(temp: &mut A) {
    let workers = if cfg!(miri) { 2 } else { 4 };
    let want = expected_sum(workers);
    assert_eq!(
        with_context(&mut *temp, |ctx| threaded_kernel(ctx, None)),
        Ok(want)
    );
    let r = temp.frame(|inf| {
        let act = fill(inf.allocate_temp(256, 64)?, 9);
        let mut total = 0;
        for _ in 0..2 {
            total += inf.kernel(|ctx| threaded_kernel(ctx, None))?;
            check(act, 9);
        }
        Ok::<_, Error>(total)
    });
    assert_eq!(r, Ok(2 * want));
    // A worker's recorded failure reaches the runtime.
    let r = temp.frame(|inf| inf.kernel(|ctx| threaded_kernel(ctx, Some(1))));
    assert_eq!(r, Err(Error::InvalidAlignment { align: 48 }));
    let r = with_context(temp, |ctx| threaded_kernel(ctx, Some(0)));
    assert_eq!(r, Err(Error::InvalidAlignment { align: 48 }));
}

#[cfg(feature = "std")]
#[test]
#[cfg_attr(
    miri,
    ignore = "rayon's pool threads outlive the test, which Miri reports as a leak"
)]
fn a_threaded_kernel_runs_on_a_rayon_pool() {
    fn pooled(ctx: &KernelContext, pool: &rayon::ThreadPool) -> Result<u64, Error> {
        use rayon::prelude::*;
        pool.install(|| {
            (0..16u64)
                .into_par_iter()
                .map(|w| {
                    let tile = ctx.scratch_fill(512, w)?;
                    Ok(tile.iter().sum::<u64>())
                })
                .sum()
        })
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let want: u64 = (0..16).map(|w| 512 * w).sum();
    let mut temp = caching();
    assert_eq!(with_context(&mut temp, |ctx| pooled(ctx, &pool)), Ok(want));
    let r = temp.frame(|inf| {
        let mut total = 0;
        for _ in 0..3 {
            total += inf.kernel(|ctx| pooled(ctx, &pool))?;
        }
        Ok::<_, Error>(total)
    });
    assert_eq!(r, Ok(3 * want));
}

/// One inference as a runtime writes it: activations for the frame, a kernel
/// frame per layer with per-call scratch.
fn inference<A: Rewind>(inf: &mut Frame<'_, A>, tokens: usize) -> Result<f32, Error> {
    let act = inf.scratch_aligned::<f32>(64 * tokens, 64)?;
    for (layer, a) in act.iter_mut().take(4).enumerate() {
        inf.kernel(|ctx| {
            let tile = ctx.scratch_aligned::<f32>(256 * tokens, 64)?;
            let scales = ctx.scratch_fill(tokens, 0.5f32)?;
            tile[0] = scales[0] * layer as f32;
            *a += tile[0];
            Ok(())
        })?;
    }
    Ok(act.iter().sum())
}

#[test]
fn frames_make_no_system_allocation_after_warm_up() {
    for_each_rewind!(no_system_allocation_after_warm_up);
}

/// Counted by the test binary's global allocator, not by the allocator's
/// own `Stats`: nothing on this thread may allocate.
fn no_system_allocation_after_warm_up<A: Rewind>(temp: &mut A) {
    no_system_allocation_after(1, temp);
}

/// Warms up with `warm_ups` inferences of the largest shape, then runs
/// smaller and equal ones and counts the system allocations.
fn no_system_allocation_after<A: Rewind>(warm_ups: usize, temp: &mut A) {
    for _ in 0..warm_ups {
        assert_eq!(temp.frame(|inf| inference(inf, 32)), Ok(3.0));
    }
    let warm = crate::counting::counts().allocs;
    for round in 0..ROUNDS {
        let tokens = 1 + round % 32;
        assert_eq!(temp.frame(|inf| inference(inf, tokens)), Ok(3.0));
        assert_eq!(
            crate::counting::counts().allocs,
            warm,
            "inference {round} ({tokens} tokens) went to the system"
        );
    }
}

/// Frames `depth` deep below `f`, each with scratch of its own, the
/// innermost a kernel: `depth` checkpoints open at once.
#[cfg(feature = "std")]
fn nest<A: Rewind>(f: &mut Frame<'_, A>, depth: usize) -> Result<(), Error> {
    f.allocate_temp(64, 8)?;
    match depth {
        0 => Ok(()),
        1 => f.kernel(|ctx| ctx.allocate_temp(64, 8).map(drop)),
        _ => f.frame(|inner| nest(inner, depth - 1)),
    }
}

/// Up to 8 nested frames (open checkpoints) cost no system allocation, the
/// first time too: the books have room for them from the start.
#[cfg(feature = "std")]
#[test]
fn eight_nested_frames_allocate_nothing_the_first_time() {
    let mut temp = caching();
    // The region and its memory, and the debug checks' books for as many
    // requests as the nested frames make: every system allocation.
    let flat = temp.frame(|inf| (0..9).try_for_each(|_| inf.allocate_temp(64, 8).map(drop)));
    assert_eq!(flat, Ok(()));
    let before = crate::counting::counts().allocs;
    assert_eq!(temp.frame(|inf| nest(inf, 8)), Ok(()));
    assert_eq!(crate::counting::counts().allocs, before);
}

/// Heap blocks cannot grow in place: a kernel that outgrows the frame's
/// block moves to another one, and its rewind moves back, reusing the same
/// blocks and books every call. The first reset replaces the frame's block
/// with one that holds the whole window, so from the second inference on one
/// block serves everything, sized to the peak rather than to the sum of the
/// blocks the first inference chained.
#[cfg(feature = "std")]
#[test]
fn a_kernel_outgrowing_its_block_converges_to_one_block_sized_to_the_peak() {
    let first = 16 * 1024;
    let config = CachingConfig::default().reserve(None).min_block_size(first);
    let mut temp = CachingAllocator::with_config(config);
    // 8 KiB of activations and a 32 KiB tile: more than the first block.
    no_system_allocation_after(2, &mut temp);
    let stats = temp.stats();
    assert!(stats.high_water > first, "the kernel outgrew the block");
    // One block: the peak (the high water plus alignment padding) rounded
    // to a size class, at most 12.5% (or a page) over, and nothing spare.
    assert!(
        stats.bytes_held <= stats.high_water + stats.high_water / 8 + crate::util::page(),
        "{stats}"
    );
}

#[cfg(feature = "std")]
#[test]
fn rewind_refuses_stale_and_foreign_checkpoints() {
    let mut a = MallocAllocator::new();
    let mut b = MallocAllocator::new();
    let foreign = b.checkpoint().unwrap();
    KernelContext::new(&a).scratch::<u8>(10).unwrap();
    assert_eq!(a.rewind(foreign), Err(Error::ForeignCheckpoint));
    assert_eq!(a.stats().bytes_live, 10, "nothing changed");
    let cp = a.checkpoint().unwrap();
    a.reset();
    assert_eq!(
        a.rewind(cp),
        Err(Error::StaleCheckpoint {
            taken_at: 0,
            now: 1
        })
    );
    // A checkpoint past what a rewind released.
    let early = a.checkpoint().unwrap();
    KernelContext::new(&a).scratch::<u8>(10).unwrap();
    let late = a.checkpoint().unwrap();
    a.rewind(early).unwrap();
    assert!(matches!(a.rewind(late), Err(Error::StaleCheckpoint { .. })));
    assert_eq!(a.stats().bytes_live, 0);
    // The allocator whose checkpoint was refused elsewhere rewinds to its
    // own as before.
    assert_eq!(b.rewind(b.checkpoint().unwrap()), Ok(()));
}

/// 8 nested checkpoints over 8 regions in use allocate nothing, the first
/// time too.
#[cfg(feature = "std")]
#[test]
fn eight_nested_checkpoints_over_eight_regions_allocate_nothing() {
    let mut temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false));
    for _window in 0..2 {
        std::thread::scope(|s| {
            for _ in 0..8 {
                let t = &temp;
                s.spawn(move || KernelContext::new(t).allocate_temp(64, 8).unwrap().len());
            }
        });
        let mut cps = Vec::with_capacity(8);
        let before = crate::counting::counts().allocs;
        for _ in 0..8 {
            cps.push(temp.checkpoint().unwrap());
        }
        let allocs = crate::counting::counts().allocs - before;
        temp.rewind(cps.swap_remove(0)).unwrap();
        temp.reset();
        assert_eq!(allocs, 0);
    }
}
