//! Fault injection: `testing::fail_nth_allocation(&cache, n)` makes the `n`th
//! system block allocation fail. For every `n` up to one past the number a
//! workload makes, the public call that hits it returns `OutOfMemory` (or
//! the `allocator_api2` `AllocError`), and the allocator stays usable and
//! consistent: earlier buffers intact, counters balanced, the next requests
//! served.

use std::mem::MaybeUninit;
use std::sync::Arc;

use tempalloc::testing::fail_nth_allocation;
use tempalloc::{
    AnyTemp, BlockCache, CachingAllocator, CachingConfig, Error, KernelContext, MallocAllocator,
    Rewind, TempAllocator,
};

use crate::util::{check, fill, page};

/// A step of the workload: one public allocating call.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// `KernelContext::allocate_temp(size, align)`.
    Temp(usize, usize),
    /// `KernelContext::scratch::<f32>(len)`.
    Scratch(usize),
    /// `KernelContext::scratch_uninit::<u64>(len)`.
    Uninit(usize),
    /// `TempAllocator::allocate` of `size` bytes at `align`.
    Raw(usize, usize),
    /// An `allocator_api2` `Vec` in the context growing to `len` bytes.
    VecIn(usize),
    /// `checkpoint`, then a request of `size`, then `rewind`.
    Rewound(usize),
    /// `reset` (the next request may need a block sized to the peak).
    Reset,
}

use Call::*;

/// Bytes, scaled down under Miri (which interprets every byte it touches),
/// where blocks start smaller too, so the same blocks are taken.
const fn sz(bytes: usize) -> usize {
    if cfg!(miri) { bytes / 16 } else { bytes }
}

/// Grows blocks, crosses the dedicated threshold, rewinds and resets, so
/// that block allocations happen in every path.
const WORKLOAD: &[Call] = &[
    Temp(sz(100), 64),
    Scratch(sz(20_000)),
    Temp(sz(70_000), 4096),
    Uninit(sz(9000)),
    Raw(sz(300_000), 128),
    VecIn(sz(50_000)),
    Rewound(sz(200_000)),
    Temp(sz(1 << 20), 8192),
    Reset,
    Temp(sz(64), 8),
    Scratch(sz(300_000)),
    Raw(sz(2 << 20), 64),
    Rewound(sz(600_000)),
    Reset,
    Temp(sz(5000), 16),
];

/// What the workload's calls returned: the first error, if any, and at which call.
fn run_workload(temp: &mut CachingAllocator) -> Option<(usize, Call, Option<Error>)> {
    for (i, &call) in WORKLOAD.iter().enumerate() {
        let result: Result<(), Option<Error>> = match call {
            Reset => {
                temp.reset();
                Ok(())
            }
            Rewound(size) => {
                let cp = temp.checkpoint().unwrap();
                let r = KernelContext::new(temp)
                    .allocate_temp(size, 64)
                    .map(|b| {
                        edges(b, i);
                    })
                    .map_err(Some);
                temp.rewind(cp).unwrap();
                r
            }
            _ => {
                let ctx = KernelContext::new(temp);
                match call {
                    Temp(size, align) => ctx.allocate_temp(size, align).map(|b| {
                        check(edges(b, i), i);
                    }),
                    Scratch(len) => ctx.scratch::<f32>(len).map(|s| s[len - 1] = 1.0),
                    Uninit(len) => ctx.scratch_uninit::<u64>(len).map(|s| {
                        s[0].write(7);
                    }),
                    Raw(size, align) => {
                        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
                        temp.allocate(layout).map(|p| assert!(p.len() >= size))
                    }
                    VecIn(len) => {
                        let mut v = allocator_api2::vec::Vec::<u8, _>::new_in(&ctx);
                        match v.try_reserve(len) {
                            Ok(()) => {
                                // Filling all of it only costs time (much, under Miri,
                                // which interprets each element: 64 there).
                                v.resize(len.min(if cfg!(miri) { 64 } else { 4096 }), 3);
                                Ok(())
                            }
                            Err(_) => return Some((i, call, None)),
                        }
                    }
                    Reset | Rewound(_) => unreachable!(),
                }
                .map_err(Some)
            }
        };
        if let Err(e) = result {
            return Some((i, call, e));
        }
    }
    None
}

