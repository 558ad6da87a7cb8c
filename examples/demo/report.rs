//! The table the demo prints, one row per allocator (medians over the
//! rounds), and the closing lines that set each allocator against caching.

use crate::numbers::median;
use crate::runtime::{Run, Step};

/// What one run measured (docs/demo.md explains each): over the decode
/// steps (one token each) unless said otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Median time of one decode step, and its median CPU time (every
    /// thread): the steadier of the two on a busy machine.
    pub ms_per_token: f64,
    pub cpu_ms_per_token: Option<f64>,
    /// Median microseconds inside the temp allocator per token.
    pub alloc_us: f64,
    /// The allocator's share of all decode time, in percent.
    pub share: f64,
    /// Minor page faults per token (mean).
    pub faults_per_token: Option<f64>,
    /// System allocations per token (mean).
    pub sys_allocs: f64,
    /// The most bytes the allocator held over the most bytes live, the
    /// first inference included.
    pub held_over_live: f64,
    /// The process's peak resident memory, and how far it rose above what
    /// it was before the first step, in MiB.
    pub peak_rss_mib: Option<f64>,
    pub rss_growth_mib: Option<f64>,
    /// The first inference (the prefill chunks): seconds, page faults.
    pub prefill_s: f64,
    pub prefill_faults: Option<f64>,
}

const MIB: f64 = (1 << 20) as f64;

impl Figures {
    pub fn of(run: &Run) -> Self {
        let decode = run.decode();
        let prefill = &run.steps[..run.prefill_steps];
        let ms: f64 = decode.iter().map(|s| s.ms).sum();
        let alloc_ns: f64 = decode.iter().map(|s| s.alloc_ns).sum();
        Figures {
            ms_per_token: median(&mut decode.iter().map(|s| s.ms).collect::<Vec<_>>()),
            cpu_ms_per_token: decode
                .iter()
                .map(|s| s.cpu_ms)
                .collect::<Option<Vec<_>>>()
                .map(|mut v| median(&mut v)),
            alloc_us: median(&mut decode.iter().map(|s| s.alloc_ns / 1e3).collect::<Vec<_>>()),
            share: 100.0 * alloc_ns / (ms * 1e6),
            faults_per_token: per_step(decode, |s| s.faults),
            sys_allocs: per_step(decode, |s| Some(s.system_allocations)).unwrap_or(0.0),
            held_over_live: run.peak_held as f64 / run.peak_live.max(1) as f64,
            peak_rss_mib: run.peak_rss.map(|b| b as f64 / MIB),
            rss_growth_mib: run
                .peak_rss
                .zip(run.rss_before)
                .map(|(peak, before)| peak.saturating_sub(before) as f64 / MIB),
            prefill_s: prefill.iter().map(|s| s.ms).sum::<f64>() / 1e3,
            prefill_faults: total(prefill, |s| s.faults).map(|t| t as f64),
        }
    }

    /// Each figure's median over `runs` (one allocator's rounds); a figure
    /// some run lacks is missing.
    pub fn median_of(runs: &[Run]) -> Self {
        let all: Vec<Figures> = runs.iter().map(Figures::of).collect();
        let m = |f: fn(&Figures) -> f64| median(&mut all.iter().map(f).collect::<Vec<_>>());
        let m_opt = |f: fn(&Figures) -> Option<f64>| {
            all.iter()
                .map(f)
                .collect::<Option<Vec<_>>>()
                .map(|mut v| median(&mut v))
        };
        Figures {
            ms_per_token: m(|f| f.ms_per_token),
            cpu_ms_per_token: m_opt(|f| f.cpu_ms_per_token),
            alloc_us: m(|f| f.alloc_us),
            share: m(|f| f.share),
            faults_per_token: m_opt(|f| f.faults_per_token),
            sys_allocs: m(|f| f.sys_allocs),
            held_over_live: m(|f| f.held_over_live),
            peak_rss_mib: m_opt(|f| f.peak_rss_mib),
            rss_growth_mib: m_opt(|f| f.rss_growth_mib),
            prefill_s: m(|f| f.prefill_s),
            prefill_faults: m_opt(|f| f.prefill_faults),
        }
    }
}

