//! `Trace::plan`: what a `CachingAllocator`'s regions must hold.

use tempalloc::trace::{Event, Mixed, Plan, Trace};
use tempalloc::{CachingAllocator, CachingConfig, Error, TempAllocator};

fn plan(text: &str) -> Plan {
    Trace::parse(text).expect("parses").plan().expect("plans")
}

#[test]
fn padding_is_laid_out_as_a_bump_allocator_does() {
    // 1 B, then 64-aligned at 64, then 4096-aligned at 4096: 4096 + 10.
    assert_eq!(plan("a 1 1\na 8 64\na 10 4096\nr\n").regions(), &[4106]);
    // The same requests largest alignment first need no padding.
    assert_eq!(plan("a 10 4096\na 8 64\na 1 1\nr\n").regions(), &[73]);
    // Zero-sized requests still align the cursor, as a bump allocator's do.
    assert_eq!(plan("a 3 1\na 0 16\na 1 1\nr\n").regions(), &[17]);
}

#[test]
fn a_window_ends_at_every_reset_and_a_thread_keeps_its_largest() {
    let p = plan("a 100 8\nr\na 300 8\ni\na 200 8\n");
    assert_eq!(
        (p.regions(), p.threads(), p.windows()),
        (&[300][..], &[(0, 300)][..], 3)
    );
    assert_eq!(plan("").windows(), 0);
    assert_eq!(plan("r\nr\n").regions(), &[] as &[usize]);
}

#[test]
fn rewinds_recycle_what_came_after_their_checkpoint_on_every_thread() {
    // Activations (thread 0), then two kernels in frames, each with a worker.
    let trace = "a 1000 8\n\
                 c 0\na 5000 8\nt 1\na 700 8\nt 0\nw 0\n\
                 c 1\na 3000 8\nt 1\na 900 8\nt 0\nw 1\n\
                 a 10 8\ni\n";
    let p = plan(trace);
    assert_eq!(p.threads(), &[(0, 6000), (1, 900)]);
    assert_eq!(p.regions(), &[6000, 900]);
    // A rewind to a checkpoint never taken (or taken before a reset) is ignored.
    assert_eq!(
        plan("c 7\nr\na 64 8\nw 7\nw 9\na 64 8\nr\n").regions(),
        &[128]
    );
}

#[test]
fn fresh_threads_need_no_more_regions_than_run_at_once() {
    // Every window two new thread ids (fresh threads per kernel).
    let mut trace = Trace::new();
    for window in 0..50u32 {
        for (k, size) in [(0, 4096 + window as usize), (1, 100)] {
            trace.push(Event::Thread { id: 2 * window + k });
            trace.push(Event::Alloc { size, align: 64 });
        }
        trace.push(Event::Reset);
    }
    let p = trace.plan().expect("plans");
    assert_eq!(p.threads().len(), 100);
    assert_eq!(p.regions(), &[4096 + 49, 100]);
    assert_eq!(p.total_bytes(), 4096 + 49 + 100);
}

#[test]
fn a_region_committed_to_the_plan_never_grows() {
    let trace = Mixed {
        // Miri replays about ten times fewer events per second.
        inferences: if cfg!(miri) { 2 } else { 20 },
        ..Mixed::default()
    }
    .generate();
    let need = trace.plan().expect("plans").regions()[0];
    assert!(need >= trace.peak_live_bytes(), "{need}");
    let held_after = |first_commit: usize| {
        let config = CachingConfig::default()
            .min_block_size(first_commit)
            .debug_checks(false);
        let mut temp = CachingAllocator::with_config(config);
        let mut first = Trace::new();
        first.push(Event::Alloc { size: 1, align: 1 });
        first.replay(&mut temp).expect("one request");
        temp.reset();
        let committed = temp.stats().bytes_held;
        trace.replay(&mut temp).expect("replays");
        (committed, temp.stats().bytes_held)
    };
    let (committed, held) = held_after(need);
    assert_eq!(held, committed, "the plan's {need} B were not enough");
    // Half the plan is not enough: the region grows.
    let (committed, held) = held_after(need / 2);
    assert!(held > committed, "{held} {committed}");
}

