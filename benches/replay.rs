//! Replays of the three reference workloads through every allocator in one
//! run, then the ratio of each to `caching` (to `malloc` until `caching` is in
//! the table). The traces are the full reference shapes (`steady` 32 000
//! requests, `decode` 132 225, `mixed` about 20 000); one iteration is one
//! whole replay through an allocator warmed by one replay before measuring.
//!
//! `cargo bench --bench replay`: about two minutes of measuring on two cores
//! (10 samples, 0.5 s warm-up and 3 s measurement per allocator and trace),
//! after the build.

#[path = "../examples/common/allocators.rs"]
mod allocators;
#[path = "../examples/common/counting.rs"]
mod counting;
#[path = "../examples/common/exact_size_cache.rs"]
mod exact_size_cache;
// The library's median, private to it: included as source.
#[allow(dead_code)]
#[path = "../src/trace/numbers.rs"]
mod numbers;

use numbers::median;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use tempalloc::trace::{self, Trace};

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

/// (trace, allocator) -> ns per request of every measured sample.
static SAMPLES: Mutex<BTreeMap<(&str, &str), Vec<f64>>> = Mutex::new(BTreeMap::new());

fn workloads() -> [(&'static str, Trace); 3] {
    [
        ("steady", trace::steady()),
        ("decode", trace::decode()),
        ("mixed", trace::mixed()),
    ]
}

fn bench_replay(c: &mut Criterion) {
    for (name, trace) in workloads() {
        let requests = trace.requests() as u64;
        let mut group = c.benchmark_group(format!("replay/{name}"));
        group.throughput(Throughput::Elements(requests));
        for &(allocator, make) in allocators::ALLOCATORS {
            let mut temp = make();
            trace.run(temp.as_mut()).expect("warm-up replay");
            group.bench_function(allocator, |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        trace.run(temp.as_mut()).expect("replay");
                    }
                    let elapsed = start.elapsed();
                    let ns = elapsed.as_nanos() as f64 / (iters * requests.max(1)) as f64;
                    SAMPLES
                        .lock()
                        .unwrap()
                        .entry((name, allocator))
                        .or_default()
                        .push(ns);
                    elapsed
                })
            });
        }
        group.finish();
    }
}

fn print_ratios() {
    let names: Vec<&str> = allocators::ALLOCATORS.iter().map(|(n, _)| *n).collect();
    let Some(reference) = allocators::reference(&names).map(|i| names[i]) else {
        return;
    };
    let mut samples = SAMPLES.lock().unwrap();
    println!("\nreplay: median ns per request, and time relative to {reference}");
    for (name, _) in workloads() {
        let Some(mut reference_samples) = samples.get(&(name, reference)).cloned() else {
            continue;
        };
        let reference_ns = median(&mut reference_samples);
        for &allocator in &names {
            if let Some(s) = samples.get_mut(&(name, allocator)) {
                let ns = median(s);
                println!(
                    "  {name:<7} {allocator:<18} {ns:>9.1} ns  {:>7.2}x {reference}",
                    ns / reference_ns
                );
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .without_plots()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench_replay(&mut c);
    print_ratios();
    c.final_summary();
}
