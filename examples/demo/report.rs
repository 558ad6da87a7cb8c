//! The table the demo prints: one row per allocator.

use crate::runtime::Run;

/// Tokens shown per row: enough to see that the runs agree.
const SHOWN_TOKENS: usize = 8;

/// Columns (docs/demo.md explains them): median ms per token; scratch
/// requests per token; system allocations per token after the first,
/// process-wide (counted by the global allocator) and by the temp allocator
/// itself (its `Stats`); bytes the allocator holds at the end.
pub fn print_table(runs: &[Run]) {
    println!(
        "{:<10} {:>9} {:>13} {:>16} {:>12} {:>10}  first tokens",
        "allocator", "ms/token", "scratch/token", "sys allocs/token", "by allocator", "bytes held"
    );
    for run in runs {
        let generated = run.tokens.len() as f64;
        // Steps after the first: the first is the prefill, and warms caches up.
        let later = run.tokens.len().saturating_sub(1) as f64;
        let system: u64 = run.system_allocations.iter().skip(1).sum();
        let own = run.stats.system_allocations - run.stats_after_first.system_allocations;
        let first: Vec<String> = run
            .tokens
            .iter()
            .take(SHOWN_TOKENS)
            .map(u32::to_string)
            .collect();
        println!(
            "{:<10} {:>9.3} {:>13.1} {:>16} {:>12} {:>10}  {} ...",
            run.name,
            median(&run.step_ms),
            run.stats.allocations as f64 / generated,
            per_step(system, later),
            per_step(own, later),
            run.stats.bytes_held,
            first.join(" "),
        );
    }
}

/// `total / steps` with one decimal, or "-" when there are no later steps.
fn per_step(total: u64, steps: f64) -> String {
    if steps == 0.0 {
        "-".to_owned()
    } else {
        format!("{:.1}", total as f64 / steps)
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
