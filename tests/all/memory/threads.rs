//! Any number of threads share one `CachingAllocator`, each with scratch
//! no other thread touches: all at once (64 of them), fresh threads every
//! window or kernel, persistent pools, workers that exit early, and
//! thread-local destructors that allocate late. Memory held follows the
//! threads that allocate in one window, never the threads ever seen.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Mutex};

use tempalloc::{CachingAllocator, KernelContext, TempAllocator};

use crate::counting::counts;
use crate::scenarios::{
    all_at_once, assert_disjoint, fast, fresh_threads, mapped, one_after_another, page, persistent,
    range, scaled, settled_from,
};
use crate::util::{Lcg, check, fill};

fn fast_allocator() -> CachingAllocator {
    CachingAllocator::with_config(fast())
}

#[test]
fn sixty_four_threads_at_once_get_disjoint_scratch_and_a_region_each() {
    let threads = scaled(64, 6);
    let (buffers, size) = (scaled(16, 3), scaled(16 << 10, 512));
    let mut temp = fast_allocator();
    for window in 0..3 {
        let ranges = all_at_once(&temp, threads, buffers, size);
        assert_eq!(ranges.len(), threads * buffers);
        assert_disjoint(ranges);
        let s = temp.stats();
        // One region per thread, each within 12.5% and a page of what its
        // thread used (its buffers and their padding).
        let per_thread = buffers * (size + buffers) + buffers * 64;
        let bound = threads * (per_thread + per_thread / 8 + page());
        if window >= settled_from() {
            assert!(s.bytes_held <= bound, "window {window}: {s}");
        }
        temp.reset();
    }
}

#[test]
fn fresh_threads_every_window_reuse_the_memory_of_the_last() {
    // The `thread::scope`-per-kernel pattern: new threads every window.
    let (threads, size) = (4, scaled(1 << 20, 64 << 10));
    let mut temp = fast_allocator();
    let mut after_first = None;
    for window in 0..scaled(8, 3) {
        let ranges = all_at_once(&temp, threads, 1, size);
        assert_disjoint(ranges);
        let s = temp.stats();
        // Each window's threads lease the regions (and memory) the last
        // window's left.
        let after = *after_first.get_or_insert(s.system_allocations);
        assert_eq!(s.system_allocations, after, "window {window}: {s}");
        // One request per thread: a mapped region's first commit, or one
        // heap block of its size class, either way within 1.25x.
        let live = threads * size;
        assert!(
            s.bytes_held as f64 <= 1.25 * live as f64,
            "window {window}: {s}"
        );
        temp.reset();
    }
}

/// `threads` fresh threads, all alive at once, each take `size` bytes.
/// Returns the allocations they made from the global allocator while
/// doing so (a new region is one), summed.
fn fresh_threads_counting(temp: &CachingAllocator, threads: usize, size: usize) -> u64 {
    let allocs = fresh_threads(threads, |t, barrier| {
        let before = counts().allocs;
        let buf = fill(KernelContext::new(temp).allocate_temp(size, 64).unwrap(), t);
        let allocs = counts().allocs - before;
        barrier.wait();
        check(buf, t);
        allocs
    });
    allocs.iter().sum()
}

#[test]
fn memory_held_follows_the_threads_of_one_window_not_the_threads_ever_seen() {
    let (most, size) = (4, scaled(64 << 10, 16 << 10));
    let mut temp = fast_allocator();
    // One to four threads allocate: held grows with them, and the first
    // threads' requests make regions (global allocations this test sees).
    let mut held = 0;
    for threads in 1..=most {
        let allocs = fresh_threads_counting(&temp, threads, size);
        let s = temp.stats();
        assert!(s.bytes_held > held, "{threads} threads: {s}");
        assert!(
            allocs > 0,
            "{threads} threads: a new region is an allocation"
        );
        held = s.bytes_held;
        temp.reset();
    }
    // Then a hundred windows of one to four fresh threads each: every one
    // leases a region an earlier thread left. No new region, no memory.
    let warm = temp.stats();
    for window in 0..scaled(100, 4) {
        let threads = 1 + window % most;
        let allocs = fresh_threads_counting(&temp, threads, size);
        let s = temp.stats();
        assert_eq!(
            allocs, 0,
            "window {window}, {threads} threads: a new region"
        );
        assert_eq!(
            (s.bytes_held, s.system_allocations),
            (warm.bytes_held, warm.system_allocations),
            "window {window}, {threads} threads: {s}"
        );
        temp.reset();
    }
}