#[test]
fn bad_requests_are_errors_with_their_numbers() {
    let bad_align = Trace::from(vec![Event::Alloc { size: 8, align: 3 }]);
    assert_eq!(bad_align.plan(), Err(Error::InvalidAlignment { align: 3 }));
    let huge = isize::MAX as usize;
    let overflow = Trace::from(vec![
        Event::Alloc { size: 1, align: 1 },
        Event::Alloc {
            size: huge,
            align: 1,
        },
    ]);
    assert_eq!(
        overflow.plan(),
        Err(Error::SizeOverflow {
            size: huge,
            align: 1
        })
    );
    // The same bytes in two windows fit.
    let two = Trace::from(vec![
        Event::Alloc { size: 1, align: 1 },
        Event::Reset,
        Event::Alloc {
            size: huge,
            align: 1,
        },
    ]);
    assert_eq!(two.plan().map(|p| p.regions().to_vec()), Ok(vec![huge]));
}

#[test]
fn a_plan_by_hand_and_its_text() {
    let p = Plan::from_regions([100, 300, 200]);
    assert_eq!(p.regions(), &[300, 200, 100]);
    assert_eq!(p.to_string().lines().nth(1), Some("region 0 300"));
    let recorded = plan("a 300 8\nt 1\na 200 8\nt 2\na 100 8\nr\n");
    assert_eq!(recorded.regions(), p.regions());
}

/// A runtime that recorded one run, planned it and prewarmed a fresh
/// allocator with the plan: the first inference (one thread, or four that
/// share the work equally) takes no memory from the system.
#[test]
fn a_prewarmed_allocator_takes_no_memory_in_its_first_inference() {
    use tempalloc::trace::Plan;
    use tempalloc::{KernelContext, RecordingAllocator};

    /// One inference: activations on the calling thread, a kernel's
    /// scratch on `threads` workers, sizes that change with `step`.
    fn inference(temp: &dyn TempAllocator, threads: usize, step: usize) {
        let ctx = KernelContext::new(temp);
        let unit = crate::scenarios::scaled(10_000, 500);
        crate::util::fill(ctx.allocate_temp(10 * unit + step * 4096, 64).unwrap(), 1);
        std::thread::scope(|s| {
            for _ in 0..threads {
                let ctx = &ctx;
                s.spawn(move || {
                    for k in 0..4 {
                        let size = unit * (k + 1) + step * 512;
                        crate::util::fill(ctx.allocate_temp(size, 128).unwrap(), 2);
                    }
                });
            }
        });
    }
    let config = CachingConfig::default().debug_checks(false);
    // Under Miri no workers and two: a plan of one region and of several.
    let counts: &[usize] = if cfg!(miri) { &[0, 2] } else { &[0, 1, 4] };
    for &threads in counts {
        // Record a run of three inferences, then plan it.
        let mut recorder = RecordingAllocator::new(CachingAllocator::with_config(config));
        for step in 0..3 {
            inference(&recorder, threads, step);
            recorder.reset();
        }
        let plan: Plan = recorder.trace().unwrap().plan().unwrap();
        assert_eq!(plan.regions().len(), 1 + threads, "{threads} threads");
        // A fresh allocator, prewarmed: its inferences take nothing.
        let mut temp = CachingAllocator::with_config(config.prefault(true));
        temp.prewarm(&plan).unwrap();
        let warm = temp.stats();
        assert!(
            warm.bytes_held >= plan.total_bytes(),
            "{threads} threads: {warm}"
        );
        for step in 0..3 {
            inference(&temp, threads, step);
            temp.reset();
        }
        let s = temp.stats();
        assert_eq!(
            s.system_allocations, warm.system_allocations,
            "{threads} threads: {s}"
        );
    }
}
