//! The table the demo prints: one row per allocator.

use crate::numbers::median;
use crate::runtime::{Run, Step};

/// Columns (docs/demo.md explains them), over the decode steps (one token
/// each) unless said otherwise: median ms per token; median microseconds
/// inside the temp allocator per token and the allocator's share of all
/// decode time; minor page faults and system allocations per token (means);
/// the peak bytes the allocator held over the peak bytes live (taken and
/// not rewound or reset), the first inference included; the prefill's time
/// and page faults; whether the tokens agree with the first allocator's.
pub fn print_table(runs: &[Run], agree: bool) {
    println!(
        "{:<17} {:>9} {:>10} {:>7} {:>13} {:>11} {:>10} {:>9} {:>14}  tokens agree",
        "allocator",
        "ms/token",
        "alloc us",
        "share",
        "faults/token",
        "sys allocs",
        "held/live",
        "prefill s",
        "prefill faults",
    );
    for run in runs {
        let decode = run.decode();
        let prefill = &run.steps[..run.prefill_steps];
        let ms: f64 = decode.iter().map(|s| s.ms).sum();
        let alloc_ns: f64 = decode.iter().map(|s| s.alloc_ns).sum();
        println!(
            "{:<17} {:>9.2} {:>10.1} {:>6.2}% {:>13} {:>11} {:>9.2}x {:>9.2} {:>14}  {}",
            run.name,
            median(&mut decode.iter().map(|s| s.ms).collect::<Vec<_>>()),
            median(&mut decode.iter().map(|s| s.alloc_ns / 1e3).collect::<Vec<_>>()),
            100.0 * alloc_ns / (ms * 1e6),
            per_step(decode, |s| s.faults),
            per_step(decode, |s| Some(s.system_allocations)),
            run.peak_held as f64 / run.peak_live.max(1) as f64,
            prefill.iter().map(|s| s.ms).sum::<f64>() / 1e3,
            total(prefill, |s| s.faults).map_or("-".to_owned(), |t| t.to_string()),
            if agree { "yes" } else { "no" },
        );
    }
}

/// The sum of `field` over `steps`, if every step has it.
fn total(steps: &[Step], field: impl Fn(&Step) -> Option<u64>) -> Option<u64> {
    steps.iter().map(field).sum()
}

/// The mean of `field` per step with one decimal, or "-" when unknown.
fn per_step(steps: &[Step], field: impl Fn(&Step) -> Option<u64>) -> String {
    match total(steps, field) {
        Some(t) if !steps.is_empty() => format!("{:.1}", t as f64 / steps.len() as f64),
        _ => "-".to_owned(),
    }
}
