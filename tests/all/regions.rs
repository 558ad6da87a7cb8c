//! `CachingAllocator`'s promises in the patterns the docs show: a region for
//! every thread however many there are, memory that follows the threads
//! allocating in a window (not the threads ever seen), per-kernel
//! checkpoints without system calls, budgets that mean what they say, and
//! strict checkpoints.

use std::cell::RefCell;
use std::sync::{Arc, Barrier, Mutex};

use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext, TempAllocator};

use crate::util::{check, fill};

fn fast() -> CachingConfig {
    CachingConfig::default().debug_checks(false)
}

/// `n`, or `small` under Miri.
const fn scaled(n: usize, small: usize) -> usize {
    if cfg!(miri) { small } else { n }
}

/// Panics unless no two of `ranges` (address, length) overlap.
fn assert_disjoint(mut ranges: Vec<(usize, usize)>) {
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {w:?}");
    }
}

/// Each of `threads` threads, all alive at once, takes `buffers` buffers of
/// `size` bytes, writes a pattern, waits for every other thread, and checks
/// its pattern. Returns every buffer's address and length.
fn all_at_once(
    temp: &CachingAllocator,
    threads: usize,
    buffers: usize,
    size: usize,
) -> Vec<(usize, usize)> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let ctx = KernelContext::new(temp);
                    let bufs: Vec<_> = (0..buffers)
                        .map(|i| fill(ctx.allocate_temp(size + i, 64).unwrap(), t * 1000 + i))
                        .collect();
                    barrier.wait();
                    for (i, buf) in bufs.iter().enumerate() {
                        check(buf, t * 1000 + i);
                    }
                    bufs.iter()
                        .map(|b| (b.as_ptr() as usize, b.len()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    })
}

#[test]
fn sixty_four_threads_each_bump_their_own_region() {
    let threads = scaled(64, 6);
    let (buffers, size) = (scaled(16, 3), scaled(16 << 10, 512));
    let mut temp = CachingAllocator::with_config(fast());
    for window in 0..3 {
        let ranges = all_at_once(&temp, threads, buffers, size);
        assert_eq!(ranges.len(), threads * buffers);
        assert_disjoint(ranges);
        let s = temp.stats();
        // One region per thread, each within its first commit (64 KiB) or
        // 12.5% and 16 KiB above what its thread used.
        let per_thread = buffers * (size + buffers) + buffers * 64;
        let bound = threads * (64 << 10).max(per_thread + per_thread / 8 + (16 << 10));
        assert!(s.bytes_held <= bound, "window {window}: {s}");
        temp.reset();
    }
}

#[test]
fn fresh_threads_every_window_reuse_the_memory_of_the_last() {
    // The `thread::scope`-per-kernel pattern: new threads every window.
    let (threads, size) = (4, scaled(4 << 20, 64 << 10));
    let mut temp = CachingAllocator::with_config(fast());
    let mut after_first = None;
    for window in 0..scaled(8, 3) {
        let ranges = all_at_once(&temp, threads, 1, size);
        assert_disjoint(ranges);
        let s = temp.stats();
        // Each window's threads take over the regions (and memory) of the
        // last window's, whether or not their thread ids were reused.
        let after = *after_first.get_or_insert(s.system_allocations);
        assert_eq!(s.system_allocations, after, "window {window}: {s}");
        let live = threads * size;
        if !cfg!(miri) {
            assert!(
                s.bytes_held as f64 <= 1.25 * live as f64,
                "window {window}: {s}"
            );
        }
        temp.reset();
    }
}

/// Each of `threads` threads takes a buffer of `size` bytes and exits before
/// the next starts, leaving its scratch live (until the rewind) and its
/// thread number to the next. Returns every buffer's address and length.
fn one_after_another(temp: &CachingAllocator, threads: usize, size: usize) -> Vec<(usize, usize)> {
    std::thread::scope(|s| {
        (0..threads)
            .map(|t| {
                let worker = s.spawn(move || {
                    let buf = fill(KernelContext::new(temp).allocate_temp(size, 64).unwrap(), t);
                    (buf.as_ptr() as usize, buf.len())
                });
                worker.join().unwrap()
            })
            .collect()
    })
}