/// Writes the pattern into the first and last 2 KiB of `buf` (all of it
/// would be slow in a debug build, for no more coverage) and returns them.
fn edges(buf: &mut [MaybeUninit<u8>], tag: usize) -> &mut [u8] {
    let n = buf.len();
    let edge = n.min(2048);
    if n > 2 * edge {
        fill(&mut buf[n - edge..], tag);
    }
    let cut = if n > 2 * edge { edge } else { n };
    fill(&mut buf[..cut], tag)
}

fn configs() -> [(&'static str, CachingConfig); 4] {
    let base = CachingConfig::default().min_block_size(sz(16 << 10));
    [
        ("checks off", base.debug_checks(false)),
        ("checks on", base.debug_checks(true)),
        (
            "dedicated",
            base.debug_checks(false)
                .dedicated_threshold(Some(sz(256 << 10))),
        ),
        // A full region moves on to a new one: its chunk may be refused.
        (
            "region cap",
            base.debug_checks(false).region_cap(Some(sz(32 << 10))),
        ),
    ]
}

#[test]
fn every_injected_failure_is_out_of_memory_and_recoverable() {
    // An idle budget of 0 frees every block given back; 1 MiB keeps some,
    // so later blocks come from the cache (no system call to fail).
    // Under Miri, one budget and the debug-checks configuration: every
    // injection point is still hit, in fewer settings.
    let configs = configs();
    let (configs, budgets): (&[_], &[usize]) = if cfg!(miri) {
        (&configs[1..2], &[0])
    } else {
        (&configs, &[0, 1 << 20])
    };
    for &(name, config) in configs {
        for &budget in budgets {
            inject_every_failure(name, config, budget);
        }
    }
}

/// A fresh allocator with a cache of `budget` idle bytes, holding one
/// patterned buffer from before any fault.
fn setup(config: CachingConfig, budget: usize) -> (Arc<BlockCache>, CachingAllocator, *const u8) {
    let cache = Arc::new(BlockCache::with_idle_budget(budget));
    let temp = CachingAllocator::with_cache(Arc::clone(&cache), config);
    let before = {
        let ctx = KernelContext::new(&temp);
        fill(ctx.allocate_temp(3000, 64).unwrap(), 1000).as_ptr()
    };
    (cache, temp, before)
}

fn inject_every_failure(name: &str, config: CachingConfig, budget: usize) {
    {
        // How many block allocations the workload makes when nothing fails:
        // about how many injection points to expect. Not exactly: with
        // alignments above a page, whether a request fits a heap block
        // depends on where the block landed, which changes from run to run.
        let (cache, mut temp, _) = setup(config, budget);
        let first = cache.stats().system_allocations;
        assert!(run_workload(&mut temp).is_none(), "{name}");
        let blocks = cache.stats().system_allocations - first;
        drop(temp);
        assert!(blocks >= 4, "{name}: only {blocks} block allocations");

        // Fail the first, the second, ... block allocation, until one run
        // ends before its `n`th: then there was nothing left to fail.
        let mut failed = 0;
        for n in 1.. {
            assert!(n <= 4 * blocks, "{name}: still failing at n = {n}");
            let (cache, mut temp, before) = setup(config, budget);
            let blocks_before = cache.stats().system_allocations;
            let allocations_before = temp.stats().allocations;
            fail_nth_allocation(&cache, n);
            let outcome = run_workload(&mut temp);
            fail_nth_allocation(&cache, 0);
            let hit = cache.stats().system_allocations - blocks_before;
            let past_the_last = match outcome {
                Some((i, call, err)) => {
                    if let Some(err) = err {
                        assert!(
                            matches!(err, Error::OutOfMemory { .. }),
                            "{name}, n = {n}: call {i} {call:?} got {err:?}"
                        );
                        // The message carries the numbers.
                        assert!(err.to_string().contains("out of memory"));
                    }
                    assert_eq!(hit, n - 1, "{name}, n = {n}: failed at the n-th block");
                    failed += 1;
                    false
                }
                None => {
                    // Served without an error: the `n`th block allocation
                    // never came (none was failed and then hidden).
                    assert!(
                        hit < n,
                        "{name}: the injection at {n} was not hit ({hit} blocks)"
                    );
                    true
                }
            };
            // Usable and consistent afterwards.
            let s = temp.stats();
            assert!(s.allocations >= allocations_before, "{name}, n = {n}");
            assert_eq!(s.canary_violations, 0, "{name}, n = {n}");
            assert_eq!(
                cache.stats().bytes_held,
                s.bytes_held + cache.idle_bytes(),
                "{name}, n = {n}"
            );
            temp.check().unwrap();
            {
                let ctx = KernelContext::new(&temp);
                // The buffer from before the fault, if no reset recycled it.
                if s.resets == 0 {
                    // SAFETY: 3000 bytes the allocator handed out, written
                    // above, not recycled since (no reset, no rewind past it).
                    let kept = unsafe { std::slice::from_raw_parts(before, 3000) };
                    check(kept, 1000);
                }
                let after = edges(ctx.allocate_temp(sz(100_000), 64).unwrap(), 7);
                check(after, 7);
                assert!(ctx.scratch::<u8>(sz(1 << 20)).is_ok(), "{name}, n = {n}");
            }
            // The whole workload runs again without a failure.
            temp.reset();
            assert!(run_workload(&mut temp).is_none(), "{name}, n = {n}");
            temp.release();
            let s = temp.stats();
            assert_eq!(s.bytes_held, 0, "{name}, n = {n}");
            let c = cache.stats();
            assert_eq!(c.bytes_held, cache.idle_bytes(), "{name}, n = {n}");
            assert!(cache.idle_bytes() <= cache.idle_budget(), "{name}, n = {n}");
            drop(temp);
            cache.evict_idle(0);
            let c = cache.stats();
            assert_eq!((c.bytes_held, c.idle_bytes), (0, 0), "{name}, n = {n}: {c}");
            if past_the_last {
                break;
            }
        }
        assert!(failed >= 4, "{name}: only {failed} injections were hit");
    }
}

#[test]
fn a_failed_block_allocation_leaves_earlier_buffers_intact() {
    let cache = Arc::new(BlockCache::with_idle_budget(0));
    for debug_checks in [false, true] {
        let config = CachingConfig::default()
            .min_block_size(4096)
            .debug_checks(debug_checks);
        let temp = CachingAllocator::with_cache(Arc::clone(&cache), config);
        let ctx = KernelContext::new(&temp);
        let a = fill(ctx.allocate_temp(4000, 64).unwrap(), 1);
        fail_nth_allocation(&cache, 1);
        // Does not fit the first block (16 KiB or a page): needs a new one,
        // which fails.
        let big = 50_000.max(page());
        let err = ctx.allocate_temp(big, 64).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
        check(a, 1);
        let b = fill(ctx.allocate_temp(big, 64).unwrap(), 2);
        check(a, 1);
        check(b, 2);
        assert_eq!(temp.stats().allocations, 2);
        assert_eq!(temp.stats().bytes_requested, 4000 + big as u64);
    }
}

/// The allocator's own records (its region list, its checkpoints), when
/// the global allocator has no memory: an `OutOfMemory` error, never an
/// abort, and the allocator works once memory is back.
mod the_records {
    use super::*;
    use crate::counting::failing_from;

    #[test]
    fn a_constructor_without_memory_is_an_error() {
        let cache = Arc::new(BlockCache::with_idle_budget(0));
        let mut failed = 0;
        for n in 1.. {
            let made = failing_from(n, || {
                CachingAllocator::try_with_cache(Arc::clone(&cache), CachingConfig::default())
            });
            match made {
                Err(Error::OutOfMemory { size, .. }) => assert!(size > 0),
                Err(e) => panic!("allocation {n}: {e}"),
                Ok(temp) => {
                    KernelContext::new(&temp).scratch::<u8>(100).unwrap();
                    break;
                }
            }
            failed += 1;
        }
        assert!(failed > 0, "the constructor made no allocation to fail");
    }

    #[test]
    fn a_new_region_without_memory_is_an_error() {
        for config in [
            CachingConfig::default(),
            CachingConfig::default().reserve(None),
        ] {
            for debug_checks in [false, true] {
                let mut temp = CachingAllocator::with_config(config.debug_checks(debug_checks));
                let ctx = KernelContext::new(&temp);
                let refused = failing_from(1, || ctx.allocate_temp(100, 64).map(|b| b.len()));
                assert!(
                    matches!(refused, Err(Error::OutOfMemory { .. })),
                    "{refused:?}"
                );
                let a = fill(ctx.allocate_temp(100, 64).unwrap(), 1);
                check(a, 1);
                temp.reset();
            }
        }
    }

    #[test]
    fn a_custom_allocators_checkpoint_without_memory_is_an_error() {
        // `AnyTemp::custom` boxes each checkpoint.
        let mut temp = AnyTemp::custom(MallocAllocator::new());
        let refused = failing_from(1, || temp.checkpoint().map(drop));
        assert!(
            matches!(refused, Err(Error::OutOfMemory { size, .. }) if size > 0),
            "{refused:?}"
        );
        let cp = temp.checkpoint().unwrap();
        temp.rewind(cp).unwrap();
    }

    #[test]
    fn a_checkpoint_past_the_records_without_memory_is_an_error() {
        let mut temp = CachingAllocator::with_config(CachingConfig::default());
        KernelContext::new(&temp).scratch::<u8>(100).unwrap();
        let open: Vec<_> = (0..8).map(|_| temp.checkpoint().unwrap()).collect();
        let ninth = failing_from(1, || temp.checkpoint());
        assert!(matches!(ninth, Err(Error::OutOfMemory { .. })), "{ninth:?}");
        let ninth = temp.checkpoint().unwrap();
        temp.rewind(ninth).unwrap();
        for cp in open.into_iter().rev() {
            temp.rewind(cp).unwrap();
        }
    }
}

/// The C API's allocator over a shared cache, created when the global
/// allocator has no memory: NULL and `TEMPALLOC_ERROR_OUT_OF_MEMORY`, never
/// an abort. (Creating a cache, alone or inside `tempalloc_allocator_create`,
/// makes an `Arc`, which stable Rust cannot make fallibly: docs/reliability.md,
/// "Known gaps".)
#[cfg(feature = "capi")]
#[test]
fn c_api_creation_without_memory_is_an_error() {
    use crate::counting::failing_from;
    use tempalloc::capi::*;
    let mut error = TEMPALLOC_OK;
    // SAFETY: `error` is writable; the cache is destroyed once, below.
    let cache = unsafe { tempalloc_block_cache_create(0, 0, &mut error) };
    assert!(!cache.is_null());
    let mut failed = 0;
    for n in 1.. {
        // SAFETY: a live cache, a NULL config (the default), `error` writable.
        let handle = failing_from(n, || unsafe {
            tempalloc_allocator_create_with_cache(cache, std::ptr::null(), &mut error)
        });
        if handle.is_null() {
            assert_eq!(error, TEMPALLOC_ERROR_OUT_OF_MEMORY, "allocation {n}");
            failed += 1;
            continue;
        }
        assert_eq!(error, TEMPALLOC_OK);
        // SAFETY: live handles, each destroyed once.
        unsafe { tempalloc_allocator_destroy(handle) };
        break;
    }
    // SAFETY: as above.
    unsafe { tempalloc_block_cache_destroy(cache) };
    assert!(failed > 0, "creating made no allocation to fail");
}
