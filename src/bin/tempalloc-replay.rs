//! `tempalloc-replay`: replays scratch-allocation traces (recorded with
//! `tempalloc::RecordingAllocator` and written with `Trace::write_to`, or the
//! built-in workloads) through several temp allocators and prints, per
//! trace, one row per allocator ([`tempalloc::trace::compare_counting`], with
//! system allocations counted by a counting `#[global_allocator]`) as a table
//! or as JSON lines. With `--plan` it prints instead what each thread and
//! each region of a `CachingAllocator` must hold to serve the trace without
//! growing ([`tempalloc::trace::Plan`]).
//!
//! ```text
//! cargo install --path . --features cli
//! tempalloc-replay TRACE... [--json] [--allocators LIST] [--repeat N]
//! tempalloc-replay --plan TRACE... [--json]
//! ```

#[path = "../../examples/common/allocators.rs"]
mod allocators;
#[path = "../../examples/common/counting.rs"]
mod counting;
#[path = "../../examples/common/exact_size_cache.rs"]
mod exact_size_cache;

use std::fs::File;
use std::io::BufReader;
use std::process::ExitCode;

use tempalloc::trace::{self, Comparison, Event, ReplayStats, Trace};
use tempalloc::{CachingAllocator, TempAllocator};

/// Counts every call into the system allocator, whichever allocator makes it.
#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const USAGE: &str = "usage: tempalloc-replay TRACE... [--json] [--allocators LIST] [--repeat N]
       tempalloc-replay --plan TRACE... [--json]
  TRACE             a trace file, or steady | decode | mixed (built-in workloads)
  --plan            print what each thread and each region of a CachingAllocator
                    must hold to serve the trace without growing, instead of replaying
  --json            one JSON object per allocator (or plan) and trace, one a line
  --allocators LIST comma-separated, from malloc,exact-size-cache,bumpalo,caching (default: all)
  --repeat N        timed passes after one warm-up pass (default 10)
  -h, --help        print this help";

struct Args {
    traces: Vec<String>,
    json: bool,
    plan: bool,
    allocators: Vec<&'static str>,
    repeat: usize,
}

/// `Ok(None)` when help was asked for.
fn parse_args() -> Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        traces: Vec::new(),
        json: false,
        plan: false,
        allocators: allocators::ALLOCATORS.iter().map(|(n, _)| *n).collect(),
        repeat: 10,
    };
    let mut parser = lexopt::Parser::from_env();
    let error = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(error)? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("json") => args.json = true,
            Long("plan") => args.plan = true,
            Long("repeat") => {
                let value: usize = parser.value().map_err(error)?.parse().map_err(error)?;
                if value == 0 {
                    return Err("--repeat needs a positive number, got 0".to_owned());
                }
                args.repeat = value;
            }
            Long("allocators") => {
                let list = parser.value().map_err(error)?.string().map_err(error)?;
                args.allocators.clear();
                for name in list.split(',').filter(|n| !n.is_empty()) {
                    let Some(&(known, _)) = allocators::ALLOCATORS.iter().find(|(n, _)| *n == name)
                    else {
                        return Err(format!("unknown allocator {name:?}"));
                    };
                    args.allocators.push(known);
                }
                if args.allocators.is_empty() {
                    return Err("--allocators: empty list".to_owned());
                }
            }
            Value(trace) => args.traces.push(trace.string().map_err(error)?),
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if args.traces.is_empty() {
        return Err("no trace given".to_owned());
    }
    Ok(Some(args))
}

fn load(name: &str) -> Result<Trace, String> {
    if let Some(trace) = trace::workload(name) {
        return Ok(trace);
    }
    let file = File::open(name).map_err(|e| format!("{name}: {e}"))?;
    Trace::from_reader(BufReader::new(file)).map_err(|e| format!("{name}: {e}"))
}