#[test]
fn workers_that_exit_early_leave_their_number_but_not_their_scratch() {
    // Fresh threads per kernel, overlapping in some kernels and not in
    // others. A thread that inherits an exited worker's number while that
    // worker's scratch is live must not stack on it: the region would grow
    // to the sum, and every region to the worst case ever seen.
    let (threads, size) = (4, scaled(1 << 20, 64 << 10));
    for config in [fast(), fast().reserve(None)] {
        let mut temp = CachingAllocator::with_config(config);
        let mut warm = None;
        for kernel in 0..scaled(8, 4) {
            let cp = temp.checkpoint().unwrap();
            let ranges = match kernel % 2 {
                0 => all_at_once(&temp, threads, 1, size),
                _ => one_after_another(&temp, threads, size),
            };
            assert_disjoint(ranges);
            let s = temp.stats();
            assert_eq!(s.bytes_live, threads * size, "kernel {kernel}: {s}");
            let after = *warm.get_or_insert((s.system_allocations, s.bytes_held));
            assert_eq!((s.system_allocations, s.bytes_held), after, "kernel {kernel}: {s}");
            temp.rewind(cp).unwrap();
            if kernel % 4 == 3 {
                temp.reset();
            }
        }
    }
}

/// Allocates 100 bytes when the thread's thread-local destructors reach
/// it, and records what that cost in system allocations.
struct OnExit(Arc<CachingAllocator>, Arc<Mutex<Option<u64>>>);

impl Drop for OnExit {
    fn drop(&mut self) {
        let before = self.0.stats().system_allocations;
        let ok = KernelContext::new(&*self.0).allocate_temp(100, 8).is_ok();
        let cost = self.0.stats().system_allocations - before;
        *self.1.lock().unwrap() = ok.then_some(cost);
    }
}

thread_local! {
    static ON_EXIT: RefCell<Option<OnExit>> = const { RefCell::new(None) };
}

/// Runs a thread that registers an [`OnExit`] first, then `then`, and
/// returns what the destructor's request cost, if it was served.
fn on_exit(temp: &Arc<CachingAllocator>, then: impl FnOnce() + Send + 'static) -> Option<u64> {
    let seen = Arc::new(Mutex::new(None));
    let on_exit = OnExit(Arc::clone(temp), Arc::clone(&seen));
    std::thread::spawn(move || {
        // Registered before the thread-number guards that `then` registers,
        // so its destructor runs after theirs.
        ON_EXIT.with(|slot| *slot.borrow_mut() = Some(on_exit));
        then();
    })
    .join()
    .unwrap();
    *seen.lock().unwrap()
}

#[test]
fn a_thread_local_destructor_that_allocates_after_the_thread_gave_its_number_back() {
    let temp = Arc::new(CachingAllocator::with_config(fast()));
    let t = Arc::clone(&temp);
    let cost = on_exit(&temp, move || {
        KernelContext::new(&*t).allocate_temp(100, 8).unwrap();
    });
    // Its region had room, but may be another thread's now: the request
    // took a chunk of its own.
    assert_eq!(cost, Some(1), "{}", temp.stats());
    assert_eq!(temp.stats().bytes_live, 200);
}

#[test]
fn a_late_destructors_first_request_is_served() {
    // The thread never used the allocator, but another `ThreadLocal` gave
    // it a number, which `thread_local`'s guard hands on before the
    // destructor asks for memory: `thread_local` cannot give it another.
    let temp = Arc::new(CachingAllocator::with_config(fast()));
    let other = Arc::new(thread_local::ThreadLocal::<u8>::new());
    let cost = on_exit(&temp, move || {
        other.get_or(|| 1);
    });
    assert_eq!(cost, Some(1), "{}", temp.stats());
    assert_eq!(temp.stats().bytes_live, 100);
}

/// Runs `window` `scaled(8, 5)` times with a reset after each, and panics
/// unless the system allocations stop after the second window.
fn settles(temp: &mut CachingAllocator, mut window: impl FnMut(&CachingAllocator)) {
    let mut seen = Vec::new();
    for _ in 0..scaled(8, 5) {
        window(temp);
        seen.push(temp.stats().system_allocations);
        temp.reset();
    }
    assert!(
        seen[1..].iter().all(|&n| n == seen[1]),
        "system allocations after each window: {seen:?}"
    );
}