#[test]
fn fresh_threads_with_unequal_shares_hold_at_most_the_largest_share_each() {
    // A fresh thread leases the FREE region that holds the most, whatever
    // its share: when the busiest thread starts first every window, held
    // memory is each share plus a growth step; in another order every
    // region can grow to the largest share ("Shares that vary"), and a
    // limit of the largest share plus a step per thread serves.
    let (big, small) = (scaled(64, 8) * page(), scaled(4, 1) * page());
    let step = |share: usize| {
        if mapped() {
            share + (share / 8).max(page())
        } else {
            2 * share + page()
        }
    };
    for busiest_first in [true, false] {
        let bound = if busiest_first {
            step(big) + step(small)
        } else {
            2 * step(big)
        };
        let mut temp = CachingAllocator::with_config(fast().max_bytes(Some(bound)));
        for window in 0..4 {
            let order = if busiest_first || window % 2 == 0 {
                [big, small]
            } else {
                [small, big]
            };
            for (t, share) in order.into_iter().enumerate() {
                // One after the other: an exited thread keeps its region
                // leased until the reset, so the second leases another.
                std::thread::scope(|s| {
                    s.spawn(|| {
                        let ctx = KernelContext::new(&temp);
                        let mut kept = Vec::new();
                        for i in 0..share / page() {
                            kept.push(fill(ctx.allocate_temp(page(), 64).unwrap(), t + i));
                        }
                        for (i, buffer) in kept.into_iter().enumerate() {
                            check(buffer, t + i);
                        }
                    });
                });
            }
            temp.reset();
            let held = temp.stats().bytes_held;
            assert!(
                held <= bound,
                "busiest first {busiest_first}, window {window}: {held} held, bound {bound}"
            );
        }
    }
}

#[test]
fn a_thread_that_exits_mid_window_keeps_its_region_until_the_reset() {
    // Its scratch stays live and its region leased: the threads that come
    // after it in the window take other regions, and the next window's
    // threads take over its memory.
    let size = scaled(1 << 20, 32 << 10);
    let mut temp = fast_allocator();
    let exited = std::thread::scope(|s| {
        s.spawn(|| {
            fill(
                KernelContext::new(&temp).allocate_temp(size, 64).unwrap(),
                77,
            )
        })
        .join()
        .unwrap()
    });
    let mut ranges = all_at_once(&temp, 3, 1, size);
    ranges.push(range(exited));
    assert_disjoint(ranges);
    check(exited, 77);
    let warm = temp.stats();
    assert_eq!(warm.bytes_live, 4 * size, "{warm}");
    temp.reset();
    for window in 0..3 {
        assert_disjoint(all_at_once(&temp, 4, 1, size));
        let s = temp.stats();
        assert_eq!(
            (s.bytes_held, s.system_allocations),
            (warm.bytes_held, warm.system_allocations),
            "window {window}: {s}"
        );
        temp.reset();
    }
}

#[test]
fn workers_that_exit_early_keep_their_scratch_until_the_rewind() {
    // Fresh threads per kernel, overlapping in some kernels and not in
    // others. A thread that starts after a worker exited with its scratch
    // live must not stack on that scratch: its region would grow to the
    // sum, and every region to the worst case ever seen.
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
            assert_eq!(
                (s.system_allocations, s.bytes_held),
                after,
                "kernel {kernel}: {s}"
            );
            temp.rewind(cp).unwrap();
            if kernel % 4 == 3 {
                temp.reset();
            }
        }
    }
}

#[test]
fn persistent_threads_get_their_own_memory_back_every_window() {
    let (threads, size) = (scaled(4, 2), scaled(512 << 10, 16 << 10));
    let mut first: Option<(Vec<usize>, u64)> = None;
    persistent(
        fast_allocator(),
        threads,
        scaled(6, 3),
        |t, _, temp| {
            let buf = fill(KernelContext::new(temp).allocate_temp(size, 64).unwrap(), t);
            check(buf, t);
            buf.as_ptr() as usize
        },
        |temp, w, addrs| {
            let s = temp.stats();
            let (addrs0, allocs0) = first.get_or_insert((addrs.clone(), s.system_allocations));
            assert_eq!(&addrs, addrs0, "window {w}: a thread's region moved");
            assert_eq!(s.system_allocations, *allocs0, "window {w}: {s}");
            temp.reset();
        },
    );
}

#[test]
fn fresh_and_persistent_threads_together_never_share_a_region() {
    // Persistent threads take their regions back without the lock while
    // fresh threads lease FREE regions under it: whoever wins a region, no
    // two threads bump it, and the regions are the window's threads'.
    let (pool, size, buffers) = (scaled(3, 2), scaled(64 << 10, 4 << 10), scaled(8, 2));
    let all = Barrier::new(2 * pool);
    let work = |t: usize, temp: &CachingAllocator| {
        let ctx = KernelContext::new(temp);
        let bufs: Vec<_> = (0..buffers)
            .map(|i| fill(ctx.allocate_temp(size / buffers, 64).unwrap(), t * 100 + i))
            .collect();
        all.wait();
        for (i, buf) in bufs.iter().enumerate() {
            check(buf, t * 100 + i);
        }
        bufs.iter().map(|b| range(b)).collect::<Vec<_>>()
    };
    let mut warm = None;
    persistent(
        fast_allocator(),
        pool,
        scaled(10, 3),
        |t, _, temp| {
            std::thread::scope(|s| {
                let fresh = s.spawn(|| work(pool + t, temp));
                let mut mine = work(t, temp);
                mine.extend(fresh.join().unwrap());
                mine
            })
        },
        |temp, w, ranges| {
            assert_disjoint(ranges.concat());
            let s = temp.stats();
            assert_eq!(
                s.allocations,
                ((w + 1) * 2 * pool * buffers) as u64,
                "window {w}: {s}"
            );
            if w >= settled_from() {
                let per_thread = size + size / 8 + page();
                assert!(s.bytes_held <= 2 * pool * per_thread, "window {w}: {s}");
                let after = *warm.get_or_insert(s.system_allocations);
                assert_eq!(s.system_allocations, after, "window {w}: {s}");
            }
            temp.reset();
        },
    );
}

