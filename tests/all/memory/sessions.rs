//! One thread serves several allocators (a session each, say) that share a
//! cache under one budget: it keeps one region in each, idle memory moves
//! between sessions within each one's own limit, and the books of every
//! allocator and of the cache balance, whatever fails.

use std::sync::Arc;
use tempalloc::testing::SystemCall;
use tempalloc::{BlockCache, CachingAllocator, CachingConfig, Error, KernelContext, TempAllocator};

use crate::util::{Refusing, check, fill, page, served_or_refused};

fn cfg() -> CachingConfig {
    CachingConfig::default().debug_checks(false)
}

/// A thread that goes back and forth between two allocators in one window
/// keeps one region in each (it takes its own lease back), so each holds a
/// page, not a region per switch.
#[test]
fn a_thread_switching_between_allocators_keeps_one_region_in_each() {
    let a = CachingAllocator::with_config(cfg());
    let b = CachingAllocator::with_config(cfg());
    let (ca, cb) = (KernelContext::new(&a), KernelContext::new(&b));
    for _ in 0..50 {
        ca.allocate_temp(64, 8).unwrap();
        cb.allocate_temp(64, 8).unwrap();
    }
    let (ha, hb) = (a.stats().bytes_held, b.stats().bytes_held);
    assert!(ha <= page() && hb <= page(), "a {ha}, b {hb}");
}

/// The same under a limit of a few pages: 50 x 64 B live fits.
#[test]
fn switching_between_allocators_fits_a_small_limit() {
    let limit = 8 * page();
    let a = CachingAllocator::with_config(cfg().max_bytes(Some(limit)));
    let b = CachingAllocator::with_config(cfg().max_bytes(Some(limit)));
    let (ca, cb) = (KernelContext::new(&a), KernelContext::new(&b));
    for i in 0..50 {
        ca.allocate_temp(64, 8)
            .map_err(|e| format!("a at {i}: {e}"))
            .unwrap();
        cb.allocate_temp(64, 8)
            .map_err(|e| format!("b at {i}: {e}"))
            .unwrap();
    }
}

#[test]
fn switching_between_allocators_reserves_address_space_once() {
    let a = CachingAllocator::with_config(cfg());
    let b = CachingAllocator::with_config(cfg());
    let (ca, cb) = (KernelContext::new(&a), KernelContext::new(&b));
    for _ in 0..crate::scenarios::scaled(3000, 30) {
        ca.allocate_temp(64, 8).unwrap();
        cb.allocate_temp(64, 8).unwrap();
    }
    // One reservation each, however many switches; a third allocator still
    // gets one of its own.
    assert_eq!(
        a.cache().stats().reservations,
        b.cache().stats().reservations
    );
    assert!(a.cache().stats().reservations <= 1, "{}", a.cache().stats());
    let c = CachingAllocator::with_config(cfg());
    KernelContext::new(&c).allocate_temp(64, 8).unwrap();
    let s = c.cache().stats();
    let region = if crate::scenarios::mapped() {
        (1, 0)
    } else {
        (0, 1)
    };
    assert_eq!((s.reservations, s.heap_blocks), region, "{s}");
}

/// Another session's idle reservation, with more committed than this
/// session's limit, still serves a small request: the excess is given back.
#[test]
fn a_large_idle_reservation_serves_a_session_with_a_small_limit() {
    let cache = Arc::new(BlockCache::with_idle_budget(64 << 20));
    let mut big = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    KernelContext::new(&big).allocate_temp(8 << 20, 64).unwrap();
    big.release(); // 8 MiB committed, idle in the cache
    assert!(cache.idle_bytes() >= 8 << 20);
    let small = CachingAllocator::with_cache(Arc::clone(&cache), cfg().max_bytes(Some(1 << 20)));
    let r = KernelContext::new(&small).allocate_temp(4096, 64);
    r.unwrap();
}

/// A commit the system refuses on an idle reservation is not an error: new
/// memory serves instead.
#[test]
fn a_refused_commit_on_an_idle_reservation_moves_to_other_memory() {
    let cache = Arc::new(BlockCache::with_idle_budget(64 << 20));
    let mut a = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    KernelContext::new(&a).allocate_temp(1 << 20, 64).unwrap();
    a.release();
    assert!(cache.idle_bytes() >= 1 << 20);
    let b = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    let refusing = Refusing::calls(SystemCall::Commit, 0, 1);
    let r = KernelContext::new(&b)
        .allocate_temp(2 << 20, 64)
        .map(|s| s.len());
    drop(refusing);
    r.unwrap();
}

