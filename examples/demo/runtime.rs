//! The runtime side: how kernels are called (a fresh context per call and a
//! reset after it, as ExecuTorch does after every instruction) and the
//! generation loop that times and counts each step.

use std::fmt;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::{ThreadPool, ThreadPoolBuildError, ThreadPoolBuilder};
use tempalloc::{Error, KernelContext, Stats, TempAllocator, with_context};

use crate::SYSTEM;
use crate::model::{Model, State};
use crate::rng::Rng;

/// Why a generation step stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepError {
    /// A kernel recorded a failure in its context.
    Kernel { kernel: &'static str, error: Error },
    /// The tiled attention disagreed with the naive reference.
    Mismatch { max_diff: f32 },
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Kernel { kernel, error } => write!(f, "kernel `{kernel}` failed: {error}"),
            StepError::Mismatch { max_diff } => {
                write!(
                    f,
                    "attention differs from the naive reference by {max_diff}"
                )
            }
        }
    }
}

/// The kernels' worker threads, made once per process before any generation:
/// `threads` in all, the calling thread included as thread 0, so kernels it
/// calls run their `pool.install` in place and split work with `join`. That
/// way a kernel call spawns nothing and queues nothing on the heap: in steady
/// state the pool makes no system allocation (a caller outside the pool would
/// go through rayon's injector queue, which allocates a block every 63 calls).
///
/// Returns once every thread has started and run a first job, so thread
/// start-up allocations are behind us. The calling thread stays in the pool
/// for good (rayon's `use_current_thread`): call this once per thread.
pub fn worker_pool(threads: usize) -> Result<ThreadPool, ThreadPoolBuildError> {
    let pool = ThreadPoolBuilder::new()
        .num_threads(threads)
        .use_current_thread()
        .thread_name(|i| format!("kernel-worker-{i}"))
        .build()?;
    pool.broadcast(|_| ());
    Ok(pool)
}

/// Calls one kernel: a fresh context over `temp`, then a reset that recycles
/// all its scratch at once; the failure the kernel recorded becomes an error.
pub fn run_kernel<R>(
    temp: &mut dyn TempAllocator,
    name: &'static str,
    kernel: impl FnOnce(&KernelContext) -> R,
) -> Result<R, StepError> {
    with_context(temp, |ctx| Ok(kernel(ctx))).map_err(|error| StepError::Kernel {
        kernel: name,
        error,
    })
}

/// What one allocator's generation measured.
pub struct Run {
    pub name: &'static str,
    pub tokens: Vec<u32>,
    /// Wall time of each step (the first is the prompt's prefill).
    pub step_ms: Vec<f64>,
    /// Calls into the system allocator during each step, process-wide.
    pub system_allocations: Vec<u64>,
    /// The allocator's counters after the first step, and at the end.
    pub stats_after_first: Stats,
    pub stats: Stats,
}

/// The sampler's random stream, apart from the weights' (same seed, other stream).
const SAMPLING_STREAM: u64 = 0x5A3D_1E5E_ED00_0001;

/// Generates `count` tokens after `prompt` with scratch from `temp`.
pub fn generate(
    name: &'static str,
    mut temp: Box<dyn TempAllocator>,
    model: &Model,
    prompt: &[u32],
    count: usize,
) -> Result<Run, StepError> {
    let mut state = State::new(&model.config, prompt.len() + count);
    let mut rng = Rng::new(model.config.seed ^ SAMPLING_STREAM);
    let mut run = Run {
        name,
        tokens: Vec::with_capacity(count),
        step_ms: Vec::with_capacity(count),
        system_allocations: Vec::with_capacity(count),
        stats_after_first: Stats::default(),
        stats: Stats::default(),
    };
    let bar = progress_bar(name, count);
    for step in 0..count {
        let input = match run.tokens.last() {
            None => prompt,
            Some(last) => std::slice::from_ref(last),
        };
        let uniform = rng.next_f32();
        // Only the step is timed and counted: not the bar, not the bookkeeping.
        let allocations_before = SYSTEM.allocations();
        let start = Instant::now();
        let token = model.step(&mut state, &mut *temp, input, uniform, step == 0)?;
        let elapsed = start.elapsed();
        run.system_allocations
            .push(SYSTEM.allocations() - allocations_before);
        run.step_ms.push(elapsed.as_secs_f64() * 1e3);
        run.tokens.push(token);
        if step == 0 {
            run.stats_after_first = temp.stats();
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    run.stats = temp.stats();
    Ok(run)
}

/// A bar on stdout, hidden when stdout is not a terminal (indicatif's rule).
fn progress_bar(name: &str, count: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(count as u64), ProgressDrawTarget::stdout());
    let style =
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} tokens ({per_sec})")
            .expect("the template is a valid constant")
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(name.to_owned());
    bar
}
