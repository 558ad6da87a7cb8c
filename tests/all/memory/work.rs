//! Memory follows the work, not the thread: a small engine the way a rayon
//! user writes it first — activations in the inference frame (`scratch`, a
//! `FrameVec`), kernels that split rows over a work-stealing pool, each
//! task taking a tile from the shared `&KernelContext` — run wherever the
//! pool or the caller puts the frame. With a region cap the allocator holds
//! at most 1.5x the window high-water mark `Stats` reports after warm-up
//! (typically 1.05x to 1.20x), at 1, 2, 4 and 8 workers. Without one, and
//! with no system allocation from the third inference on, not yet (the
//! `#[ignore]`d tests). Under a
//! limit, the budget sentence of `CachingConfig::max_bytes` holds under
//! any schedule.

use rayon::ThreadPool;
use rayon::prelude::*;
use tempalloc::{
    CachingAllocator, CachingConfig, Error, Frame, FrameVec, KernelContext, ScratchVecExt, Stats,
    TempAllocator,
};

use crate::scenarios::{fast, kib, mapped, page, scaled};

const LAYERS: usize = 4;
// Under Miri, which interprets every `f32` of the rows, half as many rows
// again (4): still a tile per row and an activation per layer.
const ROWS: usize = scaled(64, 4);
const INFERENCES: usize = 20;

/// Floats in a row: 256 at 4 KiB pages, as many more as the page is larger,
/// so every size keeps its count of pages (the least a region holds).
fn width() -> usize {
    scaled(256, 32) * kib() / 1024
}

/// One row of a layer: a tile of scratch (its size varies by row, so a
/// worker's share varies with the rows it steals), written and summed.
fn row(ctx: &KernelContext, input: &[f32], r: usize) -> Result<f32, Error> {
    let tile = ctx.scratch::<f32>(width() * (1 + r % 4))?;
    for (t, x) in tile.iter_mut().zip(input.iter().cycle()) {
        *t = x * 0.5 + r as f32;
    }
    Ok(tile.iter().sum::<f32>() / tile.len() as f32)
}

/// How a kernel's rows are spread over threads.
#[derive(Clone, Copy)]
enum Rows<'p> {
    /// Over a work-stealing pool.
    Pool(&'p ThreadPool),
    /// Over this many fresh scoped threads, in shares that change with the
    /// call (`turn`).
    Fresh(usize),
}

/// The rows of one kernel over `rows`: row `r` of `act` from `input`.
fn kernel(
    ctx: &KernelContext,
    act: &mut [f32],
    input: &[f32],
    rows: Rows,
    turn: usize,
) -> Result<(), Error> {
    let width = width();
    let one = |(r, out): (usize, &mut [f32])| {
        out.fill(row(ctx, input, r)?);
        Ok(())
    };
    let threads = match rows {
        Rows::Pool(pool) => {
            return pool.install(|| act.par_chunks_mut(width).enumerate().try_for_each(one));
        }
        Rows::Fresh(threads) => threads,
    };
    // Uneven shares: thread `t` takes about `2t + 1` parts in `threads²`,
    // and which thread is busiest turns with every call.
    let mut shares: Vec<Vec<(usize, &mut [f32])>> = (0..threads).map(|_| Vec::new()).collect();
    for (r, out) in act.chunks_mut(width).enumerate() {
        let draw = (r * 2_654_435_761 + turn * 40_503) % (threads * threads);
        shares[(draw.isqrt() + turn) % threads].push((r, out));
    }
    std::thread::scope(|s| {
        let all: Vec<_> = shares
            .into_iter()
            .map(|share| s.spawn(move || share.into_iter().try_for_each(one)))
            .collect();
        all.into_iter().try_for_each(|t| t.join().unwrap())
    })
}

/// One inference: per layer an activation of `ROWS x WIDTH` in the frame and
/// a kernel over the rows, spread as `rows` says (`turn` counts the
/// kernels); the layer means in a `FrameVec` that grows across kernels.
/// Returns the last mean.
fn inference(
    inf: &mut Frame<'_, CachingAllocator>,
    rows: Rows,
    turn: &mut usize,
) -> Result<f32, Error> {
    let width = width();
    let mut means = FrameVec::new_in(inf.allocator());
    let mut input: &[f32] = inf.scratch_fill::<f32>(width, 1.0)?;
    for _ in 0..LAYERS {
        let act = inf.scratch::<f32>(ROWS * width)?;
        *turn += 1;
        inf.kernel(|ctx| kernel(ctx, act, input, rows, *turn))?;
        means.try_push(act.iter().sum::<f32>() / act.len() as f32)?;
        let act: &[f32] = act;
        input = &act[..width];
    }
    Ok(means.last().copied().unwrap_or(0.0))
}

