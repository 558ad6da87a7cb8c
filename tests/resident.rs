//! What the process keeps resident for a `CachingAllocator`, read from the
//! system (`RssAnon` in `/proc/self/status`), not from the allocator's own
//! books: at most 1.25x the most bytes live in one window, from the first
//! window on, for a workload whose sizes change every window; on mapped
//! regions, at most 12.5% and a page over it, as the README promises.
//!
//! A test binary of its own, so that no other test's memory is in the
//! count, and one test in it, for the same reason. Linux only (elsewhere
//! it has nothing to read); not under Miri, which has no resident set.

#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn resident_memory_stays_within_a_quarter_of_the_window_from_the_first_on() {
    use tempalloc::{CachingAllocator, CachingConfig, KernelContext, TempAllocator};

    /// A field of `/proc/self/status` in bytes (`RssAnon:`, `VmSize:`).
    fn status(field: &str) -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }
    let rss_anon = || status("RssAnon:");
    /// Whether `temp`'s regions are mapped (reserved), not heap blocks.
    fn reserved_here(temp: &CachingAllocator) -> bool {
        temp.cache().stats().reservations > 0
    }

    // Windows like decode steps: per-thread tiles and a dequant buffer that
    // grow with the context, a sampler buffer, activations; every byte is
    // written, as kernels do.
    let windows: Vec<Vec<usize>> = (0..40usize)
        .map(|step| {
            let kv = 256 + 96 * step;
            vec![
                32_000 * 8,
                kv * 128 * 4,
                (kv.min(512) + 130) * 4 * 64,
                4096,
                8 * step + 8,
            ]
        })
        .collect();
    // Where nothing can be reserved (`TEMPALLOC_RESERVE=off`, a tight
    // `ulimit -v`), the default is heap blocks already, and the second run
    // would repeat it on the C library's heap as the first left it.
    let mut reserved = true;
    // The prefaulted run touches every page it commits, so what is
    // committed is resident: there the README's 12.5% is asserted too.
    for (name, config, prefaulted) in [
        ("mapped", CachingConfig::default(), false),
        (
            "mapped, prefaulted",
            CachingConfig::default().prefault(true),
            true,
        ),
        ("heap blocks", CachingConfig::default().reserve(None), false),
    ] {
        if !reserved {
            break;
        }
        let config = config.debug_checks(false);
        if prefaulted {
            // The code runs once before the count, on an allocator dropped
            // (unmapped) after: an emulator's translations of it are not
            // the allocator's memory.
            let warm = CachingAllocator::with_config(config);
            KernelContext::new(&warm)
                .allocate_temp(windows[0][0], 64)
                .unwrap();
        }
        let mut temp = CachingAllocator::with_config(config);
        let base = rss_anon();
        let (mut worst, mut peak) = (0.0f64, 0);
        for (i, sizes) in windows.iter().enumerate() {
            let ctx = KernelContext::new(&temp);
            let mut live = 0;
            for &size in sizes {
                ctx.allocate_temp(size, 64)
                    .unwrap()
                    .fill(std::mem::MaybeUninit::new(0x5a));
                live += size;
            }
            // Resident growth over what the process had before the
            // allocator, against the most bytes live in one window so far
            // (and a page of slack per buffer, for whole pages).
            peak = peak.max(live);
            let resident = rss_anon().saturating_sub(base);
            let slack = sizes.len() * 4096;
            let ratio = resident.saturating_sub(slack) as f64 / peak as f64;
            worst = worst.max(ratio);
            assert!(
                ratio <= 1.25,
                "{name}, window {i}: {resident} B resident for {peak} B live ({ratio:.3}x)"
            );
            // Mapped regions promise more: 12.5% and a page over the most
            // their thread used in one window (this test's one thread).
            let page = tempalloc::testing::page_size();
            let promise = peak + peak / 8 + page;
            assert!(
                !(prefaulted && reserved_here(&temp)) || resident.saturating_sub(slack) <= promise,
                "{name}, window {i}: {resident} B resident, over {promise} B (12.5% and a page over {peak} B)"
            );
            temp.reset();
        }
        reserved = temp.cache().stats().reservations > 0;
        let on = if reserved {
            ""
        } else {
            " (on heap blocks: nothing reserved here)"
        };
        println!("{name}{on}: worst resident/live {worst:.3}x");
        drop(temp);
    }

    // Address space too: `trim` then `release` into a cache that keeps idle
    // memory leaves no reservation mapped (each had nothing committed).
    // Checked by address in `/proc/self/maps`, not by `VmSize`, which also
    // moves with the C library's per-thread arenas (64 MiB each).
    let cache = std::sync::Arc::new(tempalloc::BlockCache::with_idle_budget(1 << 30));
    let mut temp =
        CachingAllocator::with_cache(cache, CachingConfig::default().debug_checks(false));
    let served: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let buf = KernelContext::new(&temp)
                        .allocate_temp(1 << 20, 64)
                        .unwrap();
                    buf.as_ptr() as usize
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    temp.reset();
    if temp.cache().stats().reservations == 0 {
        // Heap blocks: `release` keeps them idle in this cache (its budget
        // is 1 GiB), as the cache promises; there is no reservation to see
        // unmapped.
        println!("address space: nothing reserved here, nothing to unmap");
        return;
    }
    /// Whether `addr` lies in a mapping of this process.
    fn mapped(addr: usize) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|line| {
            let range = line.split_whitespace().next().unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let lo = usize::from_str_radix(lo, 16).unwrap();
            let hi = usize::from_str_radix(hi, 16).unwrap();
            (lo..hi).contains(&addr)
        })
    }
    assert!(served.iter().all(|&a| mapped(a)), "the regions are mapped");
    temp.trim();
    temp.release();
    for addr in served {
        assert!(
            !mapped(addr),
            "{addr:#x}, served before the reset, is still mapped after trim and release"
        );
    }
}
