//! The hot path, reset, and thread scaling of `CachingAllocator`, each
//! against a baseline in the same run; prints the ratios at the end.
//!
//! `cargo bench --bench hot_path`

use std::alloc::Layout;
use std::hint::black_box;
use std::sync::{Arc, Barrier, RwLock};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use tempalloc::{
    BlockCache, CachingAllocator, CachingConfig, FixedAllocator, KernelContext, MallocAllocator,
    TempAllocator,
};

/// Requests per kernel window: a kernel asks for a handful of tiles.
const BATCH: usize = 32;
const SIZE: usize = 256;
const ALIGN: usize = 64;

/// What a kernel does: `BATCH` requests through a context, then the reset.
fn kernel_window(temp: &mut dyn TempAllocator) {
    {
        let ctx = KernelContext::new(temp);
        for _ in 0..BATCH {
            black_box(
                ctx.allocate_temp(black_box(SIZE), black_box(ALIGN))
                    .unwrap(),
            );
        }
    }
    temp.reset();
}

fn hot_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    group.throughput(Throughput::Elements(BATCH as u64));
    let layout = Layout::from_size_align(SIZE, ALIGN).unwrap();

    let mut bump = bumpalo::Bump::with_capacity(1 << 20);
    group.bench_function("bumpalo_alloc_layout", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                black_box(bump.alloc_layout(black_box(layout)));
            }
            bump.reset();
        })
    });

    // `FixedAllocator` is `Sync` (a compare-and-swap cursor, atomic
    // counters); bumpalo's `Cell` cursor is what a `!Sync` one would cost.
    let mut buf = vec![std::mem::MaybeUninit::uninit(); 1 << 20];
    for (name, mut temp) in [
        (
            "caching_kernel_context",
            Box::new(CachingAllocator::new()) as Box<dyn TempAllocator + '_>,
        ),
        ("malloc_kernel_context", Box::new(MallocAllocator::new())),
        (
            "fixed_kernel_context",
            Box::new(FixedAllocator::new(&mut buf)),
        ),
    ] {
        group.bench_function(name, |b| b.iter(|| kernel_window(&mut *temp)));
    }
    group.finish();
}

fn reset(c: &mut Criterion) {
    let mut group = c.benchmark_group("reset");
    let mut bump = bumpalo::Bump::with_capacity(1 << 20);
    group.bench_function("bumpalo_reset", |b| {
        b.iter(|| {
            black_box(bump.alloc_layout(Layout::new::<u64>()));
            bump.reset();
        })
    });
    let mut temp = CachingAllocator::new();
    group.bench_function("caching_reset", |b| {
        b.iter(|| {
            black_box(temp.allocate(Layout::new::<u64>()).unwrap());
            temp.reset();
        })
    });
    group.finish();
}

/// Requests each thread makes per window in the scaling benchmark.
const PER_THREAD: usize = 64 * 1024;

/// Thread counts of the scaling benchmark: past the cores of most machines
/// (and far past this project's 2-core CI), where threads are oversubscribed
/// and only the ratio to private arenas at the same count means anything.
const THREADS: [usize; 6] = [1, 2, 8, 16, 32, 64];

/// How the threads of the scaling benchmark come and go.
#[derive(Clone, Copy, PartialEq)]
enum Pool {
    /// The same threads every round (a runtime's worker pool).
    Persistent,
    /// New threads every round (`thread::scope` per kernel).
    Fresh,
}