fn print_table(name: &str, trace: &Trace, repeat: usize, rows: &[Comparison]) {
    println!(
        "{name}: {} requests, {} resets, {} inferences, peak live {} B; {repeat} timed passes",
        trace.requests(),
        trace.events().iter().filter(|e| e.is_reset()).count(),
        trace.inferences(),
        trace.peak_live_bytes(),
    );
    let reference = rows
        .iter()
        .find(|r| r.vs_reference == 1.0)
        .map_or("-", |r| r.allocator.as_str());
    println!(
        "  {:<18} {:>10} {:>15} {:>10} {:>12}",
        "allocator",
        "ns/req",
        "sys allocs/req",
        "held/peak",
        format!("vs {reference}")
    );
    for row in rows {
        println!(
            "  {:<18} {:>10.1} {:>15.3} {:>9.2}x {:>11.2}x",
            row.allocator,
            row.ns_per_request,
            row.system_allocations_per_request,
            row.held_over_peak,
            row.vs_reference,
        );
    }
    println!();
}

/// For a trace with checkpoints, rewinds or threads (`c`, `w`, `t`): a
/// second, warm pass of [`Trace::replay_caching`], which honours them (the
/// table's rows replay every request on one thread, keeping checkpointed
/// scratch until the next reset).
fn faithful_caching(trace: &Trace) -> Result<Option<ReplayStats>, tempalloc::Error> {
    let recorded = trace.events().iter().any(|e| {
        matches!(
            e,
            Event::Checkpoint { .. } | Event::Rewind { .. } | Event::Thread { .. }
        )
    });
    if !recorded {
        return Ok(None);
    }
    let mut temp = CachingAllocator::new();
    trace.replay_caching(&mut temp)?;
    trace.replay_caching(&mut temp).map(Some)
}

/// `--plan`: the plan of each trace, as text or one JSON line.
fn print_plans(args: &Args) -> Result<(), String> {
    for name in &args.traces {
        let plan = load(name)?.plan().map_err(|e| format!("{name}: {e}"))?;
        if args.json {
            let threads: serde_json::Map<String, serde_json::Value> = plan
                .threads()
                .iter()
                .map(|&(id, bytes)| (id.to_string(), bytes.into()))
                .collect();
            let line = serde_json::json!({
                "trace": name,
                "windows": plan.windows(),
                "regions": plan.regions(),
                "total_bytes": plan.total_bytes(),
                "threads": threads,
            });
            println!("{line}");
        } else {
            print!("# {name}\n{plan}");
        }
    }
    Ok(())
}

fn run(args: &Args) -> Result<(), String> {
    if args.plan {
        return print_plans(args);
    }
    for name in &args.traces {
        let trace = load(name)?;
        let mut temps: Vec<(&str, Box<dyn TempAllocator>)> = args
            .allocators
            .iter()
            .filter_map(|&n| allocators::by_name(n).map(|make| (n, make())))
            .collect();
        let rows = trace::compare_counting(
            &trace,
            temps
                .iter_mut()
                .map(|(n, t)| -> (&str, &mut dyn TempAllocator) { (*n, &mut **t) }),
            args.repeat,
            Some(&counting::allocations),
        )
        .map_err(|e| format!("{name}: {e}"))?;
        let faithful = faithful_caching(&trace).map_err(|e| format!("{name}: {e}"))?;
        if args.json {
            if let Some(report) = &faithful {
                let line = serde_json::json!({
                    "trace": name,
                    "allocator": "caching (checkpoints and threads)",
                    "system_allocations_warm": report.system_allocations,
                    "held_over_peak": report.held_over_peak(),
                });
                println!("{line}");
            }
            for row in &rows {
                let line = serde_json::json!({
                    "trace": name,
                    "allocator": row.allocator,
                    "ns_per_request": row.ns_per_request,
                    "system_allocations_per_request": row.system_allocations_per_request,
                    "held_over_peak": row.held_over_peak,
                    "vs_reference": row.vs_reference,
                });
                println!("{line}");
            }
        } else {
            print_table(name, &trace, args.repeat, &rows);
            if let Some(report) = faithful {
                println!(
                    "  caching, replayed with its checkpoints and threads (second pass): {report}\n"
                );
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("tempalloc-replay: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tempalloc-replay: {message}");
            ExitCode::FAILURE
        }
    }
}