#[test]
fn heap_blocks_settle_when_a_worker_allocates_after_the_thread_that_outgrew() {
    // The main thread outgrows its block (8 KiB, then 60 KiB in 64 KiB), and
    // a worker allocates after it. The main thread's first request of the
    // next window must not take the worker's parked block, too small for
    // its peak: it would outgrow it again, and the worker buy another.
    let config = fast().reserve(None).min_block_size(64 << 10);
    settles(&mut CachingAllocator::with_config(config), |temp| {
        let ctx = KernelContext::new(temp);
        fill(ctx.allocate_temp(8 << 10, 64).unwrap(), 1);
        fill(ctx.allocate_temp(60 << 10, 64).unwrap(), 2);
        std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let buf = KernelContext::new(temp).allocate_temp(64 << 10, 64);
                fill(buf.unwrap(), 3).len()
            });
            assert_eq!(worker.join().unwrap(), 64 << 10);
        });
    });
}

#[test]
fn heap_blocks_settle_when_one_block_needs_more_padding_than_the_chain() {
    // Across two blocks the 64-aligned request starts a block and needs no
    // padding; in one block it needs 28 bytes. The peak must count them, or
    // a 64 KiB block "holds the peak" and every window outgrows it.
    let config = fast().reserve(None).min_block_size(16 << 10);
    settles(&mut CachingAllocator::with_config(config), |temp| {
        let ctx = KernelContext::new(temp);
        fill(ctx.allocate_temp(100, 8).unwrap(), 1);
        fill(ctx.allocate_temp((64 << 10) - 100, 64).unwrap(), 2);
    });
}

#[test]
fn an_exited_workers_parked_chunk_serves_a_thread_that_outgrew_its_own() {
    // (config, the main thread's first request, the worker's, the main
    // thread's second, the limit). Under the limit the main thread's second
    // request fits only in the exited worker's parked chunk; without a
    // limit, taking it over saves a system allocation.
    let cases = [
        // Heap blocks: 64 KiB for the main thread, 104 KiB for the worker.
        (fast().reserve(None), 60 << 10, 100 << 10, 100 << 10, 208 << 10),
        // Small reservations: each thread commits 200 KiB of 256 KiB.
        (fast().reserve(Some(256 << 10)), 200 << 10, 200 << 10, 100 << 10, 480 << 10),
    ];
    for (config, first, worker, second, limit) in cases {
        for limit in [Some(limit), None] {
            let mut temp = CachingAllocator::with_config(config.max_bytes(limit));
            fill(KernelContext::new(&temp).allocate_temp(first, 64).unwrap(), 1);
            std::thread::scope(|s| {
                s.spawn(|| KernelContext::new(&temp).allocate_temp(worker, 64).map(drop));
            });
            temp.reset();
            let held = temp.stats().bytes_held;
            settles(&mut temp, |temp| {
                let ctx = KernelContext::new(temp);
                fill(ctx.allocate_temp(first, 64).unwrap(), 1);
                fill(ctx.allocate_temp(second, 64).unwrap(), 2);
            });
            // The worker's chunk served; nothing more was needed.
            let s = temp.stats();
            assert!(s.bytes_held <= held, "{:?}, limit {limit:?}: {s}", config.reserve);
        }
    }
}

#[test]
fn under_a_shared_limit_parked_chunks_make_room() {
    use tempalloc::BlockCache;

    let cache = Arc::new(BlockCache::with_limits(0, Some(200 << 10)));
    let config = fast().reserve(None).min_block_size(16 << 10);
    let mut x = CachingAllocator::with_cache(Arc::clone(&cache), config);
    let y = CachingAllocator::with_cache(cache, config);
    // The main thread outgrows its block (its peak is now 108 KiB, and the
    // reset leaves it no block); a worker leaves a 20 KiB block parked.
    let ctx = KernelContext::new(&x);
    fill(ctx.allocate_temp(8 << 10, 64).unwrap(), 1);
    fill(ctx.allocate_temp(100 << 10, 64).unwrap(), 2);
    std::thread::scope(|s| {
        s.spawn(|| KernelContext::new(&x).allocate_temp(20 << 10, 64).map(drop));
    });
    x.reset();
    // Another allocator on the cache leaves 20 KiB under the limit.
    KernelContext::new(&y).allocate_temp(160 << 10, 64).unwrap();
    // 30 KiB fits only once the parked block, too small for the request,
    // goes back.
    let buf = KernelContext::new(&x).allocate_temp(30 << 10, 64);
    assert_eq!(fill(buf.unwrap(), 3).len(), 30 << 10, "{}", x.stats());
}