/// After random windows (threads, trims, releases, rewinds, limits, retain
/// caps), an allocator with a cache of its own holds what the cache holds.
#[test]
fn the_counts_match_the_cache_after_random_windows() {
    let p = page();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for config in [
        cfg(),
        cfg().reserve(None),
        cfg().max_bytes(Some(200 * p)),
        cfg().max_bytes(Some(200 * p)).retain(Some(20 * p)),
        cfg().reserve(None).retain(Some(20 * p)),
        cfg()
            .dedicated_threshold(Some(10 * p))
            .max_bytes(Some(100 * p)),
    ] {
        let mut temp = CachingAllocator::with_config(config);
        // Under Miri four rounds per configuration: 24 in all, enough draws
        // of trim, release, rewind and reset between windows.
        for round in 0..crate::scenarios::scaled(200, 4) {
            {
                // At most two under Miri, where each thread's spawn and
                // first request cost most of a round: one or two threads
                // still lease, return and leave FREE regions behind.
                let threads = (1 + rnd(4) as usize).min(if cfg!(miri) { 2 } else { 4 });
                let sizes: Vec<Vec<usize>> = (0..threads)
                    .map(|_| {
                        (0..rnd(10))
                            .map(|_| 1 + rnd(20 * p as u64) as usize)
                            .collect()
                    })
                    .collect();
                let temp = &temp;
                std::thread::scope(|s| {
                    for sz in &sizes {
                        s.spawn(move || {
                            let ctx = KernelContext::new(temp);
                            for &n in sz {
                                served_or_refused(ctx.allocate_temp(n, 64));
                            }
                        });
                    }
                });
            }
            match rnd(5) {
                0 => temp.trim(),
                1 => temp.release(),
                2 => {
                    let cp = temp.checkpoint().unwrap();
                    served_or_refused(
                        KernelContext::new(&temp).allocate_temp(rnd(30 * p as u64) as usize + 1, 8),
                    );
                    temp.rewind(cp).unwrap();
                }
                _ => temp.reset(),
            }
            let (s, c) = (temp.stats(), temp.cache().stats());
            assert_eq!(
                s.bytes_held, c.bytes_held,
                "round {round}: {config:?}\n{s:?}\n{c}"
            );
            assert_eq!(c.idle_bytes, 0);
        }
    }
}

/// Two allocators over one cache with an idle budget and a limit, through
/// random requests, resets, rewinds, trims, releases, injected failures and
/// refused commits and decommits: the books balance, and no limit is passed.
#[test]
fn shared_cache_counts_balance_under_faults() {
    use tempalloc::testing::{fail_nth_allocation, refuse_system_calls};
    let p = page();
    let mut seed = 0x2545f4914f6cdd1du64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for (reserve, own) in [
        (true, None),
        (true, Some(60 * p)),
        (false, None),
        (false, Some(60 * p)),
    ] {
        let cache = Arc::new(BlockCache::with_limits(30 * p, Some(150 * p)));
        let mk = || {
            let c = cfg().max_bytes(own).dedicated_threshold(Some(25 * p));
            let c = if reserve { c } else { c.reserve(None) };
            CachingAllocator::with_cache(Arc::clone(&cache), c)
        };
        let mut ts = [mk(), mk()];
        for round in 0..crate::scenarios::scaled(3000, 40) {
            let i = rnd(2) as usize;
            match rnd(12) {
                0 => fail_nth_allocation(&cache, 1 + rnd(3)),
                1 => refuse_system_calls(SystemCall::Commit, rnd(3) as u32, 1),
                2 => refuse_system_calls(SystemCall::Decommit, rnd(2) as u32, 1),
                3 => ts[i].trim(),
                4 => ts[i].release(),
                5 => ts[i].reset(),
                6 => {
                    let cp = ts[i].checkpoint().unwrap();
                    for _ in 0..rnd(4) {
                        served_or_refused(
                            KernelContext::new(&ts[i])
                                .allocate_temp(1 + rnd(30 * p as u64) as usize, 64),
                        );
                    }
                    ts[i].rewind(cp).unwrap();
                }
                7 => {
                    cache.evict_idle(rnd(20 * p as u64) as usize);
                }
                _ => {
                    served_or_refused(
                        KernelContext::new(&ts[i])
                            .allocate_temp(1 + rnd(30 * p as u64) as usize, 1 << rnd(14)),
                    );
                }
            }
            let c = cache.stats();
            let mine: usize = ts.iter().map(|t| t.stats().bytes_held).sum();
            assert_eq!(
                mine + c.idle_bytes,
                c.bytes_held,
                "round {round} reserve {reserve} own {own:?}: {c}"
            );
            assert!(c.bytes_held <= 150 * p, "round {round}: {c}");
            if let Some(own) = own {
                assert!(
                    ts.iter().all(|t| t.stats().bytes_held <= own),
                    "round {round}"
                );
            }
        }
        for call in [SystemCall::Commit, SystemCall::Decommit] {
            refuse_system_calls(call, 0, 0);
        }
        fail_nth_allocation(&cache, 0);
    }
}

