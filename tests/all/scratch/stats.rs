//! `Stats` counts exactly what was asked, for every allocator.

use tempalloc::{KernelContext, Stats, TempAllocator};

use crate::util::{FIXED, FIXED_CAPACITY, for_each_allocator};

/// Asks for `sizes` (bytes at 16 B alignment) in one window and resets.
fn window(temp: &mut dyn TempAllocator, sizes: &[usize]) {
    {
        let ctx = KernelContext::new(temp);
        for &size in sizes {
            ctx.allocate_temp(size, 16).unwrap();
        }
    }
    temp.reset();
}

#[test]
fn a_fresh_allocator_has_counted_nothing() {
    for_each_allocator(|name, temp| {
        let s = temp.stats();
        assert_eq!(
            (s.allocations, s.bytes_requested, s.resets),
            (0, 0, 0),
            "{name}"
        );
        // A fixed allocator holds its whole buffer from the start.
        let held = if name == FIXED { FIXED_CAPACITY } else { 0 };
        assert_eq!(
            (
                s.system_allocations,
                s.system_frees,
                s.bytes_held,
                s.high_water
            ),
            (0, 0, held, 0),
            "{name}"
        );
    });
}

#[test]
fn counts_requests_bytes_and_resets() {
    for_each_allocator(|name, temp| {
        let windows: [&[usize]; 4] = [&[1000, 24, 0, 3000], &[300], &[], &[5000, 5000, 1]];
        let (mut allocations, mut bytes, mut high_water) = (0u64, 0u64, 0usize);
        for (i, sizes) in windows.iter().enumerate() {
            window(temp, sizes);
            allocations += sizes.len() as u64;
            bytes += sizes.iter().sum::<usize>() as u64;
            high_water = high_water.max(sizes.iter().sum());
            let s = temp.stats();
            assert_eq!(s.allocations, allocations, "{name}: window {i}");
            assert_eq!(s.bytes_requested, bytes, "{name}: window {i}");
            assert_eq!(s.high_water, high_water, "{name}: window {i}");
            assert_eq!(s.resets, i as u64 + 1, "{name}: window {i}");
            assert!(s.system_frees <= s.system_allocations, "{name}: window {i}");
        }
    });
}

#[test]
fn high_water_is_the_most_live_at_once() {
    for_each_allocator(|name, temp| {
        {
            let ctx = KernelContext::new(temp);
            ctx.allocate_temp(400, 8).unwrap();
            assert_eq!(temp.stats().high_water, 400, "{name}");
            ctx.scratch::<f32>(25).unwrap();
            assert_eq!(temp.stats().high_water, 500, "{name}");
        }
        temp.reset();
        assert_eq!(temp.stats().high_water, 500, "{name}: kept across a reset");
        {
            let ctx = KernelContext::new(temp);
            ctx.allocate_temp(300, 8).unwrap();
            assert_eq!(
                temp.stats().high_water,
                500,
                "{name}: a smaller window does not lower it"
            );
            ctx.allocate_temp(300, 8).unwrap();
            assert_eq!(
                temp.stats().high_water,
                600,
                "{name}: counted from the last reset"
            );
        }
    });
}

#[test]
#[cfg_attr(miri, ignore = "asks the system for 1 << 62 bytes, which Miri rejects")]
fn rejected_requests_are_not_counted() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        ctx.allocate_temp(100, 8).unwrap();
        let before = temp.stats();
        assert!(ctx.allocate_temp(100, 3).is_err(), "{name}");
        assert!(ctx.allocate_temp(usize::MAX, 8).is_err(), "{name}");
        assert!(ctx.allocate_temp(crate::util::HUGE, 8).is_err(), "{name}");
        assert_eq!(temp.stats(), before, "{name}");
    });
}

#[test]
fn display_shows_every_counter() {
    let mut s = Stats::default();
    s.allocations = 11;
    s.bytes_requested = 22;
    s.resets = 33;
    s.system_allocations = 44;
    s.system_frees = 55;
    s.bytes_held = 66;
    s.high_water = 77;
    s.cache_hits = 88;
    s.cache_misses = 99;
    s.bytes_live = 1234;
    s.window_high_water = 5678;
    s.canary_violations = 4321;
    let text = s.to_string();
    for n in [
        "11",
        "22",
        "33",
        "44",
        "55",
        "66",
        "77",
        "88",
        "99",
        "1234 B live",
        "5678 B window",
        "4321",
    ] {
        assert!(text.contains(n), "{text:?} lacks {n}");
    }
}

/// Every allocator fills `bytes_live` and `window_high_water`.
#[test]
fn live_bytes_and_the_window_high_water_follow_the_windows() {
    for_each_allocator(|name, temp| {
        let live = |t: &dyn TempAllocator| (t.stats().bytes_live, t.stats().window_high_water);
        {
            let ctx = KernelContext::new(temp);
            ctx.allocate_temp(1000, 8).unwrap();
            ctx.allocate_temp(500, 64).unwrap();
        }
        assert_eq!(live(temp), (1500, 1500), "{name}");
        temp.reset();
        assert_eq!(live(temp), (0, 1500), "{name}: the last window's peak");
        KernelContext::new(temp).allocate_temp(200, 8).unwrap();
        assert_eq!(live(temp), (200, 1500), "{name}");
        temp.reset();
        assert_eq!(live(temp), (0, 200), "{name}: a smaller window replaces it");
        KernelContext::new(temp).allocate_temp(300, 8).unwrap();
        assert_eq!(
            live(temp),
            (300, 300),
            "{name}: the current window passed it"
        );
        assert_eq!(temp.stats().high_water, 1500, "{name}: lifetime maximum");
    });
}
