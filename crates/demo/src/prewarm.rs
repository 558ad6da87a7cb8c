//! `--prewarm`'s row: a first inference that takes no memory from the
//! system and no page fault in the allocator. Before it, the child records
//! a run of the prefill through a `RecordingAllocator` (untimed: what an app
//! would record once, at build or install time), plans it (`Trace::plan`),
//! and prewarms a fresh `CachingAllocator` that prefaults with the plan (at
//! load time: what an app would pay at launch instead of on the first
//! request). Then it generates as every other row does.

use std::time::Instant;

use tempalloc::trace::{Plan, Trace};
use tempalloc::{CachingAllocator, CachingConfig, RecordingAllocator, TempAllocator};

use crate::allocators::CACHING_HUGE_PAGES;
use crate::model::{Model, State};
use crate::process::minor_faults;
use crate::runtime::{PrewarmCost, Run, StepError, generate};

/// The row's name, and the name its child is run with.
pub const ROW: &str = "caching+prewarm";

/// The `caching` row's configuration (huge pages if `--huge-pages`).
fn caching_config() -> CachingConfig {
    CachingConfig::default()
        .huge_pages(CACHING_HUGE_PAGES.load(std::sync::atomic::Ordering::Relaxed))
}

/// Runs the prefill of `prompt` (no decode step) with scratch from a
/// `CachingAllocator` in a `RecordingAllocator`, and returns the recording.
pub fn record_prefill(model: &Model, prompt: &[u32]) -> Result<Trace, StepError> {
    let mut recorder = RecordingAllocator::new(CachingAllocator::with_config(caching_config()));
    let mut state = State::new(&model.config, prompt.len());
    for chunk in prompt.chunks(model.config.chunk.max(1)) {
        // The sampled token is not used; the reference check allocates no scratch.
        model.step(&mut state, &mut recorder, chunk, 0.5, false)?;
    }
    recorder.take_trace().map_err(StepError::Recording)
}

/// A fresh `CachingAllocator` like the `caching` row's, but prefaulting,
/// prewarmed with `plan`, and what that cost. Without the debug checks in
/// every build: with them every request is carved, a canary after it, from
/// one region that the prewarm sizes to the plan's total, canaries not
/// counted, so the first inference could still grow it.
pub fn prewarmed(plan: &Plan) -> Result<(CachingAllocator, PrewarmCost), tempalloc::Error> {
    let config = caching_config().prefault(true).debug_checks(false);
    let mut temp = CachingAllocator::with_config(config);
    let faults = minor_faults();
    let start = Instant::now();
    temp.prewarm(plan)?;
    let cost = PrewarmCost {
        ms: start.elapsed().as_secs_f64() * 1e3,
        faults: minor_faults().zip(faults).map(|(a, b)| a - b),
        system_allocations: temp.stats().system_allocations,
        regions: plan.regions().to_vec(),
        threads: plan.threads().len(),
        record_s: 0.0,
    };
    Ok((temp, cost))
}

/// The row's child: records the prefill, plans it, prewarms a fresh
/// allocator and generates `tokens` tokens with it.
pub fn run(model: &Model, prompt: &[u32], tokens: usize, probe: bool) -> Result<Run, String> {
    let start = Instant::now();
    let trace = record_prefill(model, prompt).map_err(|e| format!("{ROW}: recording: {e}"))?;
    let record_s = start.elapsed().as_secs_f64();
    let plan = trace.plan().map_err(|e| format!("{ROW}: plan: {e}"))?;
    drop(trace);
    let (temp, cost) = prewarmed(&plan).map_err(|e| format!("{ROW}: prewarm: {e}"))?;
    let mut run =
        generate(ROW, temp, model, prompt, tokens, probe).map_err(|e| format!("{ROW}: {e}"))?;
    run.prewarm = Some(PrewarmCost { record_s, ..cost });
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::with_tiny_model;
    use crate::cli::Args;

    #[test]
    fn a_prewarmed_first_inference_takes_no_memory_and_no_fault_in_the_allocator() {
        // Three prefill chunks, so the attention's scratch grows chunk by chunk.
        let args = Args {
            context: Some(40),
            chunk: Some(16),
            layers: Some(2),
            ..Args::default()
        };
        with_tiny_model(args, |model, prompt| {
            let temp = CachingAllocator::with_config(caching_config());
            let plain = generate("caching", temp, model, prompt, 3, true).expect("runs");
            let warm = run(model, prompt, 3, true).expect("runs");
            assert_eq!(warm.tokens, plain.tokens);
            assert_eq!(
                (warm.name, warm.prefill_steps, warm.steps.len()),
                (ROW, 3, 5)
            );

            let own = |r: &Run| -> Vec<u64> {
                r.steps[..r.prefill_steps]
                    .iter()
                    .map(|s| s.allocator_system_allocations)
                    .collect()
            };
            // Without the plan the first chunk takes memory; with it no chunk does.
            assert!(own(&plain)[0] > 0, "{:?}", own(&plain));
            assert_eq!(own(&warm), [0, 0, 0]);
            let cost = warm.prewarm.as_ref().expect("prewarmed");
            assert!(
                cost.system_allocations > 0 && !cost.regions.is_empty(),
                "{cost:?}"
            );
            assert_eq!(cost.threads, 1, "only the main thread allocates");

            if cfg!(target_os = "linux") {
                let (plain, warm) = (plain.first.expect("probed"), warm.first.expect("probed"));
                assert!(plain.cold_pages > 0, "{plain:?}");
                assert_eq!(warm.scratch_faults(), 0, "{warm:?}");
                assert!(
                    cost.faults.expect("getrusage") > 0,
                    "prefault touched the region"
                );
            }
        });
    }
}