/// Where the frame runs.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// `pool.install(|| temp.frame(..))`: on whichever worker rayon picks.
    OnThePool,
    /// The frame on the calling thread, only the kernels on the pool.
    OnTheCaller,
    /// The frame on the calling thread, each kernel's rows over fresh
    /// scoped threads, in shares that change from call to call.
    FreshThreads,
}

/// One inference of `temp`'s, its frame where `place` says, its kernels'
/// rows on `pool` or over `workers` fresh threads.
fn frame(
    temp: &mut CachingAllocator,
    pool: &ThreadPool,
    place: Place,
    workers: usize,
    turn: &mut usize,
) -> Result<f32, Error> {
    match place {
        Place::OnThePool => {
            pool.install(|| temp.frame(|inf| inference(inf, Rows::Pool(pool), turn)))
        }
        Place::OnTheCaller => temp.frame(|inf| inference(inf, Rows::Pool(pool), turn)),
        Place::FreshThreads => temp.frame(|inf| inference(inf, Rows::Fresh(workers), turn)),
    }
}

/// Runs `INFERENCES` inferences at `workers` workers and returns the
/// stats after each.
fn run(workers: usize, place: Place, config: CachingConfig) -> Vec<Stats> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .unwrap();
    let mut temp = CachingAllocator::with_config(config);
    let mut seen = Vec::new();
    let (mut expected, mut turn) = (None, 0);
    for _ in 0..scaled(INFERENCES, 4) {
        let out = frame(&mut temp, &pool, place, workers, &mut turn).unwrap();
        // The same inputs give the same answer, wherever the rows ran.
        assert_eq!(*expected.get_or_insert(out), out);
        seen.push(temp.stats());
    }
    seen
}

/// What a run held against its window high-water mark (at most `most`
/// times it), and the system allocations of each inference from the third
/// on, at 1, 2, 4 and 8 workers: every count is run and reported before any
/// is asserted. With `warm`, no system allocation from the third inference
/// on either.
fn check(place: Place, config: CachingConfig, most: f64, warm: bool) {
    let failed: Vec<String> = [1, 2, 4, 8]
        .into_iter()
        .filter_map(|workers| held(workers, place, config, most, warm).err())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

fn held(
    workers: usize,
    place: Place,
    config: CachingConfig,
    most: f64,
    warm: bool,
) -> Result<(), String> {
    let seen = run(workers, place, config);
    let label = format!(
        "{place:?}, {workers} workers, region cap {:?}",
        config.region_cap
    );
    judge(&label, &seen, most, warm)
}

/// Whether the stats after each inference, `seen`, end at most `most`
/// times the window high-water mark and (with `warm`) show no system
/// allocation from the third inference on; reported either way, `label`
/// first, and the report is the error.
fn judge(label: &str, seen: &[Stats], most: f64, warm: bool) -> Result<(), String> {
    let last = seen.last().unwrap();
    let held = last.bytes_held as f64 / last.window_high_water as f64;
    let after: Vec<u64> = seen
        .windows(2)
        .skip(1)
        .map(|w| w[1].system_allocations - w[0].system_allocations)
        .collect();
    let report = format!(
        "{label}: held {} for a window of {} ({held:.2}x); system allocations per inference from the third: {after:?}",
        last.bytes_held, last.window_high_water
    );
    eprintln!("{report}");
    if held <= most && (!warm || after.iter().all(|&n| n == 0)) {
        Ok(())
    } else {
        Err(report)
    }
}

/// The region cap `CachingConfig::region_cap`'s docs suggest: the window
/// (427 KB at 4 KiB pages) over four times the most workers, 16 KiB.
fn capped() -> CachingConfig {
    fast().region_cap(Some(16 * kib()))
}

/// [`check`] with [`capped`], where regions are reservations: the cap does
/// nothing on heap blocks (`TEMPALLOC_RESERVE=off`), whose regions chain
/// blocks and settle to one at each reset. At most 1.5x: the cap bounds
/// what a region grows to, not how a schedule spreads the tiles over the
/// regions (each thread's last region partly used, a tile's room left in
/// each region a thread moved on from). Typically 1.05x to 1.20x; the most
/// seen, 1.28x, at 8 workers under qemu. Without the cap, 1.6x and more at
/// 8 workers.
fn check_capped(place: Place) {
    if mapped() {
        check(place, capped(), 1.5, false);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "rayon's deque (crossbeam-epoch) casts integers to pointers, which strict provenance refuses"
)]
fn with_a_region_cap_the_frame_on_the_pool_is_held_within_1_5x() {
    check_capped(Place::OnThePool);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "rayon's deque (crossbeam-epoch) casts integers to pointers, which strict provenance refuses"
)]
fn with_a_region_cap_the_frame_on_the_caller_is_held_within_1_5x() {
    check_capped(Place::OnTheCaller);
}

