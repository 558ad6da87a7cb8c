//! The runtime side: how kernels are called (each step, a prefill chunk or a
//! decode token, in a frame of the temp allocator, and each kernel call in a
//! kernel frame of it, rewound when the kernel returns, as ExecuTorch resets
//! after every instruction: every kernel call goes through [`run_kernel`])
//! and the generation loop that times and counts each step.

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::{ThreadPool, ThreadPoolBuildError, ThreadPoolBuilder};
use tempalloc::{Error, Frame, KernelContext, Rewind, Stats, TempAllocator};

use crate::counting;
use crate::model::{Model, State};
use crate::process::{self, cpu_ms, minor_faults};
use crate::rng::Rng;

/// Why a generation step stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepError {
    /// A kernel failed (or recorded a failure in its context).
    Kernel { kernel: &'static str, error: Error },
    /// The step's frame could not take its activations.
    Activations(Error),
    /// The tiled attention disagreed with the naive reference.
    Mismatch { max_diff: f32 },
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Kernel { kernel, error } => write!(f, "kernel `{kernel}` failed: {error}"),
            StepError::Activations(error) => write!(f, "no scratch for the activations: {error}"),
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

/// Calls one kernel in a kernel frame of `inf`: its scratch is recycled when
/// it returns, and its failure becomes an error that names it.
pub fn run_kernel<A: Rewind, R>(
    inf: &mut Frame<'_, A>,
    name: &'static str,
    kernel: impl FnOnce(&KernelContext) -> Result<R, Error>,
) -> Result<R, StepError> {
    inf.kernel(kernel).map_err(|error| StepError::Kernel {
        kernel: name,
        error,
    })
}

/// What one step (a prefill chunk or a decode token) measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Step {
    /// Positions in the KV cache after the step.
    pub kv_len: usize,
    pub ms: f64,
    /// CPU time of the process during the step (every thread), when known.
    pub cpu_ms: Option<f64>,
    /// Time inside the temp allocator (allocate, checkpoint, rewind and
    /// reset), timer cost subtracted.
    pub alloc_ns: f64,
    /// Minor page faults in the process during the step (`getrusage`).
    pub faults: Option<u64>,
    /// Calls into the system allocator during the step, process-wide.
    pub system_allocations: u64,
}

/// What one allocator's generation measured.
pub struct Run {
    pub name: &'static str,
    pub tokens: Vec<u32>,
    /// The prefill chunks (the first inference), then one step per decode token.
    pub steps: Vec<Step>,
    pub prefill_steps: usize,
    /// Scratch requests in the whole run.
    pub requests: u64,
    /// The most bytes the allocator held, and the most bytes live (taken and
    /// not rewound or reset), over the whole run (the first inference
    /// included).
    pub peak_held: usize,
    pub peak_live: usize,
    /// The process's resident memory before the first step, and at its
    /// peak by the end (`None` where the system does not say). Each
    /// allocator runs in a process of its own, so these are its own.
    pub rss_before: Option<u64>,
    pub peak_rss: Option<u64>,
}

impl Run {
    pub fn decode(&self) -> &[Step] {
        &self.steps[self.prefill_steps..]
    }
}

/// The sampler's random stream, apart from the weights' (same seed, other stream).
const SAMPLING_STREAM: u64 = 0x5A3D_1E5E_ED00_0001;

/// Prefills `prompt` in chunks, then generates until `count` tokens (the
/// prefill's included) with scratch from `temp`, timing every step.
pub fn generate<A: Rewind>(
    name: &'static str,
    temp: A,
    model: &Model,
    prompt: &[u32],
    count: usize,
) -> Result<Run, StepError> {
    let mut temp = Timed::new(temp);
    let mut state = State::new(&model.config, prompt.len() + count);
    let mut rng = Rng::new(model.config.seed ^ SAMPLING_STREAM);
    let chunks = prompt.chunks(model.config.chunk.max(1));
    let prefill_steps = chunks.len();
    let mut run = Run {
        name,
        tokens: Vec::with_capacity(count),
        steps: Vec::with_capacity(prefill_steps + count),
        prefill_steps,
        requests: 0,
        peak_held: 0,
        peak_live: 0,
        rss_before: process::rss(),
        peak_rss: None,
    };
    let bar = progress_bar(name, prefill_steps + count - 1);
    let mut inputs = chunks.collect::<Vec<_>>().into_iter();
    let mut last = 0;
    for step in 0..prefill_steps + count - 1 {
        let input = match inputs.next() {
            Some(chunk) => chunk,
            None => std::slice::from_ref(&last),
        };
        let uniform = rng.next_f32();
        // Only the step is timed and counted: not the bar, not the bookkeeping.
        let faults_before = minor_faults();
        let allocations_before = counting::allocations();
        let alloc_before = temp.nanos();
        let cpu_before = cpu_ms();
        let start = Instant::now();
        let token = model.step(&mut state, &mut temp, input, uniform, step == 0)?;
        let elapsed = start.elapsed();
        run.steps.push(Step {
            kv_len: state.len(),
            ms: elapsed.as_secs_f64() * 1e3,
            cpu_ms: cpu_ms().zip(cpu_before).map(|(a, b)| a - b),
            alloc_ns: temp.nanos() - alloc_before,
            faults: minor_faults().zip(faults_before).map(|(a, b)| a - b),
            system_allocations: counting::allocations() - allocations_before,
        });
        if step + 1 >= prefill_steps {
            run.tokens.push(token);
        }
        last = token;
        bar.inc(1);
    }
    bar.finish_and_clear();
    run.requests = temp.inner.stats().allocations;
    run.peak_held = temp.peak_held;
    run.peak_live = temp.peak_live.load(Relaxed);
    run.peak_rss = process::peak_rss();
    Ok(run)
}

