//! The table the demo prints, one row per allocator (medians over the
//! rounds), and the closing lines that set each allocator against caching.

use crate::model::Config;
use crate::numbers::median;
use crate::runtime::{FirstInference, PrewarmCost, Run, Step};

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
        let m_opt = |f: fn(&Figures) -> Option<f64>| median_opt(all.iter().map(f));
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

/// `malloc` against `caching` over each global allocator the table has
/// both of (the platform's, mimalloc): like with like, as a process's other
/// allocations (weights, KV cache, the kernels' own vectors) come from its
/// global allocator. Empty unless there are two such pairs: with one, the
/// summary above says it all.
pub fn like_for_like(rows: &[Vec<Run>]) -> Vec<String> {
    let find = |name: &str| {
        rows.iter()
            .find(|runs| runs[0].name == name)
            .map(|runs| Figures::median_of(runs))
    };
    let lines: Vec<String> = [("malloc", "caching"), ("malloc/mimalloc", "caching/mimalloc")]
        .iter()
        .filter_map(|&(malloc, caching)| {
            let (m, c) = (find(malloc)?, find(caching)?);
            Some(format!(
                "  {malloc:<17} {:.2}x {caching}'s time per token (CPU {}x), page faults per token {} vs {}",
                m.ms_per_token / c.ms_per_token,
                or_dash(m.cpu_ms_per_token.zip(c.cpu_ms_per_token).map(|(a, b)| a / b), 2),
                or_dash(m.faults_per_token, 1),
                or_dash(c.faults_per_token, 1),
            ))
        })
        .collect();
    if lines.len() < 2 {
        return Vec::new();
    }
    let mut out =
        vec!["like with like (malloc against caching over the same global allocator):".to_owned()];
    out.extend(lines);
    out
}

/// The first inference (the prefill) of one run (`--prewarm`): time, page
/// faults and where they were, and the allocator's own system allocations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstFigures {
    pub seconds: f64,
    pub cpu_s: Option<f64>,
    /// The process's minor faults, then those in the allocator's calls, on
    /// scratch it handed out cold, on the KV cache, in the reference check,
    /// and the rest.
    pub faults: Option<f64>,
    pub in_calls: Option<f64>,
    pub cold_scratch: Option<f64>,
    pub kv_cache: Option<f64>,
    pub check: Option<f64>,
    pub elsewhere: Option<f64>,
    pub allocator_system_allocations: f64,
}

impl FirstFigures {
    pub fn of(run: &Run) -> Self {
        let prefill = &run.steps[..run.prefill_steps];
        let faults = total(prefill, |s| s.faults);
        let first = run.first.as_ref();
        let count = |f: fn(&FirstInference) -> u64| first.map(|x| f(x) as f64);
        FirstFigures {
            seconds: prefill.iter().map(|s| s.ms).sum::<f64>() / 1e3,
            cpu_s: prefill
                .iter()
                .map(|s| s.cpu_ms)
                .sum::<Option<f64>>()
                .map(|ms| ms / 1e3),
            faults: faults.map(|f| f as f64),
            in_calls: count(|f| f.call_faults),
            cold_scratch: count(|f| f.cold_pages),
            kv_cache: count(|f| f.kv_pages),
            check: count(|f| f.check_faults),
            elsewhere: first.zip(faults).map(|(f, all)| {
                all as f64 - (f.scratch_faults() + f.kv_pages + f.check_faults) as f64
            }),
            allocator_system_allocations: prefill
                .iter()
                .map(|s| s.allocator_system_allocations)
                .sum::<u64>() as f64,
        }
    }

    /// Each figure's median over `runs` (one row's rounds).
    pub fn median_of(runs: &[Run]) -> Self {
        let all: Vec<FirstFigures> = runs.iter().map(FirstFigures::of).collect();
        let m = |f: fn(&FirstFigures) -> Option<f64>| median_opt(all.iter().map(f));
        FirstFigures {
            seconds: median(&mut all.iter().map(|f| f.seconds).collect::<Vec<_>>()),
            cpu_s: m(|f| f.cpu_s),
            faults: m(|f| f.faults),
            in_calls: m(|f| f.in_calls),
            cold_scratch: m(|f| f.cold_scratch),
            kv_cache: m(|f| f.kv_cache),
            check: m(|f| f.check),
            elsewhere: m(|f| f.elsewhere),
            allocator_system_allocations: median(
                &mut all
                    .iter()
                    .map(|f| f.allocator_system_allocations)
                    .collect::<Vec<_>>(),
            ),
        }
    }
}

/// The median of `values`, if every one is known.
fn median_opt(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values
        .collect::<Option<Vec<_>>>()
        .map(|mut v| median(&mut v))
}

