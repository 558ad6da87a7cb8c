//! Replays scratch-allocation traces through every temp allocator with
//! [`tempalloc::trace::compare_counting`] and prints one row per allocator:
//! the median ns per request over 10 timed passes, system allocations per
//! request (a counting `#[global_allocator]`), peak held over peak live, and
//! the time relative to `caching`.
//!
//! ```text
//! cargo run --release --example replay -- TRACE...
//! ```
//!
//! `TRACE` is a trace file (see `tempalloc::trace`) or `steady`, `decode`,
//! `mixed` for the built-in workloads. For JSON, a subset of the allocators
//! or another pass count, install the `tempalloc-replay` binary
//! (`cargo install --path . --features cli`).

#[path = "common/allocators.rs"]
mod allocators;
#[path = "common/counting.rs"]
mod counting;
#[path = "common/exact_size_cache.rs"]
mod exact_size_cache;

use std::process::ExitCode;

use tempalloc::TempAllocator;
use tempalloc::trace::{self, Trace};

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const PASSES: usize = 10;

fn load(name: &str) -> Result<Trace, String> {
    match trace::workload(name) {
        Some(trace) => Ok(trace),
        None => std::fs::read_to_string(name)
            .map_err(|e| e.to_string())
            .and_then(|text| Trace::parse(&text).map_err(|e| e.to_string()))
            .map_err(|e| format!("{name}: {e}")),
    }
}

fn replay(name: &str) -> Result<(), String> {
    let trace = load(name)?;
    let mut temps: Vec<(&str, Box<dyn TempAllocator>)> = allocators::ALLOCATORS
        .iter()
        .map(|&(n, make)| (n, make()))
        .collect();
    let allocators = temps
        .iter_mut()
        .map(|(n, t)| -> (&str, &mut dyn TempAllocator) { (*n, &mut **t) });
    let rows = trace::compare_counting(&trace, allocators, PASSES, Some(&counting::allocations))
        .map_err(|e| format!("{name}: {e}"))?;
    println!(
        "{name}: {} requests, {} inferences, peak live {} B",
        trace.requests(),
        trace.inferences(),
        trace.peak_live_bytes()
    );
    println!(
        "  {:<18} {:>10} {:>15} {:>10} {:>11}",
        "allocator", "ns/req", "sys allocs/req", "held/peak", "vs caching"
    );
    for row in rows {
        println!(
            "  {:<18} {:>10.1} {:>15.3} {:>9.2}x {:>10.2}x",
            row.allocator,
            row.ns_per_request,
            row.system_allocations_per_request,
            row.held_over_peak,
            row.vs_reference
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() || names.iter().any(|n| n.starts_with('-')) {
        eprintln!("usage: cargo run --release --example replay -- TRACE...");
        return ExitCode::from(2);
    }
    for name in &names {
        if let Err(message) = replay(name) {
            eprintln!("replay: {message}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