/// A temp allocator that times every call into the one it wraps and follows
/// the bytes held and live, so every allocator is measured the same way.
pub struct Timed<A> {
    inner: A,
    /// Nanoseconds inside the allocator, summed over the threads.
    nanos: AtomicU64,
    /// Bytes taken and not rewound or reset: what the program can still use,
    /// whether or not the allocator can reuse the rest yet.
    live: AtomicUsize,
    peak_live: AtomicUsize,
    peak_held: usize,
    /// What an empty `Instant::now()` + `elapsed()` pair costs, subtracted.
    overhead_ns: f64,
}

impl<A: TempAllocator> Timed<A> {
    pub fn new(inner: A) -> Self {
        Timed {
            inner,
            nanos: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            peak_live: AtomicUsize::new(0),
            peak_held: 0,
            overhead_ns: timer_overhead_ns(),
        }
    }

    /// Nanoseconds spent inside the wrapped allocator so far.
    pub fn nanos(&self) -> f64 {
        self.nanos.load(Relaxed) as f64
    }

    fn add(&self, start: Instant) {
        let ns = start.elapsed().as_nanos() as f64 - self.overhead_ns;
        self.nanos.fetch_add(ns.max(0.0) as u64, Relaxed);
    }

    /// Called before memory is recycled, when what the allocator holds
    /// includes the scratch of the scope that ends.
    fn note_held(&mut self) {
        self.peak_held = self.peak_held.max(self.inner.stats().bytes_held);
    }
}

/// The median cost of timing nothing, over a few thousand tries.
pub fn timer_overhead_ns() -> f64 {
    let mut samples: Vec<f64> = (0..4096)
        .map(|_| {
            let start = Instant::now();
            start.elapsed().as_nanos() as f64
        })
        .collect();
    crate::numbers::median(&mut samples)
}

// SAFETY: every call is forwarded to `inner` unchanged, so `inner`'s
// guarantees (aligned, unaliased memory valid until the next reset) are ours;
// the timing and counting touch no memory the caller sees.
unsafe impl<A: TempAllocator> TempAllocator for Timed<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let start = Instant::now();
        let result = self.inner.allocate(layout);
        self.add(start);
        if result.is_ok() {
            let live = self.live.fetch_add(layout.size(), Relaxed) + layout.size();
            self.peak_live.fetch_max(live, Relaxed);
        }
        result
    }

    fn reset(&mut self) {
        self.note_held();
        let start = Instant::now();
        self.inner.reset();
        self.add(start);
        *self.live.get_mut() = 0;
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

/// A checkpoint of the wrapped allocator and the bytes live when it was taken.
pub struct TimedCheckpoint<C> {
    inner: C,
    live: usize,
}

// SAFETY: `checkpoint` and `rewind` go to `inner` unchanged, which upholds
// `Rewind`'s contract; the memory it hands out is not inside `inner`, so not
// inside this wrapper either.
unsafe impl<A: Rewind> Rewind for Timed<A> {
    type Checkpoint = TimedCheckpoint<A::Checkpoint>;

    fn checkpoint(&self) -> Result<Self::Checkpoint, Error> {
        let start = Instant::now();
        let inner = self.inner.checkpoint();
        self.add(start);
        Ok(TimedCheckpoint {
            inner: inner?,
            live: self.live.load(Relaxed),
        })
    }

    fn rewind(&mut self, checkpoint: Self::Checkpoint) -> Result<(), Error> {
        self.note_held();
        let start = Instant::now();
        let result = self.inner.rewind(checkpoint.inner);
        self.add(start);
        if result.is_ok() {
            *self.live.get_mut() = checkpoint.live;
        }
        result
    }
}

/// A bar on stderr (a child's stdout is its report to the demo), hidden
/// when stderr is not a terminal (indicatif's rule).
fn progress_bar(name: &str, count: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(count as u64), ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} tokens ({per_sec})")
            .expect("the template is a valid constant")
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(name.to_owned());
    bar
}

#[cfg(test)]
mod tests {
    use tempalloc::{BumpAllocator, CachingAllocator};

    use super::*;

    /// A frame of 1000 B, then kernels of 5000 B and 3000 B in it.
    fn step<A: Rewind>(temp: &mut Timed<A>) {
        let r = temp.frame(|inf| {
            inf.scratch::<u8>(1000)?;
            inf.kernel(|ctx| Ok(ctx.scratch::<u8>(5000)?.len()))?;
            inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch::<u8>(3000)?.len()))
        });
        assert_eq!(r, Ok(3000));
    }

    #[test]
    fn live_bytes_follow_rewinds_and_held_is_read_before_them() {
        let mut caching = Timed::new(CachingAllocator::new());
        step(&mut caching);
        assert_eq!(*caching.peak_live.get_mut(), 6000);
        assert_eq!(*caching.live.get_mut(), 0);
        assert!(caching.peak_held >= 6000, "{}", caching.peak_held);
        // bumpalo recycles nothing at a rewind: the same 6000 B live at
        // most, but it holds every kernel's scratch.
        let mut bump = Timed::new(BumpAllocator::new());
        step(&mut bump);
        assert_eq!(*bump.peak_live.get_mut(), 6000);
        assert!(bump.peak_held >= 9000, "{}", bump.peak_held);
    }
}
