//! `max_bytes` means what its docs say, at any thread count: a program is
//! served whenever the limit covers what is live plus one growth step per
//! thread; past that, `BudgetExceeded` with the numbers, and nothing
//! already handed out changes.

use rayon::prelude::*;
use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext, TempAllocator};

use crate::util::{check, fill};

/// How a kernel's 64 x 1 KiB of worker scratch is spread over its threads.
#[derive(Clone, Copy, Debug)]
enum Split {
    /// A rayon pool: which worker takes how much changes from call to call.
    Stealing,
    /// Scoped threads, an equal share each.
    Equal,
}

/// Three inferences of 4 KiB of activations on the calling thread, then
/// 64 x 1 KiB of worker scratch over `threads` threads, under `limit`;
/// returns the first error, if any.
fn activations_and_workers(config: CachingConfig, split: Split, threads: usize, limit: usize) -> Result<(), Error> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let mut temp = CachingAllocator::with_config(config.max_bytes(Some(limit)));
    for _inference in 0..3 {
        let ctx = KernelContext::new(&temp);
        let activations = fill(ctx.allocate_temp(4 << 10, 64)?, 7);
        match split {
            Split::Stealing => pool.install(|| {
                (0..64).into_par_iter().try_for_each(|i| {
                    fill(ctx.allocate_temp(1 << 10, 64)?, i);
                    Ok::<_, Error>(())
                })
            })?,
            Split::Equal => std::thread::scope(|s| {
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        let ctx = &ctx;
                        s.spawn(move || {
                            (0..64 / threads).try_for_each(|i| {
                                fill(ctx.allocate_temp(1 << 10, 64)?, t * 64 + i);
                                Ok::<_, Error>(())
                            })
                        })
                    })
                    .collect();
                workers.into_iter().try_for_each(|w| w.join().unwrap())
            })?,
        }
        check(activations, 7);
        temp.reset();
    }
    Ok(())
}

#[test]
fn a_limit_covering_each_threads_window_and_a_page_serves_any_thread_count() {
    let page = crate::util::page();
    for threads in [1, 2, 4, 8] {
        // An equal split: what is live, and a page for each thread that
        // allocates (the calling thread, the workers, and the debug checks'
        // region).
        let tight = (4 + 64) * 1024 + (threads + 2) * page;
        // A work-stealing pool: each worker's region keeps the most it took
        // in one call, so the limit covers the sum of those (the 160 KiB a
        // user found refused at 4 and 8 rayon workers, before regions
        // committed lazily, at 4 KiB pages).
        let stealing = tight.max(160 << 10);
        for (split, limit) in [(Split::Equal, tight), (Split::Stealing, stealing)] {
            // With the debug checks (as a debug build has them) and without.
            for debug_checks in [false, true] {
                let config = CachingConfig::default().debug_checks(debug_checks);
                let served = activations_and_workers(config, split, threads, limit);
                assert_eq!(served, Ok(()), "{split:?}, {threads} threads, debug checks {debug_checks}, limit {limit}");
            }
        }
    }
}

#[test]
fn a_request_over_the_limit_is_over_budget_whatever_its_size() {
    let limit = 64 << 20;
    for config in [CachingConfig::default(), CachingConfig::default().reserve(None)] {
        let temp = CachingAllocator::with_config(config.max_bytes(Some(limit)));
        let ctx = KernelContext::new(&temp);
        let kept = fill(ctx.allocate_temp(1000, 8).unwrap(), 3);
        for size in [limit + 1, 1 << 40, isize::MAX as usize - 4096] {
            let err = ctx.allocate_temp(size, 64).unwrap_err();
            assert!(
                matches!(err, Error::BudgetExceeded { requested, limit: l, .. } if requested == size && l == limit),
                "{size}: {err}"
            );
        }
        check(kept, 3);
        assert_eq!(temp.stats().bytes_live, 1000);
    }
}

#[test]
fn a_refused_request_leaves_an_empty_region_usable() {
    // A request over the limit at the start of a window, when the region
    // holds memory but nothing is in use: refused, and the next requests
    // are served from a region that is still whole.
    let limit = 1 << 20;
    for config in [CachingConfig::default(), CachingConfig::default().reserve(None)] {
        for debug_checks in [false, true] {
            let config = config.debug_checks(debug_checks).max_bytes(Some(limit));
            let mut temp = CachingAllocator::with_config(config);
            fill(KernelContext::new(&temp).allocate_temp(100_000, 64).unwrap(), 1);
            temp.reset();
            for _window in 0..3 {
                let ctx = KernelContext::new(&temp);
                let err = ctx.allocate_temp(2 * limit, 64).unwrap_err();
                assert!(matches!(err, Error::BudgetExceeded { .. }), "{err}");
                let a = fill(ctx.allocate_temp(256, 64).unwrap(), 2);
                let b = fill(ctx.allocate_temp(100_000, 64).unwrap(), 3);
                check(a, 2);
                check(b, 3);
                temp.check().unwrap();
                temp.reset();
            }
        }
    }
}