#[test]
fn a_request_over_the_limit_leaves_the_parked_chunks_alone() {
    // A kernel probes for a workspace larger than the limit, then a worker
    // allocates. The refused probe must not take the worker's parked chunk
    // (and give it back): the worker would buy a new one every window.
    for config in [fast().reserve(None), fast()] {
        let mut temp = CachingAllocator::with_config(config.max_bytes(Some(1 << 20)));
        settles(&mut temp, |temp| {
            let ctx = KernelContext::new(temp);
            fill(ctx.allocate_temp(8 << 10, 64).unwrap(), 1);
            let probe = ctx.allocate_temp(2 << 20, 64);
            assert!(matches!(probe, Err(Error::BudgetExceeded { .. })), "{probe:?}");
            std::thread::scope(|s| {
                s.spawn(|| fill(KernelContext::new(temp).allocate_temp(100 << 10, 64).unwrap(), 2).len());
            });
        });
    }
}

#[test]
fn under_a_limit_a_spare_reservation_grows_once_the_others_make_room() {
    // The main thread outgrows its 256 KiB reservation while two parked
    // workers' reservations hold 64 and 152 KiB. Committing more of the
    // larger one fits the limit only once the smaller one goes back.
    let k = 1 << 10;
    let config = fast().reserve(Some(256 * k)).min_block_size(64 * k);
    let mut temp = CachingAllocator::with_config(config.max_bytes(Some(440 * k)));
    fill(KernelContext::new(&temp).allocate_temp(200 * k, 64).unwrap(), 1);
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        for size in [40 * k, 150 * k] {
            let (temp, barrier) = (&temp, &barrier);
            s.spawn(move || {
                let buf = KernelContext::new(temp).allocate_temp(size, 64);
                barrier.wait();
                fill(buf.unwrap(), 2).len()
            });
        }
    });
    temp.reset();
    let ctx = KernelContext::new(&temp);
    fill(ctx.allocate_temp(200 * k, 64).unwrap(), 1);
    let second = ctx.allocate_temp(180 * k, 64).map(|buf| fill(buf, 3).len());
    assert_eq!(second, Ok(180 * k), "{}", temp.stats());
}

#[test]
fn a_probe_over_the_limit_by_less_than_a_size_class_leaves_the_parked_chunks_alone() {
    // Heap blocks come in size classes: a 520 KiB request needs a 576 KiB
    // block, which giving back the worker's parked block cannot make room
    // for under 600 KiB. The probe must not strip it anyway.
    let k = 1 << 10;
    let mut temp = CachingAllocator::with_config(fast().reserve(None).max_bytes(Some(600 * k)));
    settles(&mut temp, |temp| {
        let ctx = KernelContext::new(temp);
        fill(ctx.allocate_temp(8 * k, 64).unwrap(), 1);
        let probe = ctx.allocate_temp(520 * k, 64);
        assert!(matches!(probe, Err(Error::BudgetExceeded { .. })), "{probe:?}");
        std::thread::scope(|s| {
            s.spawn(|| fill(KernelContext::new(temp).allocate_temp(100 * k, 64).unwrap(), 2).len());
        });
    });
}

#[test]
fn growing_in_place_under_a_limit_takes_the_room_of_parked_chunks() {
    // The default, mapped regions grow in place: giving back the exited
    // worker's 200 KiB makes room for the main thread's 900 KiB in 1 MiB.
    let k = 1 << 10;
    let mut temp = CachingAllocator::with_config(fast().max_bytes(Some(1024 * k)));
    fill(KernelContext::new(&temp).allocate_temp(8 * k, 64).unwrap(), 1);
    std::thread::scope(|s| {
        s.spawn(|| fill(KernelContext::new(&temp).allocate_temp(200 * k, 64).unwrap(), 2).len());
    });
    temp.reset();
    let big = KernelContext::new(&temp).allocate_temp(900 * k, 64).map(|b| fill(b, 3).len());
    assert_eq!(big, Ok(900 * k), "{}", temp.stats());
}

#[test]
fn an_idle_reservation_in_the_cache_counts_as_room() {
    // Another allocator released a reservation into the shared cache
    // (64 KiB committed, idle). The cache refuses the main thread's 300 KiB
    // with the idle bytes still in its count; with them and the worker's
    // parked chunk given back, it fits.
    use tempalloc::BlockCache;
    let k = 1 << 10;
    let cache = Arc::new(BlockCache::with_limits(1 << 20, Some(340 * k)));
    let mut x = CachingAllocator::with_cache(Arc::clone(&cache), fast().reserve(Some(256 * k)));
    let mut y = CachingAllocator::with_cache(Arc::clone(&cache), fast().reserve(Some(400 * k)));
    std::thread::scope(|s| {
        s.spawn(|| fill(KernelContext::new(&x).allocate_temp(150 * k, 64).unwrap(), 1).len());
    });
    x.reset();
    fill(KernelContext::new(&y).allocate_temp(10 * k, 64).unwrap(), 2);
    y.release();
    let big = KernelContext::new(&x).allocate_temp(300 * k, 64).map(|b| fill(b, 3).len());
    assert_eq!(big, Ok(300 * k), "{}; cache: {}", x.stats(), cache.stats());
}