/// Time for `threads` threads to make `PER_THREAD` requests each per round,
/// `rounds` times (after one untimed warm-up round), with a reset between
/// rounds: from one shared `CachingAllocator` (`shared`), or each from a
/// private `bumpalo::Bump` (the ideal: nothing shared at all, so it shows what
/// the machine's cores give). Persistent threads live across rounds (a
/// barrier starts each one), so spawning is not measured; fresh threads are
/// spawned every round, by both, and take over a warm arena (a private
/// `Bump` each, handed over; or the regions the last round's threads left).
/// The work per thread is fixed, so perfect scaling keeps the time flat as
/// threads are added.
fn run_threads(threads: usize, rounds: u64, shared: bool, pool: Pool) -> Duration {
    let layout = Layout::from_size_align(64, 64).unwrap();
    let work = |temp: &CachingAllocator, bump: &mut bumpalo::Bump| {
        if shared {
            for _ in 0..PER_THREAD {
                black_box(temp.allocate(black_box(layout)).unwrap());
            }
        } else {
            for _ in 0..PER_THREAD {
                black_box(bump.alloc_layout(black_box(layout)));
            }
            bump.reset();
        }
    };
    // Sized for a whole round, so a `Bump` never takes a chunk after the first.
    let arena = || bumpalo::Bump::with_capacity(PER_THREAD * 64 + 4096);
    let mut temp = CachingAllocator::new();
    if pool == Pool::Fresh {
        let mut arenas: Vec<_> = (0..threads).map(|_| arena()).collect();
        let mut elapsed = Duration::ZERO;
        // One untimed round first: memory is taken there, as in any
        // warmed-up runtime.
        for round in 0..=rounds {
            let start = Instant::now();
            std::thread::scope(|s| {
                for bump in &mut arenas {
                    let temp = &temp;
                    s.spawn(move || work(temp, bump));
                }
            });
            if round > 0 {
                elapsed += start.elapsed();
            }
            temp.reset();
        }
        return elapsed;
    }
    // Threads allocate under the read lock, the reset takes the write lock:
    // one uncontended lock operation per thread per round, not per request.
    let temp = RwLock::new(temp);
    let start_round = Barrier::new(threads + 1);
    let end_round = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut bump = arena();
                for _ in 0..=rounds {
                    start_round.wait();
                    work(&temp.read().unwrap(), &mut bump);
                    end_round.wait();
                }
            });
        }
        let mut elapsed = Duration::ZERO;
        for round in 0..=rounds {
            let start = Instant::now();
            start_round.wait();
            end_round.wait();
            if round > 0 {
                elapsed += start.elapsed();
            }
            temp.write().unwrap().reset();
        }
        elapsed
    })
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads");
    for (pool, name) in [(Pool::Persistent, "persistent"), (Pool::Fresh, "fresh")] {
        for threads in THREADS {
            group.throughput(Throughput::Elements((threads * PER_THREAD) as u64));
            group.bench_function(format!("{name}_caching_shared_{threads}"), |b| {
                b.iter_custom(|rounds| run_threads(threads, rounds, true, pool))
            });
            group.bench_function(format!("{name}_bumpalo_private_{threads}"), |b| {
                b.iter_custom(|rounds| run_threads(threads, rounds, false, pool))
            });
        }
    }
    group.finish();
}

/// Thread counts of the first inference.
const COLD_THREADS: [usize; 3] = [1, 2, 8];

/// One thread's first window: requests growing from 1 KiB to 256 KiB (about
/// 4 MiB in all), every byte written, as a kernel writes its scratch.
fn first_window(mut take: impl FnMut(Layout) -> *mut u8) {
    for i in 0..64usize {
        let size = 1024 << (i % 9);
        let p = take(Layout::from_size_align(size, 64).unwrap());
        // SAFETY: `take` handed out `size` writable bytes.
        unsafe { p.write_bytes(i as u8, size) };
        black_box(p);
    }
}

/// Whose memory a first window runs on.
#[derive(Clone, Copy)]
enum First {
    /// A fresh `CachingAllocator` with a cache of its own.
    Caching,
    /// A fresh `CachingAllocator` on a `BlockCache` that kept the last
    /// round's memory idle: a new session in a process that ran one before.
    Session,
    /// A fresh private `bumpalo::Bump` per thread, on the C library's heap.
    Bumpalo,
}

/// Time for `threads` persistent threads to run their first window `rounds`
/// times, each round on fresh allocators (`first`): page faults and system
/// calls included. Making and dropping the allocators is not timed.
fn run_first(threads: usize, rounds: u64, first: First) -> Duration {
    let cache = Arc::new(BlockCache::with_idle_budget(usize::MAX));
    let fresh = || match first {
        First::Session => {
            CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default())
        }
        _ => CachingAllocator::new(),
    };
    let temp = RwLock::new(fresh());
    let start_round = Barrier::new(threads + 1);
    let end_round = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..rounds {
                    let bump = bumpalo::Bump::new();
                    start_round.wait();
                    if let First::Bumpalo = first {
                        first_window(|l| bump.alloc_layout(l).as_ptr());
                    } else {
                        let temp = temp.read().unwrap();
                        first_window(|l| temp.allocate(l).unwrap().cast().as_ptr());
                    }
                    end_round.wait();
                    drop(bump);
                }
            });
        }
        let mut elapsed = Duration::ZERO;
        for _ in 0..rounds {
            *temp.write().unwrap() = fresh();
            let start = Instant::now();
            start_round.wait();
            end_round.wait();
            elapsed += start.elapsed();
        }
        elapsed
    })
}

/// The first inference of a new session in a process that ran one before:
/// the last session's memory is there to take (kept idle by a shared
/// `BlockCache`, kept by glibc for bumpalo).
fn session(c: &mut Criterion) {
    let mut group = c.benchmark_group("session");
    for threads in COLD_THREADS {
        group.bench_function(format!("caching_shared_cache_{threads}"), |b| {
            b.iter_custom(|rounds| run_first(threads, rounds, First::Session))
        });
        group.bench_function(format!("bumpalo_{threads}"), |b| {
            b.iter_custom(|rounds| run_first(threads, rounds, First::Bumpalo))
        });
    }
    group.finish();
}

/// The environment variable that makes this binary a child running one
/// cold first window: `caching:THREADS` or `bumpalo:THREADS`.
const COLD_CHILD: &str = "HOT_PATH_COLD_CHILD";