/// A first request of N pages is served under a limit of N + 1 pages (the
/// request and a growth step): a reservation costs its pages, not a size
/// class above them.
#[test]
fn a_first_request_needs_its_pages_not_a_size_class() {
    let p = crate::util::page();
    for pages in [9, 17, 33, 65] {
        let temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false).max_bytes(Some((pages + 1) * p)));
        let r = KernelContext::new(&temp).allocate_temp(pages * p, 64);
        r.unwrap();
    }
}

/// A probe that cannot fit, as the first request of a window, is refused
/// with nothing else changed: the prober's warm region keeps its memory, and
/// the window's next request takes no system allocation.
#[test]
fn a_probe_that_cannot_fit_keeps_the_probers_memory() {
    let p = crate::util::page();
    for limit in [Some(64 * p), None] {
        let mut temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false).max_bytes(limit));
        KernelContext::new(&temp).allocate_temp(32 * p, 64).unwrap();
        temp.reset();
        let (held, sys) = (temp.stats().bytes_held, temp.stats().system_allocations);
        let probe = limit.map_or(crate::util::HUGE, |l| 2 * l);
        let _err = KernelContext::new(&temp)
            .allocate_temp(probe, 64)
            .unwrap_err();
        let after = temp.stats();
        KernelContext::new(&temp).allocate_temp(32 * p, 64).unwrap();
        assert_eq!(
            (after.bytes_held, temp.stats().system_allocations),
            (held, sys),
            "limit {limit:?}"
        );
    }
}

/// Persistent workers take their leases back lock-free while one of them
/// reclaims FREE regions under the limit, with checkpoints and rewinds in
/// between (under Miri too): every buffer keeps its pattern, and the limit
/// holds.
#[test]
fn persistent_workers_re_lease_while_another_reclaims_free_regions() {
    use std::sync::{Barrier, RwLock};
    let p = crate::util::page();
    let windows = if cfg!(miri) { 3 } else { 50 };
    let temp = RwLock::new(CachingAllocator::with_config(CachingConfig::default().debug_checks(false).max_bytes(Some(28 * p))));
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for w in 0..3usize {
            let (temp, barrier) = (&temp, &barrier);
            s.spawn(move || {
                for win in 0..windows {
                    barrier.wait();
                    {
                        let t = temp.read().unwrap();
                        let ctx = KernelContext::new(&*t);
                        // Window parity decides who is big: the others re-lease
                        // their last (FREE) regions while the big one reclaims.
                        let pages = if (win + w) % 3 == 0 { 14 } else { 3 };
                        let mut got = Vec::new();
                        for k in 0..2 {
                            if let Ok(b) = ctx.allocate_temp(pages * p / 2, 64) {
                                got.push((crate::util::fill(b, w * 100 + k), w * 100 + k));
                            }
                        }
                        for (b, tag) in &got {
                            crate::util::check(b, *tag);
                        }
                    }
                    barrier.wait();
                }
            });
        }
        for win in 0..windows {
            barrier.wait(); // workers allocate
            barrier.wait(); // workers done
            let mut t = temp.write().unwrap();
            if win % 2 == 0 {
                let cp = t.checkpoint().unwrap();
                let _ = KernelContext::new(&*t).allocate_temp(p, 64);
                t.rewind(cp).unwrap();
            }
            t.reset();
            let (s, c) = (t.stats(), t.cache().stats());
            assert_eq!(s.bytes_held, c.bytes_held);
            assert!(s.bytes_held <= 28 * p);
        }
    });
}

/// The retain cap gives back only what is held above it, not the whole
/// region: no cliff.
#[test]
fn the_retain_cap_gives_back_only_what_is_above_it() {
    let p = crate::util::page();
    let mut temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false).retain(Some(64 * p)));
    for _ in 0..3 {
        KernelContext::new(&temp).allocate_temp(65 * p, 64).unwrap();
        temp.reset();
    }
    let held = temp.stats().bytes_held;
    assert!(held <= 64 * p && held >= 60 * p, "{held} held for a {} cap", 64 * p);
}