/// Two sessions under one hard limit that does not hold both: the memory of
/// the one between inferences (no window of it is using it) serves the
/// other before it is refused, and the first grows again at its next
/// inference (its stats show it). Where regions are reserved or not.
#[test]
fn a_session_takes_back_the_idle_memory_of_another_before_it_is_refused() {
    let p = page();
    for config in [cfg(), cfg().reserve(None)] {
        let cache = Arc::new(BlockCache::with_limits(0, Some(64 * p)));
        let mut a = CachingAllocator::with_cache(Arc::clone(&cache), config);
        let mut b = CachingAllocator::with_cache(Arc::clone(&cache), config);
        let inference = |temp: &mut CachingAllocator, seed: usize| {
            let ctx = KernelContext::new(temp);
            let got = ctx.allocate_temp(40 * p, 64).map(|m| fill(m, seed));
            let got = got.map(|m| check(m, seed));
            temp.reset();
            got
        };
        inference(&mut a, 1).unwrap();
        let a_held = a.stats().bytes_held;
        assert!(a_held >= 40 * p, "{config:?}: {}", a.stats());
        // B needs what A holds: A's memory goes back first.
        inference(&mut b, 2).unwrap_or_else(|e| panic!("{config:?}: {e}"));
        assert!(a.stats().bytes_held < a_held, "{config:?}: {}", a.stats());
        assert!(
            cache.stats().bytes_held <= 64 * p,
            "{config:?}: {}",
            cache.stats()
        );
        // A's next inference grows again, from B's memory now.
        let before = a.stats().system_allocations;
        inference(&mut a, 3).unwrap_or_else(|e| panic!("{config:?}: {e}"));
        assert!(
            a.stats().system_allocations > before,
            "{config:?}: {}",
            a.stats()
        );
    }
}

/// What a session uses in its window is never taken back: the other is
/// refused, with the numbers, and the scratch stays as it was.
#[test]
fn memory_a_session_uses_in_its_window_is_never_taken_back() {
    let p = page();
    let cache = Arc::new(BlockCache::with_limits(0, Some(64 * p)));
    let a = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    let b = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    let ctx = KernelContext::new(&a);
    let live = fill(ctx.allocate_temp(40 * p, 64).unwrap(), 7);
    let err = KernelContext::new(&b)
        .allocate_temp(40 * p, 64)
        .unwrap_err();
    assert!(
        matches!(err, Error::BudgetExceeded { requested, limit, .. } if requested == 40 * p && limit == 64 * p),
        "{err}"
    );
    check(live, 7);
}

/// `retain` is a session's floor: another session never takes it below
/// that, and is refused, with the numbers, when only that would make room.
#[test]
fn a_sessions_retain_cap_is_its_floor() {
    if !crate::scenarios::mapped() {
        // A heap block cannot shrink to the cap: the reset gives it back.
        return;
    }
    let p = page();
    let cache = Arc::new(BlockCache::with_limits(0, Some(64 * p)));
    let mut a = CachingAllocator::with_cache(Arc::clone(&cache), cfg().retain(Some(24 * p)));
    let b = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    KernelContext::new(&a).allocate_temp(40 * p, 64).unwrap();
    a.reset();
    let floor = a.stats().bytes_held;
    assert!((20 * p..=24 * p).contains(&floor), "{}", a.stats());
    let err = KernelContext::new(&b)
        .allocate_temp(48 * p, 64)
        .unwrap_err();
    assert!(matches!(err, Error::BudgetExceeded { .. }), "{err}");
    assert_eq!(a.stats().bytes_held, floor);
    // What the floor leaves is served.
    let got = KernelContext::new(&b).allocate_temp(64 * p - floor, 64);
    check(fill(got.unwrap(), 3), 3);
    assert_eq!(a.stats().bytes_held, floor);
}

/// A reclaim the system refuses (the pages of the other session's region
/// cannot be decommitted) refuses the request with the numbers; both
/// sessions stay usable and their books balance with the cache's.
#[test]
fn a_reclaim_the_system_refuses_refuses_the_request() {
    if !crate::scenarios::mapped() {
        return; // heap blocks are freed, which the system does not refuse
    }
    let p = page();
    let cache = Arc::new(BlockCache::with_limits(0, Some(64 * p)));
    let mut a = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    let mut b = CachingAllocator::with_cache(Arc::clone(&cache), cfg());
    KernelContext::new(&a).allocate_temp(40 * p, 64).unwrap();
    a.reset();
    let refusing = Refusing::every(SystemCall::Decommit);
    let refused = KernelContext::new(&b).allocate_temp(40 * p, 64).map(|_| ());
    drop(refusing);
    assert!(
        matches!(refused, Err(Error::BudgetExceeded { .. })),
        "{refused:?}"
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.bytes_held + sb.bytes_held, cache.stats().bytes_held);
    b.reset();
    // With the system willing again, the same request is served.
    check(
        fill(KernelContext::new(&b).allocate_temp(40 * p, 64).unwrap(), 5),
        5,
    );
    a.release();
    b.release();
}
