//! The shapes of work the `CachingAllocator` promise files share: threads
//! all at once, one after another or persistent across windows, and
//! windows repeated until the system allocations stop.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Barrier, Mutex, OnceLock, PoisonError, RwLock};

use tempalloc::{CachingAllocator, CachingConfig, KernelContext, TempAllocator};

use crate::util::{check, fill};

/// The release configuration: no debug checks (which send every request
/// through the lock), so these tests run the lock-free path in every build.
/// `debug_checks.rs` covers the checks.
pub fn fast() -> CachingConfig {
    CachingConfig::default().debug_checks(false)
}

/// `n`, or `small` under Miri, which interprets every instruction (thread
/// spawns and pattern bytes are what make these tests slow there).
pub const fn scaled(n: usize, small: usize) -> usize {
    if cfg!(miri) { small } else { n }
}

/// What a region holds after a one-byte request: one page, the least a
/// region holds and the least it grows by. Read from the allocator, so no
/// test assumes 4 KiB pages (16 KiB on Apple Silicon, 64 KiB on some arm64
/// servers).
pub fn page() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        let temp = CachingAllocator::with_config(fast());
        KernelContext::new(&temp).allocate_temp(1, 1).unwrap();
        temp.stats().bytes_held
    })
}

/// The platforms where the crate reserves nothing, so every region is heap
/// blocks: Miri, and the `none` OS backend (`src/os/mod.rs` picks it for what
/// is neither Unix nor Windows).
pub const HEAP_BLOCKS_ONLY: bool = cfg!(any(miri, not(any(unix, windows))));

/// Whether regions are mapped here: they reserve address space and grow in
/// place by committing pages. Not under Miri, not where the crate has no
/// reservations (its `none` OS backend: neither Unix nor Windows, such as
/// wasm), not with `TEMPALLOC_RESERVE=off` (CI's `fallback` step), not
/// where the system refuses every reservation (a tight `ulimit -v`). There
/// regions are heap blocks, and a test whose promise is a mapped region's
/// asserts what the heap-block fallback promises instead, or says why
/// there is nothing to assert. Known at compile time on the platforms
/// without reservations ([`HEAP_BLOCKS_ONLY`]); elsewhere read from the
/// allocator, like [`page`], on a thread of its own, which no test's
/// refused system calls reach.
pub fn mapped() -> bool {
    static MAPPED: OnceLock<bool> = OnceLock::new();
    !HEAP_BLOCKS_ONLY
        && *MAPPED.get_or_init(|| {
            std::thread::spawn(|| {
                let temp = CachingAllocator::with_config(fast());
                KernelContext::new(&temp).allocate_temp(1, 1).unwrap();
                temp.cache().stats().reservations > 0
            })
            .join()
            .unwrap()
        })
}

/// The first window that the footprint bounds (held within 12.5% and a
/// page of each thread's most, no system allocation after it) hold for: 0
/// where regions are [`mapped`] and grow in place; 1 on heap blocks, where a
/// region that outgrows its block chains a larger one in that window and
/// takes a block sized to its peak after the reset (`fallback.rs` shows
/// they converge).
pub fn settled_from() -> usize {
    usize::from(!mapped())
}

/// A quarter page: 1 KiB at 4 KiB pages. Sizes written in this unit keep
/// their page counts (and size classes) at any page size, so a test whose
/// arithmetic is in pages holds at 16 and 64 KiB too.
pub fn kib() -> usize {
    page() / 4
}

/// Panics unless no two of `ranges` (address, length) overlap.
pub fn assert_disjoint(mut ranges: Vec<(usize, usize)>) {
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {w:?}");
    }
}

/// A buffer's address and length.
pub fn range(buf: &[u8]) -> (usize, usize) {
    (buf.as_ptr() as usize, buf.len())
}

/// Runs `work(t, barrier)` on each of `threads` fresh threads, all alive
/// at once (`barrier` waits for all of them), and returns what each
/// returned, in thread order.
pub fn fresh_threads<R: Send>(
    threads: usize,
    work: impl Fn(usize, &Barrier) -> R + Sync,
) -> Vec<R> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (work, barrier) = (&work, &barrier);
                s.spawn(move || work(t, barrier))
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