/// The first inference (the prefill) of each row, medians over the rounds
/// (`--prewarm`), then what prewarming cost the row that prewarmed.
pub fn print_first_inference(rows: &[Vec<Run>], config: &Config) {
    println!(
        "first inference ({} prompt tokens in chunks of {}), medians; its page faults: all, in the allocator's calls, on scratch it handed out cold, on the KV cache, in the check against the reference, elsewhere",
        config.prompt_len, config.chunk
    );
    println!(
        "{:<17} {:>9} {:>7} {:>8} {:>9} {:>12} {:>9} {:>6} {:>9} {:>17}",
        "allocator",
        "prefill s",
        "cpu s",
        "faults",
        "in calls",
        "cold scratch",
        "KV cache",
        "check",
        "elsewhere",
        "alloc sys allocs"
    );
    for runs in rows {
        let f = FirstFigures::median_of(runs);
        println!(
            "{:<17} {:>9.2} {:>7} {:>8} {:>9} {:>12} {:>9} {:>6} {:>9} {:>17.0}",
            runs[0].name,
            f.seconds,
            or_dash(f.cpu_s, 2),
            or_dash(f.faults, 0),
            or_dash(f.in_calls, 0),
            or_dash(f.cold_scratch, 0),
            or_dash(f.kv_cache, 0),
            or_dash(f.check, 0),
            or_dash(f.elsewhere, 0),
            f.allocator_system_allocations,
        );
    }
    for runs in rows {
        if let Some(cost) = runs[0].prewarm.as_ref() {
            print_prewarm_cost(runs[0].name, cost, runs);
        }
    }
}

/// What prewarming cost `name`'s child before its first inference: the
/// plan from the first round, the times and counts medians over `runs`.
fn print_prewarm_cost(name: &str, plan: &PrewarmCost, runs: &[Run]) {
    let costs = || runs.iter().filter_map(|r| r.prewarm.as_ref());
    let m = |f: fn(&PrewarmCost) -> f64| median(&mut costs().map(f).collect::<Vec<_>>());
    let regions: Vec<String> = plan
        .regions
        .iter()
        .map(|&b| format!("{:.1}", b as f64 / MIB))
        .collect();
    let who = match plan.threads {
        1 => {
            "only the main thread allocated: it carves the activations and every kernel's scratch, \
              the workers' tiles included, before the workers split the work"
                .to_owned()
        }
        n => format!("{n} threads allocated; the first to allocate takes the largest"),
    };
    println!(
        "{name}: before the first inference, recorded the prefill ({:.2} s), planned {} region(s) of {} MiB ({who}), \
         and prewarmed with prefault in {:.1} ms (page faults: {}, system allocations: {:.0})",
        m(|p| p.record_s),
        regions.len(),
        regions.join(" + "),
        m(|p| p.ms),
        or_dash(median_opt(costs().map(|p| p.faults.map(|f| f as f64))), 0),
        m(|p| p.system_allocations as f64),
    );
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
            allocator_system_allocations: 1,
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
            ..Run::default()
        }
    }

    #[test]
    fn like_for_like_pairs_each_global_allocators_rows() {
        let named = |name, ms| Run {
            name,
            ..run(ms, 6, 10)
        };
        let rows = vec![
            vec![named("malloc", 8.0)],
            vec![named("malloc/mimalloc", 6.0)],
            vec![named("caching/mimalloc", 4.0)],
            vec![named("caching", 5.0)],
        ];
        let lines = like_for_like(&rows);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[1].contains("malloc            1.60x caching's"),
            "{lines:?}"
        );
        assert!(
            lines[2].contains("malloc/mimalloc   1.50x caching/mimalloc's"),
            "{lines:?}"
        );
        // One pair only: nothing beyond the summary.
        assert!(like_for_like(&rows[..1]).is_empty());
        let platform_only = vec![vec![named("malloc", 8.0)], vec![named("caching", 5.0)]];
        assert!(like_for_like(&platform_only).is_empty());
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

    #[test]
    fn the_first_inference_s_faults_are_split_by_where_they_were() {
        // A prefill of one step: 100 ms and 6 faults.
        let mut r = run(4.0, 6, 10);
        assert_eq!(FirstFigures::of(&r).in_calls, None, "not probed");
        r.first = Some(FirstInference {
            call_faults: 1,
            cold_pages: 2,
            kv_pages: 1,
            check_faults: 1,
        });
        let f = FirstFigures::of(&r);
        assert_eq!((f.seconds, f.cpu_s, f.faults), (0.1, Some(0.2), Some(6.0)));
        assert_eq!(
            (f.in_calls, f.cold_scratch, f.kv_cache),
            (Some(1.0), Some(2.0), Some(1.0))
        );
        assert_eq!(f.check, Some(1.0));
        assert_eq!(
            (f.elsewhere, f.allocator_system_allocations),
            (Some(1.0), 1.0)
        );
        // Over rounds, each figure's median; one unprobed round hides the split.
        let mut other = run(4.0, 20, 10);
        other.first = r.first;
        let m = FirstFigures::median_of(&[run(4.0, 2, 10), r, other]);
        assert_eq!((m.faults, m.in_calls), (Some(6.0), None));
    }
}
