//! The runtime side: how kernels are called (each step, a prefill chunk or a
//! decode token, in a frame of the temp allocator, and each kernel call in a
//! kernel frame of it, rewound when the kernel returns, as ExecuTorch resets
//! after every instruction: every kernel call goes through [`run_kernel`])
//! and the generation loop that times and counts each step.

use std::alloc::Layout;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::{ThreadPool, ThreadPoolBuildError, ThreadPoolBuilder};
use tempalloc::{Error, Frame, KernelContext, Rewind, Stats, TempAllocator};

use crate::counting;
use crate::model::{Model, State};
use crate::process::{self, cold_pages, cpu_ms, minor_faults, thread_minor_faults};
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
    /// A recording (`--prewarm`) lost a reset: memory ran out.
    Recording(Error),
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Kernel { kernel, error } => write!(f, "kernel `{kernel}` failed: {error}"),
            StepError::Activations(error) => write!(f, "no scratch for the activations: {error}"),
            StepError::Recording(error) => write!(f, "the recording is incomplete: {error}"),
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
    /// System allocations the temp allocator made during the step: its own
    /// `Stats::system_allocations` (for caching, new chunks and commits).
    pub allocator_system_allocations: u64,
}

/// Where the first inference's page faults were, measured when asked
/// (`--prewarm`) and known (Linux).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstInference {
    /// Minor faults the calling thread took inside the temp allocator's
    /// calls (a prefaulting allocator touches what it commits there).
    pub call_faults: u64,
    /// Pages of the scratch the allocator handed out that were not resident
    /// when handed out (`mincore`): each faults when a kernel first writes
    /// it. A page handed out twice before anything touched it counts twice.
    pub cold_pages: u64,
    /// Pages of the KV cache (the model's own buffers, not scratch) that
    /// became resident during the first inference.
    pub kv_pages: u64,
    /// Minor faults in the first step's check against the naive reference.
    pub check_faults: u64,
}

impl FirstInference {
    /// Page faults in the allocator's memory: in its calls, or on scratch it
    /// handed out cold.
    pub fn scratch_faults(&self) -> u64 {
        self.call_faults + self.cold_pages
    }
}

/// What prewarming cost, before the first inference (`--prewarm`'s row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PrewarmCost {
    /// Recording the prefill (a run of its own, untimed in the table).
    pub record_s: f64,
    /// The plan's regions, in bytes, largest first.
    pub regions: Vec<usize>,
    /// How many threads allocated in the recorded run.
    pub threads: usize,
    /// `CachingAllocator::prewarm`: time, the process's minor faults and
    /// the allocator's system allocations.
    pub ms: f64,
    pub faults: Option<u64>,
    pub system_allocations: u64,
}

/// What one allocator's generation measured.
#[derive(Default)]
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
    /// Where the first inference's faults were, when probed.
    pub first: Option<FirstInference>,
    /// What prewarming cost (the `caching+prewarm` row).
    pub prewarm: Option<PrewarmCost>,
}

impl Run {
    pub fn decode(&self) -> &[Step] {
        &self.steps[self.prefill_steps..]
    }
}

/// The sampler's random stream, apart from the weights' (same seed, other stream).
const SAMPLING_STREAM: u64 = 0x5A3D_1E5E_ED00_0001;

/// Prefills `prompt` in chunks, then generates until `count` tokens (the
/// prefill's included) with scratch from `temp`, timing every step. With
/// `probe`, also finds where the prefill's page faults were ([`Run::first`]).
pub fn generate<A: Rewind>(
    name: &'static str,
    temp: A,
    model: &Model,
    prompt: &[u32],
    count: usize,
    probe: bool,
) -> Result<Run, StepError> {
    let mut temp = Timed::new(temp);
    let mut state = State::new(&model.config, prompt.len() + count);
    let kv_before = probe.then(|| state.cold_pages()).flatten();
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
        ..Run::default()
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
        temp.probe.on.store(probe && step < prefill_steps, Relaxed);
        let own_before = temp.stats().system_allocations;
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
            allocator_system_allocations: temp.stats().system_allocations - own_before,
        });
        if probe && step + 1 == prefill_steps {
            run.first = temp
                .probe
                .first(kv_before, state.cold_pages(), state.check_faults);
        }
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
    probe: Probe,
}

/// Where page faults happen in the allocator's memory, counted while `on`
/// (outside the timed spans): the faults inside its calls, and the pages of
/// what it hands out that are not resident yet.
#[derive(Default)]
struct Probe {
    on: AtomicBool,
    call_faults: AtomicU64,
    cold_pages: AtomicU64,
    /// A count the system would not give: the totals mean nothing.
    unknown: AtomicBool,
}

impl Probe {
    /// The calling thread's faults so far, if probing.
    fn start(&self) -> Option<u64> {
        self.on
            .load(Relaxed)
            .then(|| self.known(thread_minor_faults()))
    }

    fn known(&self, count: Option<u64>) -> u64 {
        count.unwrap_or_else(|| {
            self.unknown.store(true, Relaxed);
            0
        })
    }

    /// Ends a call that [`start`](Probe::start)ed with `before`.
    fn end(&self, before: Option<u64>) {
        if let Some(before) = before {
            let now = self.known(thread_minor_faults());
            self.call_faults
                .fetch_add(now.saturating_sub(before), Relaxed);
        }
    }

    /// Counts the pages of `memory`, just handed out, not resident yet.
    fn handed_out(&self, memory: NonNull<[u8]>) {
        if self.on.load(Relaxed) {
            let cold = self.known(cold_pages(memory.cast::<u8>().as_ptr(), memory.len()));
            self.cold_pages.fetch_add(cold, Relaxed);
        }
    }

    /// The totals, with the KV cache's cold pages before and after and the
    /// reference check's faults.
    fn first(
        &self,
        kv_before: Option<u64>,
        kv_after: Option<u64>,
        check: Option<u64>,
    ) -> Option<FirstInference> {
        if self.unknown.load(Relaxed) {
            return None;
        }
        Some(FirstInference {
            call_faults: self.call_faults.load(Relaxed),
            cold_pages: self.cold_pages.load(Relaxed),
            kv_pages: kv_before?.checked_sub(kv_after?)?,
            check_faults: check?,
        })
    }
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
            probe: Probe::default(),
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
// the timing and counting touch no memory the caller sees (the probe asks the
// system which pages are resident, without reading or writing them).
unsafe impl<A: TempAllocator> TempAllocator for Timed<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let faults = self.probe.start();
        let start = Instant::now();
        let result = self.inner.allocate(layout);
        self.add(start);
        self.probe.end(faults);
        if let Ok(memory) = result {
            self.probe.handed_out(memory);
            let live = self.live.fetch_add(layout.size(), Relaxed) + layout.size();
            self.peak_live.fetch_max(live, Relaxed);
        }
        result
    }

    fn reset(&mut self) {
        self.note_held();
        let faults = self.probe.start();
        let start = Instant::now();
        self.inner.reset();
        self.add(start);
        self.probe.end(faults);
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
        let faults = self.probe.start();
        let start = Instant::now();
        let inner = self.inner.checkpoint();
        self.add(start);
        self.probe.end(faults);
        Ok(TimedCheckpoint {
            inner: inner?,
            live: self.live.load(Relaxed),
        })
    }

    fn rewind(&mut self, checkpoint: Self::Checkpoint) -> Result<(), Error> {
        self.note_held();
        let faults = self.probe.start();
        let start = Instant::now();
        let result = self.inner.rewind(checkpoint.inner);
        self.add(start);
        self.probe.end(faults);
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