#[test]
fn with_a_region_cap_fresh_threads_per_kernel_are_held_within_1_5x() {
    check_capped(Place::FreshThreads);
}

#[test]
#[ignore = "not yet held once on a work-stealing pool: without a region cap each worker's region keeps its largest share; with one, a schedule that needs one region more than any before still makes it"]
fn the_frame_on_the_pool_is_held_once() {
    check(Place::OnThePool, fast(), 1.25, true);
}

#[test]
#[ignore = "not yet held once on a work-stealing pool: without a region cap each worker's region keeps its largest share; with one, a schedule that needs one region more than any before still makes it"]
fn the_frame_on_the_caller_with_kernels_on_the_pool() {
    check(Place::OnTheCaller, fast(), 1.25, true);
}

/// One inference with its kernels on the frame's own thread: the frame's
/// activations and the kernels' tiles, nothing split between threads.
fn serial_inference(inf: &mut Frame<'_, CachingAllocator>) -> Result<f32, Error> {
    let width = width();
    let mut input: &[f32] = inf.scratch_fill::<f32>(width, 1.0)?;
    for _ in 0..LAYERS {
        let act = inf.scratch::<f32>(ROWS * width)?;
        inf.kernel(|ctx| {
            for (r, out) in act.chunks_mut(width).enumerate() {
                out.fill(row(ctx, input, r)?);
            }
            Ok::<_, Error>(())
        })?;
        let act: &[f32] = act;
        input = &act[..width];
    }
    Ok(input[0])
}

/// Inference `i` runs on persistent thread `i % threads`, the allocator
/// handed from thread to thread (as a runtime that runs each execute call
/// on whichever of its threads is free): what an inference keeps is held
/// once, not once per thread that ever ran one.
#[test]
fn an_inference_on_whichever_thread_is_held_once() {
    use std::sync::mpsc::{Receiver, Sender, channel};
    // Under Miri three threads, the allocator going round them twice: a
    // hand-over to each thread, then each thread's second frame.
    let counts: &[usize] = if cfg!(miri) { &[3] } else { &[2, 4, 8] };
    for &threads in counts {
        let (back, results): (Sender<(CachingAllocator, f32, Stats)>, _) = channel();
        let mut turns = Vec::new();
        let seen = std::thread::scope(|s| {
            for _ in 0..threads {
                let (turn, mine): (Sender<CachingAllocator>, Receiver<CachingAllocator>) =
                    channel();
                turns.push(turn);
                let back = back.clone();
                s.spawn(move || {
                    for mut temp in mine {
                        let out = temp.frame(serial_inference).unwrap();
                        let stats = temp.stats();
                        back.send((temp, out, stats)).unwrap();
                    }
                });
            }
            let mut temp = CachingAllocator::with_config(fast());
            let mut seen = Vec::new();
            for i in 0..scaled(INFERENCES, 2 * threads) {
                turns[i % threads].send(temp).unwrap();
                let (t, out, stats) = results.recv().unwrap();
                assert_eq!(out, seen.first().map_or(out, |&(first, _)| first));
                seen.push((out, stats));
                temp = t;
            }
            turns.clear();
            seen
        });
        let last = seen.last().unwrap().1;
        let window = seen.iter().map(|(_, s)| s.window_high_water).max().unwrap();
        let allocations: Vec<u64> = seen.iter().map(|(_, s)| s.system_allocations).collect();
        let report = format!(
            "{threads} threads: held {} for a window of {window}; system allocations {allocations:?}",
            last.bytes_held
        );
        assert!(last.bytes_held as f64 <= 1.25 * window as f64, "{report}");
        // Every thread ran a frame by the second round; nothing taken since.
        assert!(
            allocations[threads..]
                .iter()
                .all(|&n| n == allocations[threads - 1]),
            "{report}"
        );
    }
}

/// Three inferences on a fresh pool of `workers` under `max_bytes(limit)`:
/// the first error, if any.
fn limited(workers: usize, place: Place, limit: usize) -> Result<(), Error> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .unwrap();
    let mut temp = CachingAllocator::with_config(fast().max_bytes(Some(limit)));
    let mut turn = 0;
    (0..3).try_for_each(|_| frame(&mut temp, &pool, place, workers, &mut turn).map(drop))
}