#[test]
fn a_region_that_must_move_while_empty_starts_over_at_its_size() {
    // A window of 300 KiB after one of 200 KiB: the region holds nothing
    // but cannot serve it in place (a 256 KiB reservation, or a heap block).
    // It must not chain a chunk twice its first one and keep both sizes.
    let k = 1 << 10;
    for config in [fast().reserve(Some(256 * k)), fast().reserve(None)] {
        let mut temp = CachingAllocator::with_config(config);
        for size in [200 * k, 300 * k] {
            fill(KernelContext::new(&temp).allocate_temp(size, 64).unwrap(), 1);
            temp.reset();
        }
        let s = temp.stats();
        let most = s.high_water + s.high_water / 8 + 16 * k;
        assert!(s.bytes_held <= most, "{:?}: {s}", config.reserve);
    }
}

#[test]
fn a_region_whose_peak_passed_its_reservation_settles() {
    // One window moves the region past a 256 KiB reservation (a 32-bit
    // target reserves 64 MiB); after a release, the next reservation must
    // hold the peak, or every reset would give it back.
    let mut temp = CachingAllocator::with_config(fast().reserve(Some(256 << 10)));
    let ctx = KernelContext::new(&temp);
    fill(ctx.allocate_temp(200 << 10, 64).unwrap(), 1);
    fill(ctx.allocate_temp(100 << 10, 64).unwrap(), 2);
    temp.reset();
    temp.release();
    settles(&mut temp, |temp| {
        fill(KernelContext::new(temp).allocate_temp(100 << 10, 64).unwrap(), 3);
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "under Miri regions are heap blocks, which trim keeps whole"
)]
fn trim_forgets_the_peak_so_later_windows_grow_to_what_they_use() {
    let (big, small) = (8 << 20, 256 << 10);
    let mut temp = CachingAllocator::with_config(fast());
    KernelContext::new(&temp).allocate_temp(big, 64).unwrap();
    temp.reset();
    temp.trim();
    for _ in 0..3 {
        KernelContext::new(&temp).allocate_temp(small, 64).unwrap();
        let s = temp.stats();
        temp.reset();
        // Within the growth step of what is used, not the old peak.
        assert!(s.bytes_held <= small + small / 8 + (64 << 10), "{s}");
    }
}

#[test]
fn the_per_kernel_checkpoint_pattern_takes_memory_once() {
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
fn the_per_kernel_checkpoint_pattern_with_four_fresh_threads_per_kernel() {
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
fn a_request_is_served_while_held_plus_need_fits_the_limit() {
    let limit = 1536 << 10; // 1.5 MiB
    for config in [fast(), fast().debug_checks(true), fast().reserve(None)] {
        let temp = CachingAllocator::with_config(config.max_bytes(Some(limit)));
        let ctx = KernelContext::new(&temp);
        let mut served = 0;
        let err = loop {
            match ctx.allocate_temp(1000, 8) {
                Ok(buf) => served += buf.len(),
                Err(e) => break e,
            }
        };
        let Error::BudgetExceeded {
            requested,
            held,
            limit: l,
        } = err
        else {
            panic!("{config:?}: {err}");
        };
        assert_eq!((requested, l), (1000, limit), "{config:?}");
        assert!(held <= limit, "{config:?}: {err}");
        // Refused only when the next page (and, for heap blocks, the next
        // whole block) does not fit: nearly all of the limit was served.
        let mut slack = if config.reserve.is_some() {
            2 * 4096 + 16 * 1024
        } else {
            limit / 2
        };
        if config.debug_checks {
            slack += served / 1000 * 16; // a canary after every buffer
        }
        assert!(
            served + slack >= limit,
            "{config:?}: {served} B served, {err}"
        );
        assert!(err.to_string().contains(&limit.to_string()), "{err}");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "under Miri regions are heap blocks, which cannot grow in place"
)]
fn growth_never_asks_for_more_than_the_limit_allows() {
    // A request that fits exactly what is left is served, though growth by
    // 12.5% would pass the limit.
    let limit = 1 << 20;
    let temp = CachingAllocator::with_config(fast().max_bytes(Some(limit)).min_block_size(4096));
    let ctx = KernelContext::new(&temp);
    let a = fill(ctx.allocate_temp(900 << 10, 4096).unwrap(), 1);
    let b = fill(ctx.allocate_temp((1 << 20) - (900 << 10), 4096).unwrap(), 2);
    check(a, 1);
    check(b, 2);
    assert!(temp.stats().bytes_held <= limit);
    assert!(matches!(
        ctx.allocate_temp(1, 1),
        Err(Error::BudgetExceeded { .. })
    ));
}

#[test]
fn the_dedicated_threshold_is_the_same_on_every_path() {
    for debug_checks in [false, true] {
        let config = fast()
            .debug_checks(debug_checks)
            .dedicated_threshold(Some(8 << 10));
        let mut temp = CachingAllocator::with_config(config);
        // Warm the region so the request would fit in it.
        KernelContext::new(&temp).allocate_temp(100, 8).unwrap();
        let before = temp.stats();
        let big = fill(
            KernelContext::new(&temp).allocate_temp(10_000, 64).unwrap(),
            3,
        );
        check(big, 3);
        let during = temp.stats();
        // Its own memory, taken for it...
        assert_eq!(
            during.system_allocations,
            before.system_allocations + 1,
            "checks {debug_checks}: {during}"
        );
        temp.reset();
        // ...and given back at the reset.
        let after = temp.stats();
        assert!(
            after.system_frees > during.system_frees,
            "checks {debug_checks}: {after}"
        );
        assert!(
            after.bytes_held < during.bytes_held,
            "checks {debug_checks}: {after}"
        );
    }
}

#[test]
fn every_checkpoint_rule_is_an_error_that_names_it() {
    let mut temp = CachingAllocator::with_config(fast());
    let other = CachingAllocator::with_config(fast());
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
    let mut temp = CachingAllocator::with_config(fast());
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
#[cfg_attr(
    miri,
    ignore = "Miri has no reservations: every test there runs on heap blocks"
)]
fn a_refused_reservation_falls_back_to_heap_blocks() {
    // No system maps 2^62 bytes of address space (nor does `ulimit -v`
    // allow much less): the region falls back to heap blocks.
    let mut temp = CachingAllocator::with_config(fast().reserve(Some(crate::util::HUGE)));
    for _ in 0..3 {
        let ctx = KernelContext::new(&temp);
        let a = fill(ctx.allocate_temp(100_000, 64).unwrap(), 1);
        let b = fill(ctx.allocate_temp(300_000, 4096).unwrap(), 2);
        check(a, 1);
        check(b, 2);
        temp.reset();
    }
    let s = temp.stats();
    assert!(s.bytes_held >= 400_000, "{s}");
    // Converged on one block: the last windows took nothing new.
    let before = s.system_allocations;
    KernelContext::new(&temp)
        .allocate_temp(400_000, 64)
        .unwrap();
    temp.reset();
    assert_eq!(temp.stats().system_allocations, before);
}

#[test]
fn trim_gives_pages_back_and_the_next_window_takes_them_again() {
    let mut temp = CachingAllocator::with_config(fast());
    let kept = fill(
        KernelContext::new(&temp).allocate_temp(10_000, 64).unwrap(),
        4,
    )
    .as_ptr();
    let cp = temp.checkpoint().unwrap();
    KernelContext::new(&temp)
        .allocate_temp(2 << 20, 64)
        .unwrap();
    temp.rewind(cp).unwrap();
    let before = temp.stats();
    temp.trim();
    let after = temp.stats();
    if !cfg!(miri) {
        // Everything above the live 10 000 bytes went back.
        assert!(after.bytes_held < 64 << 10, "{after}");
        assert!(after.system_frees > before.system_frees, "{after}");
    }
    // What was live is intact, and the allocator serves as before.
    // SAFETY: 10 000 bytes taken before the checkpoint, not reset since.
    check(unsafe { std::slice::from_raw_parts(kept, 10_000) }, 4);
    let big = fill(
        KernelContext::new(&temp)
            .allocate_temp(2 << 20, 64)
            .unwrap(),
        5,
    );
    check(big, 5);
}