/// In a child process: one first window on `threads` threads, timed from
/// the barrier that starts them to the last one's end, printed in ns.
fn cold_child(spec: &str) {
    let (first, threads) = spec.split_once(':').expect("caching:N or bumpalo:N");
    let first = if first == "caching" {
        First::Caching
    } else {
        First::Bumpalo
    };
    let elapsed = run_first(threads.parse().expect("a thread count"), 1, first);
    println!("{}", elapsed.as_nanos());
}

/// The first inference of a process, page faults and system calls
/// included: each round a new process (this binary, as a child), so that
/// every byte comes from the system for both sides, as on a device that
/// just started the runtime. (In one process, glibc would hand the next
/// round's arenas the last round's freed memory, already resident.)
fn run_cold(threads: usize, rounds: u64, first: &str) -> Duration {
    let exe = std::env::current_exe().expect("the bench's own path");
    (0..rounds)
        .map(|_| {
            let out = std::process::Command::new(&exe)
                .env(COLD_CHILD, format!("{first}:{threads}"))
                .output()
                .expect("a child process");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let ns = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("ns");
            Duration::from_nanos(ns)
        })
        .sum()
}

fn cold(c: &mut Criterion) {
    let mut group = c.benchmark_group("cold");
    for threads in COLD_THREADS {
        group.bench_function(format!("caching_first_window_{threads}"), |b| {
            b.iter_custom(|rounds| run_cold(threads, rounds, "caching"))
        });
        group.bench_function(format!("bumpalo_first_window_{threads}"), |b| {
            b.iter_custom(|rounds| run_cold(threads, rounds, "bumpalo"))
        });
    }
    group.finish();
}

/// The median criterion measured for `group/bench`, in ns per iteration.
fn median_ns(group: &str, bench: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{dir}/criterion/{group}/{bench}/new/estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn print_ratios() {
    let get = |g: &str, b: &str| median_ns(g, b).unwrap_or(f64::NAN);
    let bump = get("hot_path", "bumpalo_alloc_layout");
    let caching = get("hot_path", "caching_kernel_context");
    let malloc = get("hot_path", "malloc_kernel_context");
    println!("\n== ratios (medians of this run; target in brackets)");
    println!(
        "hot path: caching via KernelContext / bumpalo alloc_layout = {:.2}x  [<= 2x]  ({:.2} vs {:.2} ns per request)",
        caching / bump,
        caching / BATCH as f64,
        bump / BATCH as f64
    );
    println!("hot path: malloc / caching = {:.1}x", malloc / caching);
    let fixed = get("hot_path", "fixed_kernel_context");
    println!(
        "hot path: FixedAllocator (Sync) via KernelContext / bumpalo alloc_layout = {:.2}x  ({:.2} vs {:.2} ns per request)",
        fixed / bump,
        fixed / BATCH as f64,
        bump / BATCH as f64
    );
    println!(
        "reset: caching / bumpalo = {:.2}x",
        get("reset", "caching_reset") / get("reset", "bumpalo_reset")
    );
    // The private arenas share nothing: at every count, they are what the
    // machine allows, so the ratio is what sharing one allocator costs.
    for pool in ["persistent", "fresh"] {
        let mut ratios = Vec::new();
        for threads in THREADS {
            let shared = get("threads", &format!("{pool}_caching_shared_{threads}"));
            let private = get("threads", &format!("{pool}_bumpalo_private_{threads}"));
            ratios.push(shared / private);
            println!(
                "threads ({pool}): {threads:>2}, one shared CachingAllocator / private bumpalo arenas = {:.2}x  ({:.2} vs {:.2} ns per request)",
                shared / private,
                shared / (threads * PER_THREAD) as f64,
                private / (threads * PER_THREAD) as f64,
            );
        }
        println!(
            "threads ({pool}): median over the counts = {:.2}x  [<= 1.15x]",
            median(&mut ratios)
        );
    }
    for threads in COLD_THREADS {
        let caching = get("cold", &format!("caching_first_window_{threads}"));
        let bump = get("cold", &format!("bumpalo_first_window_{threads}"));
        println!(
            "cold first window (a new process each): {threads} threads, CachingAllocator / bumpalo arenas = {:.2}x  [<= 1.25x]  ({:.0} vs {:.0} us)",
            caching / bump,
            caching / 1e3,
            bump / 1e3,
        );
    }
    for threads in COLD_THREADS {
        let caching = get("session", &format!("caching_shared_cache_{threads}"));
        let bump = get("session", &format!("bumpalo_{threads}"));
        println!(
            "first window of a new session: {threads} threads, a CachingAllocator on a shared cache / fresh bumpalo arenas = {:.2}x  ({:.0} vs {:.0} us)",
            caching / bump,
            caching / 1e3,
            bump / 1e3,
        );
    }
}

/// The median of `values` (NaN-safe enough for ratios of medians).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn main() {
    if let Ok(spec) = std::env::var(COLD_CHILD) {
        return cold_child(&spec);
    }
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    hot_path(&mut c);
    reset(&mut c);
    threads(&mut c);
    session(&mut c);
    cold(&mut c);
    c.final_summary();
    print_ratios();
}
