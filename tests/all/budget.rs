//! `max_bytes` means what its docs say, at any thread count: a program is
//! served whenever the limit covers what is live plus one growth step per
//! thread; past that, `BudgetExceeded` with the numbers, and nothing
//! already handed out changes.

use rayon::prelude::*;
use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext, TempAllocator};

use crate::util::{check, fill};

/// 4 KiB of activations on the calling thread, then 64 x 1 KiB of worker
/// scratch spread over a pool of `threads` workers, under a 160 KiB limit;
/// returns the first error, if any.
fn activations_and_workers(config: CachingConfig, threads: usize) -> Result<(), Error> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let mut temp = CachingAllocator::with_config(config.max_bytes(Some(160 << 10)));
    for _inference in 0..3 {
        let ctx = KernelContext::new(&temp);
        let activations = fill(ctx.allocate_temp(4 << 10, 64)?, 7);
        pool.install(|| {
            (0..64).into_par_iter().try_for_each(|i| {
                fill(ctx.allocate_temp(1 << 10, 64)?, i);
                Ok::<_, Error>(())
            })
        })?;
        check(activations, 7);
        temp.reset();
    }
    Ok(())
}

#[test]
fn a_limit_covering_live_bytes_and_a_page_per_thread_serves_any_thread_count() {
    // With the debug checks (as a debug build has them) and without.
    for debug_checks in [false, true] {
        let config = CachingConfig::default().debug_checks(debug_checks);
        for threads in [1, 2, 4, 8] {
            let served = activations_and_workers(config, threads);
            assert_eq!(served, Ok(()), "{threads} threads, debug checks {debug_checks}");
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