/// The budget sentence (README, `CachingConfig::max_bytes`): a limit of
/// `(T + 1) x (high_water + page)`, `T` the threads that allocate in one
/// window and `high_water` what `Stats` reported for a run without a
/// limit, serves the same program under any schedule, the first inference
/// included (twice that on heap blocks, whose regions chain blocks twice as
/// large). Ten pools of three inferences each, at 1, 2, 4 and 8 workers,
/// the frame on the pool, on the caller, or with fresh threads per kernel.
/// Also reports how many of them 1.5x the high-water mark served, the
/// figure docs/design.md ("Budgets") quotes.
#[test]
#[cfg_attr(
    miri,
    ignore = "rayon's deque (crossbeam-epoch) casts integers to pointers, which strict provenance refuses"
)]
fn a_limit_of_the_threads_plus_one_times_the_high_water_serves_any_schedule() {
    let chain = if mapped() { 1 } else { 2 };
    let mut refused = Vec::new();
    for place in [Place::OnThePool, Place::OnTheCaller, Place::FreshThreads] {
        for workers in [1, 2, 4, 8] {
            let high = run(workers, place, fast()).last().unwrap().high_water;
            // The workers and the calling thread.
            let threads = workers + 1;
            let limit = chain * (threads + 1) * (high + page());
            let tries = scaled(10, 1);
            refused.extend(
                (0..tries)
                    .filter_map(|_| limited(workers, place, limit).err())
                    .map(|e| format!("{place:?}, {workers} workers: {e}")),
            );
            let tight = high + high / 2;
            let served = (0..tries).filter(|_| limited(workers, place, tight).is_ok());
            eprintln!(
                "{place:?}, {workers} workers: high water {high}; 1.5x served {} of {tries}",
                served.count()
            );
        }
    }
    assert!(refused.is_empty(), "{refused:#?}");
}

/// The budget sentence's padding term: 64 requests of 8 bytes at 4 KiB
/// alignment (a kernel that wants page-aligned buffers) are 512 bytes to
/// `high_water` but 64 aligned slots carved. A limit of
/// `(T + 1) x (high_water + padding + page)` serves them; one that leaves
/// the padding out does not.
#[test]
fn the_budget_counts_what_requests_pad_to_their_alignment() {
    const REQUESTS: usize = 64;
    let run = |limit: Option<usize>| -> Result<Stats, Error> {
        let mut temp = CachingAllocator::with_config(fast().max_bytes(limit));
        for _ in 0..3 {
            temp.frame(|inf| {
                inf.kernel(|ctx| {
                    (0..REQUESTS).try_for_each(|_| ctx.allocate_temp(8, 4096).map(drop))
                })
            })?;
        }
        Ok(temp.stats())
    };
    let high = run(None).unwrap().high_water;
    assert_eq!(high, REQUESTS * 8);
    let padding = REQUESTS * (4096 - 8);
    let chain = if mapped() { 1 } else { 2 };
    // One thread, which also resets: T + 1 = 2.
    let served = run(Some(chain * 2 * (high + padding + page())));
    assert!(served.is_ok(), "{served:?}");
    let refused = run(Some(2 * (high + page())));
    assert!(
        matches!(refused, Err(Error::BudgetExceeded { .. })),
        "{refused:?}"
    );
}

/// What the frame itself takes (activations, a `FrameVec`) is held once
/// under `pool.install(|| temp.frame(..))`, on whichever worker rayon runs
/// it: the frame takes the largest region. The kernels here take no
/// scratch, so what is held is the frame's alone (README, "`pool.install`
/// included"); with their scratch, the `#[ignore]`d tests above.
#[test]
#[cfg_attr(
    miri,
    ignore = "rayon's deque (crossbeam-epoch) casts integers to pointers, which strict provenance refuses"
)]
fn the_frames_own_memory_on_the_pool_is_held_once() {
    let width = width();
    for workers in [1, 2, 4, 8] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .build()
            .unwrap();
        let mut temp = CachingAllocator::with_config(fast());
        let mut seen = Vec::new();
        for _ in 0..scaled(INFERENCES, 4) {
            let inference = |inf: &mut Frame<'_, CachingAllocator>| {
                let mut means = FrameVec::new_in(inf.allocator());
                for layer in 0..LAYERS {
                    let act = inf.scratch_fill::<f32>(ROWS * width, layer as f32)?;
                    inf.kernel(|_ctx| {
                        pool.install(|| act.par_chunks_mut(width).for_each(|r| r[0] += 1.0));
                        Ok::<_, Error>(())
                    })?;
                    means.try_push(act[0])?;
                }
                Ok::<_, Error>(means.len())
            };
            let layers = pool.install(|| temp.frame(inference)).unwrap();
            assert_eq!(layers, LAYERS);
            seen.push(temp.stats());
        }
        let most = if mapped() { 1.25 } else { 2.0 };
        judge(&format!("{workers} workers"), &seen, most, true).unwrap();
    }
}
