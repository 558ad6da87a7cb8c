//! Replays scratch-allocation traces through several temp allocators and
//! prints, per trace, how fast each served a request, how many system
//! allocations it made, and how much memory it held.
//!
//! ```text
//! cargo run --release --example replay -- TRACE... [--json] [--allocators LIST] [--repeat N]
//! ```
//!
//! `TRACE` is a trace file (see `tempalloc::trace`) or `steady`, `decode`,
//! `mixed` for the built-in generators. `LIST` is comma-separated, from
//! `malloc,exact-size-cache,bumpalo` (default: all). `N` timed passes follow
//! one warm-up pass (default 10).
//!
//! Columns: `ns/req` is the median over the timed passes of (pass time /
//! requests); `sys allocs/req` counts every call into the system allocator
//! during the timed passes (a counting `#[global_allocator]`), per request;
//! `held/peak` is the most bytes the allocator held (sampled before every
//! reset and at the end, in a measured pass after the timed ones) over the
//! most bytes live between two resets; `vs REF` is ns/req over the
//! reference allocator's (`caching` when present, else `malloc`).

#[path = "common/allocators.rs"]
mod allocators;
#[path = "common/counting.rs"]
mod counting;
#[path = "common/exact_size_cache.rs"]
mod exact_size_cache;

use std::fs::File;
use std::io::BufReader;
use std::process::ExitCode;
use std::time::Instant;

use tempalloc::TempAllocator;
use tempalloc::trace::{self, Trace};

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const USAGE: &str = "usage: replay TRACE... [--json] [--allocators LIST] [--repeat N]
  TRACE           a trace file, or steady | decode | mixed (built-in generators)
  --json          one JSON object per line instead of tables
  --allocators    comma-separated subset of the allocators (default: all)
  --repeat N      timed passes after one warm-up pass (default 10)";

struct Args {
    traces: Vec<String>,
    json: bool,
    allocators: Vec<&'static str>,
    repeat: usize,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        traces: Vec::new(),
        json: false,
        allocators: allocators::ALLOCATORS.iter().map(|(n, _)| *n).collect(),
        repeat: 10,
    };
    let names = || {
        allocators::ALLOCATORS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--json" => parsed.json = true,
            "--repeat" => {
                let v = value("--repeat")?;
                parsed.repeat = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(format!("--repeat: {v:?} is not a positive number"))?;
            }
            "--allocators" => {
                parsed.allocators.clear();
                for name in value("--allocators")?.split(',').filter(|n| !n.is_empty()) {
                    let Some(&(known, _)) = allocators::ALLOCATORS.iter().find(|(n, _)| *n == name)
                    else {
                        return Err(format!("unknown allocator {name:?}; known: {}", names()));
                    };
                    parsed.allocators.push(known);
                }
                if parsed.allocators.is_empty() {
                    return Err(format!("--allocators: empty list; known: {}", names()));
                }
            }
            f if f.starts_with('-') && f.len() > 1 => return Err(format!("unknown option {f}")),
            _ => parsed.traces.push(arg),
        }
    }
    if parsed.traces.is_empty() {
        return Err("no trace given".to_owned());
    }
    Ok(parsed)
}

fn load(name: &str) -> Result<Trace, String> {
    match name {
        "steady" => Ok(trace::steady()),
        "decode" => Ok(trace::decode()),
        "mixed" => Ok(trace::mixed()),
        path => {
            let file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
            Trace::from_reader(BufReader::new(file)).map_err(|e| format!("{path}: {e}"))
        }
    }
}

/// One allocator's numbers on one trace.
struct Row {
    allocator: &'static str,
    ns_per_alloc: f64,
    system_allocs_per_alloc: f64,
    held_over_peak: f64,
}

fn measure(trace: &Trace, name: &'static str, repeat: usize) -> Result<Row, String> {
    let make = allocators::by_name(name).ok_or(format!("unknown allocator {name}"))?;
    let mut temp: Box<dyn TempAllocator> = make();
    let requests = trace.requests().max(1) as f64;
    let fail = |e: tempalloc::Error| format!("{name}: {e}");
    trace.run(temp.as_mut()).map_err(fail)?;
    let mut per_request = Vec::with_capacity(repeat);
    let system_before = counting::allocations();
    for _ in 0..repeat {
        let start = Instant::now();
        trace.run(temp.as_mut()).map_err(fail)?;
        per_request.push(start.elapsed().as_nanos() as f64 / requests);
    }
    let system = counting::allocations() - system_before;
    // `per_request` was allocated before the timed passes and never grows.
    let report = trace.replay(temp.as_mut()).map_err(fail)?;
    per_request.sort_by(f64::total_cmp);
    let mid = per_request.len() / 2;
    let median = if per_request.len() % 2 == 0 {
        (per_request[mid - 1] + per_request[mid]) / 2.0
    } else {
        per_request[mid]
    };
    Ok(Row {
        allocator: name,
        ns_per_alloc: median,
        system_allocs_per_alloc: system as f64 / (requests * repeat as f64),
        held_over_peak: report.held_over_peak(),
    })
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn run(args: Args) -> Result<(), String> {
    let reference = allocators::reference(&args.allocators);
    for name in &args.traces {
        let trace = load(name)?;
        let rows = args
            .allocators
            .iter()
            .map(|a| measure(&trace, a, args.repeat))
            .collect::<Result<Vec<_>, _>>()?;
        let reference_ns = reference.map(|i| rows[i].ns_per_alloc);
        if args.json {
            for row in &rows {
                println!(
                    "{{\"trace\":{},\"allocator\":{},\"ns_per_alloc\":{:.3},\"system_allocs_per_alloc\":{:.4},\"held_over_peak\":{:.3}}}",
                    json_string(name),
                    json_string(row.allocator),
                    row.ns_per_alloc,
                    row.system_allocs_per_alloc,
                    row.held_over_peak,
                );
            }
            continue;
        }
        println!(
            "{name}: {} requests, {} resets, {} inferences, peak live {} B; {} timed passes",
            trace.requests(),
            trace.events().iter().filter(|e| e.is_reset()).count(),
            trace.inferences(),
            trace.peak_live_bytes(),
            args.repeat,
        );
        let vs = reference.map_or("-".to_owned(), |i| format!("vs {}", args.allocators[i]));
        println!(
            "  {:<18} {:>10} {:>15} {:>10} {:>12}",
            "allocator", "ns/req", "sys allocs/req", "held/peak", vs
        );
        for row in &rows {
            let ratio =
                reference_ns.map_or("-".to_owned(), |r| format!("{:.2}x", row.ns_per_alloc / r));
            println!(
                "  {:<18} {:>10.1} {:>15.3} {:>9.2}x {:>12}",
                row.allocator,
                row.ns_per_alloc,
                row.system_allocs_per_alloc,
                row.held_over_peak,
                ratio
            );
        }
        println!();
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            if message.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("replay: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("replay: {message}");
            ExitCode::FAILURE
        }
    }
}