/// Each of `threads` fresh threads, all alive at once, takes `buffers`
/// buffers of `size + i` bytes, writes a pattern, waits for every other
/// thread, and checks its pattern. Returns every buffer's range.
pub fn all_at_once(
    temp: &CachingAllocator,
    threads: usize,
    buffers: usize,
    size: usize,
) -> Vec<(usize, usize)> {
    let ranges = fresh_threads(threads, |t, barrier| {
        let ctx = KernelContext::new(temp);
        let bufs: Vec<_> = (0..buffers)
            .map(|i| fill(ctx.allocate_temp(size + i, 64).unwrap(), t * 1000 + i))
            .collect();
        barrier.wait();
        for (i, buf) in bufs.iter().enumerate() {
            check(buf, t * 1000 + i);
        }
        bufs.iter().map(|b| range(b)).collect::<Vec<_>>()
    });
    ranges.concat()
}

/// Each of `threads` fresh threads takes a buffer of `size` bytes and exits
/// before the next starts, leaving its scratch live (until the next rewind
/// or reset). Returns every buffer's range.
pub fn one_after_another(
    temp: &CachingAllocator,
    threads: usize,
    size: usize,
) -> Vec<(usize, usize)> {
    std::thread::scope(|s| {
        (0..threads)
            .map(|t| {
                let worker = s.spawn(move || {
                    range(fill(
                        KernelContext::new(temp).allocate_temp(size, 64).unwrap(),
                        t,
                    ))
                });
                worker.join().unwrap()
            })
            .collect()
    })
}

/// Runs `windows` windows on `threads` threads that live across all of
/// them, as a runtime's worker pool does: in window `w`, thread `t` runs
/// `work(t, w, &temp)`; then, with every worker waiting, `after(&mut temp,
/// w, results)` sees what each returned (in thread order) and may reset.
/// A panic in either ends every thread and is passed on.
pub fn persistent<R: Send>(
    temp: CachingAllocator,
    threads: usize,
    windows: usize,
    work: impl Fn(usize, usize, &CachingAllocator) -> R + Sync,
    mut after: impl FnMut(&mut CachingAllocator, usize, Vec<R>),
) -> CachingAllocator {
    // Workers read, the main thread writes between windows: the lock is
    // what makes `reset(&mut self)` possible while the threads live on.
    let temp = RwLock::new(temp);
    let (start, end) = (Barrier::new(threads + 1), Barrier::new(threads + 1));
    let stop = AtomicBool::new(false);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (temp, start, end, stop, work, results) =
                (&temp, &start, &end, &stop, &work, &results);
            s.spawn(move || {
                for w in 0..windows {
                    start.wait();
                    if stop.load(Relaxed) {
                        return;
                    }
                    let r = catch_unwind(AssertUnwindSafe(|| work(t, w, &temp.read().unwrap())));
                    results.lock().unwrap().push((t, r));
                    end.wait();
                }
            });
        }
        for w in 0..windows {
            start.wait();
            end.wait();
            let mut done = std::mem::take(&mut *results.lock().unwrap());
            done.sort_by_key(|(t, _)| *t);
            let done: Result<Vec<R>, _> = done.into_iter().map(|(_, r)| r).collect();
            let mut temp = temp.write().unwrap_or_else(PoisonError::into_inner);
            let ended =
                done.and_then(|done| catch_unwind(AssertUnwindSafe(|| after(&mut temp, w, done))));
            if let Err(panic) = ended {
                // Release the workers waiting for the next window, then fail.
                stop.store(true, Relaxed);
                if w + 1 < windows {
                    start.wait();
                }
                resume_unwind(panic);
            }
        }
    });
    temp.into_inner().unwrap()
}

/// Runs `window` `scaled(8, 5)` times with a reset after each, and panics
/// unless the system allocations stop after the second window.
pub fn converges(temp: &mut CachingAllocator, mut window: impl FnMut(&CachingAllocator)) {
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