/// `n` requests of random sizes (some empty) and alignments through a
/// context of its own, each patterned and checked; returns `n`.
fn random_requests(temp: &CachingAllocator, seed: u64, n: usize) -> u64 {
    let mut rng = Lcg(seed);
    let ctx = KernelContext::new(temp);
    for i in 0..n {
        let size = [0, 1 + rng.below(300) as usize][usize::from(rng.below(8) != 0)];
        let align = [1, 8, 64, 4096][rng.below(4) as usize];
        let buf = fill(ctx.allocate_temp(size, align).unwrap(), i);
        assert_eq!(buf.as_ptr() as usize % align, 0);
        check(buf, i);
    }
    n as u64
}

#[test]
fn stats_read_while_fresh_and_persistent_threads_allocate_count_every_request() {
    // The shape of a once-seen, never reproduced stress failure (a request
    // count off after a round of fresh threads): persistent threads, fresh
    // threads and a thread reading `stats` all at once, every window; once
    // the threads are joined, `stats` counts exactly what they were served.
    let (pool, fresh, windows, n) = (scaled(3, 2), scaled(6, 2), scaled(20, 2), scaled(500, 12));
    let mut before = 0;
    persistent(
        fast_allocator(),
        pool,
        windows,
        |t, w, temp| {
            let seed = (w * 100 + t) as u64;
            if t != 0 {
                return random_requests(temp, seed, n);
            }
            let (reading, started) = (AtomicBool::new(true), AtomicBool::new(false));
            std::thread::scope(|s| {
                // Reads from before the first request to after the last,
                // however the threads are scheduled.
                let reader = s.spawn(|| {
                    loop {
                        assert_eq!(temp.stats().canary_violations, 0);
                        started.store(true, Relaxed);
                        if !reading.load(Relaxed) {
                            break;
                        }
                    }
                });
                while !started.load(Relaxed) {
                    std::thread::yield_now();
                }
                let others: Vec<_> = (0..fresh)
                    .map(|f| s.spawn(move || random_requests(temp, seed + 10 * f as u64 + 10, n)))
                    .collect();
                let mut served = random_requests(temp, seed, n);
                served += others.into_iter().map(|o| o.join().unwrap()).sum::<u64>();
                reading.store(false, Relaxed);
                reader.join().unwrap();
                served
            })
        },
        |temp, w, served| {
            let served: u64 = served.iter().sum();
            let s = temp.stats();
            assert_eq!(s.allocations - before, served, "window {w}: {s}");
            assert_eq!(served, ((pool + fresh) * n) as u64);
            temp.reset();
            before = temp.stats().allocations;
        },
    );
}

#[test]
fn threads_sharing_one_context_write_and_verify_their_own_scratch() {
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
        // Registered before any destructor `then` registers, so (where
        // destructors run in reverse order, as glibc runs them) it runs
        // after them; the allocator must not depend on that order.
        ON_EXIT.with(|slot| *slot.borrow_mut() = Some(on_exit));
        then();
    })
    .join()
    .unwrap();
    *seen.lock().unwrap()
}

#[test]
fn a_thread_local_destructor_that_allocates_late_is_served_from_its_threads_region() {
    let temp = Arc::new(fast_allocator());
    let t = Arc::clone(&temp);
    let cost = on_exit(&temp, move || {
        KernelContext::new(&*t).allocate_temp(100, 8).unwrap();
    });
    // Its region stays leased to it until the next reset, destructors or
    // not: served from it, with no system call.
    assert_eq!(cost, Some(0), "{}", temp.stats());
    assert_eq!(temp.stats().bytes_live, 200);
}

#[test]
fn a_thread_local_destructors_first_request_is_served() {
    // The thread never used the allocator before its destructors ran, and
    // another crate's thread-local (with a destructor of its own) was set
    // up after this one's.
    let temp = Arc::new(fast_allocator());
    let other = Arc::new(thread_local::ThreadLocal::<u8>::new());
    let cost = on_exit(&temp, move || {
        other.get_or(|| 1);
    });
    assert_eq!(cost, Some(1), "{}", temp.stats());
    assert_eq!(temp.stats().bytes_live, 100);
}
