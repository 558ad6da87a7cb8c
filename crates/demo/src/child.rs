//! Each allocator runs in a child process of its own, so that its page
//! faults and resident memory are its own and no run inherits a heap that
//! another left warm (or fragmented). The demo re-executes a binary (its
//! own, or the mimalloc build's) with the hidden `--child NAME` option; the
//! child generates with that one allocator and prints one report line,
//! which [`run`] reads back into a [`Run`].

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::runtime::{FirstInference, PrewarmCost, Run, Step};

/// Starts the line that carries the report, so that nothing else a child
/// prints on stdout can be taken for it.
const PREFIX: &str = "demo-child-report ";

/// Prints `run` as the child's report.
pub fn print_report(run: &Run) {
    println!("{PREFIX}{}", report_json(run));
}

fn report_json(run: &Run) -> Value {
    let steps: Vec<Value> = run
        .steps
        .iter()
        .map(|s| {
            json!([
                s.kv_len,
                s.ms,
                s.alloc_ns,
                s.faults,
                s.system_allocations,
                s.cpu_ms,
                s.allocator_system_allocations
            ])
        })
        .collect();
    json!({
        "tokens": run.tokens,
        "steps": steps,
        "prefill_steps": run.prefill_steps,
        "requests": run.requests,
        "peak_held": run.peak_held,
        "peak_live": run.peak_live,
        "rss_before": run.rss_before,
        "peak_rss": run.peak_rss,
        "first": run.first.map(|f| json!([f.call_faults, f.cold_pages, f.kv_pages, f.check_faults])),
        "prewarm": run.prewarm.as_ref().map(|p| json!({
            "record_s": p.record_s,
            "regions": p.regions,
            "threads": p.threads,
            "ms": p.ms,
            "faults": p.faults,
            "system_allocations": p.system_allocations,
        })),
    })
}

/// Runs `exe args --child allocator` with `env` added to its environment
/// and returns its run, named `name`.
pub fn run(
    exe: &Path,
    args: &[String],
    env: &[(&str, &str)],
    allocator: &str,
    name: &'static str,
) -> Result<Run, String> {
    let output = Command::new(exe)
        .args(args)
        .args(["--child", allocator])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} --child {allocator} failed ({})",
            exe.display(),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    parse_report(name, &stdout)
}

/// The run a child reported in `stdout`.
fn parse_report(name: &'static str, stdout: &str) -> Result<Run, String> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(PREFIX))
        .ok_or_else(|| format!("{name}: the child printed no report"))?;
    let v: Value = serde_json::from_str(line).map_err(|e| format!("{name}: {e}"))?;
    let bad = |field: &str| format!("{name}: bad report field {field:?}");
    let uint = |field: &str| v[field].as_u64().ok_or_else(|| bad(field));
    let steps = v["steps"]
        .as_array()
        .ok_or_else(|| bad("steps"))?
        .iter()
        .map(|s| {
            Some(Step {
                kv_len: s[0].as_u64()? as usize,
                ms: s[1].as_f64()?,
                alloc_ns: s[2].as_f64()?,
                faults: s[3].as_u64(),
                system_allocations: s[4].as_u64()?,
                cpu_ms: s[5].as_f64(),
                allocator_system_allocations: s[6].as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("steps"))?;
    let tokens = v["tokens"]
        .as_array()
        .ok_or_else(|| bad("tokens"))?
        .iter()
        .map(|t| t.as_u64().map(|t| t as u32))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("tokens"))?;
    Ok(Run {
        name,
        tokens,
        steps,
        prefill_steps: uint("prefill_steps")? as usize,
        requests: uint("requests")?,
        peak_held: uint("peak_held")? as usize,
        peak_live: uint("peak_live")? as usize,
        rss_before: v["rss_before"].as_u64(),
        peak_rss: v["peak_rss"].as_u64(),
        first: optional(&v["first"], |f| {
            Some(FirstInference {
                call_faults: f[0].as_u64()?,
                cold_pages: f[1].as_u64()?,
                kv_pages: f[2].as_u64()?,
                check_faults: f[3].as_u64()?,
            })
        })
        .ok_or_else(|| bad("first"))?,
        prewarm: optional(&v["prewarm"], |p| {
            Some(PrewarmCost {
                record_s: p["record_s"].as_f64()?,
                regions: p["regions"]
                    .as_array()?
                    .iter()
                    .map(|r| r.as_u64().map(|r| r as usize))
                    .collect::<Option<_>>()?,
                threads: p["threads"].as_u64()? as usize,
                ms: p["ms"].as_f64()?,
                faults: p["faults"].as_u64(),
                system_allocations: p["system_allocations"].as_u64()?,
            })
        })
        .ok_or_else(|| bad("prewarm"))?,
    })
}

/// `None` for `null`, else what `read` makes of `value` (`None` inside if
/// it cannot): `None` means a bad field.
fn optional<T>(value: &Value, read: impl FnOnce(&Value) -> Option<T>) -> Option<Option<T>> {
    if value.is_null() {
        Some(None)
    } else {
        read(value).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_the_run_it_was() {
        let step = |kv_len, faults: Option<u64>| Step {
            kv_len,
            ms: 1.5,
            cpu_ms: faults.map(|f| f as f64 / 2.0),
            alloc_ns: 250.0,
            faults,
            system_allocations: 3,
            allocator_system_allocations: kv_len as u64 - 4,
        };
        let run = Run {
            name: "caching",
            tokens: vec![7, 1 << 20],
            steps: vec![step(4, Some(9)), step(5, None)],
            prefill_steps: 1,
            requests: 12,
            peak_held: 4096,
            peak_live: 4000,
            rss_before: Some(1 << 30),
            peak_rss: None,
            first: Some(FirstInference {
                call_faults: 1,
                cold_pages: 20,
                kv_pages: 300,
                check_faults: 4000,
            }),
            prewarm: Some(PrewarmCost {
                record_s: 1.25,
                regions: vec![1 << 24, 4096],
                threads: 2,
                ms: 7.5,
                faults: None,
                system_allocations: 2,
            }),
        };
        let steps = |r: &Run| {
            r.steps
                .iter()
                .map(|s| {
                    (
                        s.kv_len,
                        s.ms,
                        s.alloc_ns,
                        s.faults,
                        s.system_allocations,
                        s.cpu_ms,
                        s.allocator_system_allocations,
                    )
                })
                .collect::<Vec<_>>()
        };
        // What print_report writes, with other output around it.
        let stdout = format!("noise\n{PREFIX}{}\nmore\n", report_json(&run));
        let back = parse_report("caching", &stdout).expect("parses");
        assert_eq!((&back.tokens, steps(&back)), (&run.tokens, steps(&run)));
        assert_eq!(
            (
                back.prefill_steps,
                back.requests,
                back.peak_held,
                back.peak_live
            ),
            (1, 12, 4096, 4000)
        );
        assert_eq!((back.rss_before, back.peak_rss), (Some(1 << 30), None));
        assert_eq!((back.first, &back.prewarm), (run.first, &run.prewarm));
        // A run without them reads back without them.
        let plain = Run {
            first: None,
            prewarm: None,
            ..run
        };
        let back = parse_report("caching", &format!("{PREFIX}{}", report_json(&plain)));
        let back = back.expect("parses");
        assert_eq!((back.first, back.prewarm), (None, None));
        assert!(parse_report("caching", "no report\n").is_err());
        assert!(parse_report("caching", &format!("{PREFIX}{{\"tokens\": 1}}")).is_err());
    }
}
