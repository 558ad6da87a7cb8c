//! `with_context`, `KernelContext` plumbing and threads sharing one context.

use tempalloc::testing::locks_taken;
use tempalloc::{
    CachingAllocator, Error, KernelContext, MallocAllocator, TempAllocator, with_context,
};

use crate::scenarios::scaled;
use crate::util::{check, fill, for_each_allocator};

#[test]
fn with_context_returns_the_value_and_resets_after() {
    for_each_allocator(|name, temp| {
        for step in 1..=3u64 {
            let (sum, during) = with_context(temp, |ctx| {
                let x = ctx.scratch::<u64>(100)?;
                x.iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = i as u64 * step);
                let during = ctx.temp().unwrap().stats();
                Ok::<_, Error>((x.iter().sum::<u64>(), during))
            })
            .unwrap();
            assert_eq!(sum, 4950 * step, "{name}");
            assert_eq!(
                during.resets,
                step - 1,
                "{name}: reset happened before the closure ended"
            );
            let after = temp.stats();
            assert_eq!(after.resets, step, "{name}");
            assert_eq!(after.allocations, step, "{name}");
            assert_eq!(after.high_water, 100 * 8, "{name}");
        }
    });
}

#[test]
fn with_context_reports_kernel_failure() {
    for_each_allocator(|name, temp| {
        // The kernel swallows the error and says `Ok`: the recorded
        // failure still comes out of `with_context`.
        let failure = with_context(temp, |ctx| {
            if let Err(e) = ctx.allocate_temp(64, 12) {
                ctx.fail(e);
            }
            Ok(())
        });
        assert_eq!(
            failure,
            Err(Error::InvalidAlignment { align: 12 }),
            "{name}"
        );
        assert_eq!(temp.stats().resets, 1, "{name}");
    });
}

#[test]
fn a_context_exposes_its_allocator() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        ctx.allocate_temp(10, 1).unwrap();
        let seen = ctx
            .temp()
            .expect("a context made with an allocator has one");
        assert_eq!(seen.stats().allocations, 1, "{name}");
        assert_eq!(ctx.failure(), None, "{name}");
    });
}

#[test]
fn a_context_is_shared_by_worker_threads() {
    // Under Miri fewer rounds and smaller tiles: two workers interleaving
    // their requests through one context is the point, not how many.
    const ROUNDS: usize = if cfg!(miri) { 12 } else { 50 };
    const TILE: usize = if cfg!(miri) { 32 } else { 128 };
    let mut temp = MallocAllocator::new();
    {
        let ctx = KernelContext::new(&temp);
        std::thread::scope(|s| {
            for worker in 0..2usize {
                let ctx = &ctx;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for round in 0..ROUNDS {
                        let tag = worker * 1000 + round;
                        let buf = ctx.allocate_temp(64 + 37 * round, 64).unwrap();
                        assert_eq!(buf.as_ptr() as usize % 64, 0);
                        mine.push((fill(buf, tag), tag));
                        let tile = ctx.scratch::<u32>(TILE).unwrap();
                        assert!(tile.iter().all(|&v| v == 0), "scratch is zeroed");
                        tile.fill(tag as u32);
                        assert!(tile.iter().all(|&v| v == tag as u32));
                    }
                    for (buf, tag) in &mine {
                        check(buf, *tag);
                    }
                });
            }
        });
        assert_eq!(ctx.failure(), None);
    }
    let s = temp.stats();
    let bytes: usize = (0..ROUNDS).map(|r| 64 + 37 * r + TILE * 4).sum();
    assert_eq!(s.allocations, 2 * 2 * ROUNDS as u64);
    assert_eq!(s.bytes_requested, 2 * bytes as u64);
    assert_eq!(s.high_water, 2 * bytes);
    temp.reset();
    assert_eq!(temp.stats().system_frees, 2 * 2 * ROUNDS as u64);
    assert_eq!(temp.stats().bytes_held, 0);
}

#[test]
fn a_context_records_one_failure_across_threads() {
    let temp = MallocAllocator::new();
    let ctx = KernelContext::new(&temp);
    std::thread::scope(|s| {
        for align in [3usize, 6] {
            let ctx = &ctx;
            s.spawn(move || ctx.fail(ctx.allocate_temp(8, align).unwrap_err()));
        }
    });
    assert!(
        matches!(
            ctx.failure(),
            Some(Error::InvalidAlignment { align: 3 | 6 })
        ),
        "{:?}",
        ctx.failure()
    );
}

/// One context type for every kernel: shareable with worker threads.
#[test]
fn the_context_and_every_allocator_are_send_and_sync() {
    fn shareable<T: Send + Sync>() {}
    shareable::<KernelContext<'static>>();
    shareable::<tempalloc::CachingAllocator>();
    shareable::<tempalloc::BumpAllocator>();
    shareable::<MallocAllocator>();
    shareable::<Box<dyn TempAllocator + Send>>();
    // A kernel that takes the one context type runs threaded on any of them.
    fn threaded(ctx: &KernelContext) -> Result<usize, Error> {
        std::thread::scope(|s| {
            let a = s.spawn(|| ctx.scratch::<u8>(10).map(|b| b.len()));
            let b = s.spawn(|| ctx.scratch::<u8>(20).map(|b| b.len()));
            Ok(a.join().unwrap()? + b.join().unwrap()?)
        })
    }
    for_each_allocator(|name, temp| {
        assert_eq!(with_context(temp, threaded), Ok(30), "{name}");
    });
}

/// The README's promise for `CachingAllocator`'s fast path: no lock. After
/// a thread's first request in a window (which takes its region), a warm
/// thread's requests take no lock of the allocator's or its cache's: on the
/// frame's thread and on fresh worker threads sharing the kernel's context,
/// in the README's frame-and-kernels pattern.
#[test]
fn requests_after_a_threads_first_in_a_window_take_no_lock() {
    let mut temp = CachingAllocator::new();
    for inference in 0..4 {
        let locks = temp.frame(|inf| {
            inf.kernel(|ctx| {
                // The locks one thread took for its requests after its first.
                let one = || -> Result<u64, Error> {
                    ctx.scratch::<f32>(64)?;
                    let before = locks_taken();
                    for _ in 0..scaled(1000, 20) {
                        ctx.scratch::<f32>(64)?;
                    }
                    Ok(locks_taken() - before)
                };
                let mut locks = vec![one()?];
                std::thread::scope(|s| {
                    let workers: Vec<_> = (0..3).map(|_| s.spawn(one)).collect();
                    workers.into_iter().try_for_each(|w| {
                        locks.push(w.join().unwrap()?);
                        Ok::<_, Error>(())
                    })
                })?;
                Ok::<_, Error>(locks)
            })
        });
        let locks = locks.unwrap();
        // The first two inferences grow the regions (a growth may take
        // the cache's lock); from the third, each is warm.
        if inference >= 2 {
            assert_eq!(locks, [0; 4], "inference {inference}");
        }
    }
    // The count sees this allocator's lock: `stats` takes it.
    let before = locks_taken();
    temp.stats();
    assert!(locks_taken() > before);
}