/// One row per allocator: `rows[i]` are its runs, one per round.
pub fn print_table(rows: &[Vec<Run>], agree: bool) {
    println!(
        "{:<17} {:>9} {:>7} {:>9} {:>7} {:>13} {:>10} {:>10} {:>9} {:>9} {:>9} {:>14}  tokens agree",
        "allocator",
        "ms/token",
        "cpu ms",
        "alloc us",
        "share",
        "faults/token",
        "sys allocs",
        "held/live",
        "RSS MiB",
        "grow MiB",
        "prefill s",
        "prefill faults",
    );
    for runs in rows {
        let f = Figures::median_of(runs);
        println!(
            "{:<17} {:>9.2} {:>7} {:>9.1} {:>6.2}% {:>13} {:>10.1} {:>9.2}x {:>9} {:>9} {:>9.2} {:>14}  {}",
            runs[0].name,
            f.ms_per_token,
            or_dash(f.cpu_ms_per_token, 2),
            f.alloc_us,
            f.share,
            or_dash(f.faults_per_token, 1),
            f.sys_allocs,
            f.held_over_live,
            or_dash(f.peak_rss_mib, 0),
            or_dash(f.rss_growth_mib, 0),
            f.prefill_s,
            or_dash(f.prefill_faults, 0),
            if agree { "yes" } else { "no" },
        );
    }
}

/// One line per allocator against `rows[reference]` (caching): time per
/// token, page faults per token, peak resident memory.
pub fn print_summary(rows: &[Vec<Run>], reference: usize) {
    let r = Figures::median_of(&rows[reference]);
    let name = rows[reference][0].name;
    println!(
        "against {name} ({:.2} ms per token, {} ms of CPU, {} page faults per token, peak RSS {} MiB):",
        r.ms_per_token,
        or_dash(r.cpu_ms_per_token, 2),
        or_dash(r.faults_per_token, 1),
        or_dash(r.peak_rss_mib, 0)
    );
    for (i, runs) in rows.iter().enumerate() {
        if i == reference {
            continue;
        }
        let f = Figures::median_of(runs);
        let rss = match (f.peak_rss_mib, r.peak_rss_mib) {
            (Some(a), Some(b)) => format!("{:.2}x ({a:.0} MiB)", a / b),
            _ => "-".to_owned(),
        };
        let cpu = f
            .cpu_ms_per_token
            .zip(r.cpu_ms_per_token)
            .map(|(a, b)| a / b);
        println!(
            "  {:<17} time per token {:.2}x (CPU {}x), page faults per token {} vs {}, peak RSS {rss}",
            runs[0].name,
            f.ms_per_token / r.ms_per_token,
            or_dash(cpu, 2),
            or_dash(f.faults_per_token, 1),
            or_dash(r.faults_per_token, 1),
        );
    }
}

/// The sum of `field` over `steps`, if every step has it.
fn total(steps: &[Step], field: impl Fn(&Step) -> Option<u64>) -> Option<u64> {
    steps.iter().map(field).sum()
}

/// The mean of `field` per step, if every step has it.
fn per_step(steps: &[Step], field: impl Fn(&Step) -> Option<u64>) -> Option<f64> {
    match total(steps, field) {
        Some(t) if !steps.is_empty() => Some(t as f64 / steps.len() as f64),
        _ => None,
    }
}

/// `value` with `decimals`, or "-" when unknown.
fn or_dash(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ms: f64, faults: u64, peak_rss: u64) -> Run {
        let step = |ms| Step {
            kv_len: 1,
            ms,
            cpu_ms: Some(2.0 * ms),
            alloc_ns: 1000.0,
            faults: Some(faults),
            system_allocations: 2,
        };
        Run {
            name: "x",
            tokens: vec![],
            steps: vec![step(100.0), step(ms), step(ms)],
            prefill_steps: 1,
            requests: 0,
            peak_held: 300,
            peak_live: 100,
            rss_before: Some(1 << 20),
            peak_rss: Some(peak_rss << 20),
        }
    }

    #[test]
    fn figures_of_a_run_and_medians_over_rounds() {
        let f = Figures::of(&run(4.0, 6, 10));
        assert_eq!((f.ms_per_token, f.alloc_us, f.sys_allocs), (4.0, 1.0, 2.0));
        assert_eq!(f.cpu_ms_per_token, Some(8.0));
        assert_eq!(
            (f.faults_per_token, f.prefill_faults),
            (Some(6.0), Some(6.0))
        );
        assert_eq!((f.held_over_live, f.prefill_s), (3.0, 0.1));
        assert_eq!((f.peak_rss_mib, f.rss_growth_mib), (Some(10.0), Some(9.0)));
        assert_eq!(f.share, 100.0 * 2000.0 / 8e6);
        // Rounds of 4, 9 and 5 ms: the median is 5 whatever the order.
        let rounds = [run(4.0, 1, 10), run(9.0, 3, 30), run(5.0, 2, 20)];
        let m = Figures::median_of(&rounds);
        assert_eq!((m.ms_per_token, m.faults_per_token), (5.0, Some(2.0)));
        assert_eq!(m.peak_rss_mib, Some(20.0));
        let mut unknown = run(5.0, 2, 20);
        unknown.peak_rss = None;
        assert_eq!(Figures::median_of(&[unknown]).peak_rss_mib, None);
    }
}
