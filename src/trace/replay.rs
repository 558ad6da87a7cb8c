//! Replaying a [`Trace`] through a [`TempAllocator`].

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;

use std::collections::HashMap;

use super::{Event, Trace};
use crate::{CachingAllocator, Checkpoint, Error, Stats, TempAllocator};

/// What one [`Trace::replay`] did and what the allocator held.
///
/// ```
/// use tempalloc::trace::Trace;
/// use tempalloc::MallocAllocator;
///
/// let trace = Trace::parse("a 1000 64\na 24 8\nr\na 10 8\ni\n")?;
/// let report = trace.replay(&mut MallocAllocator::new())?;
/// assert_eq!((report.requests, report.bytes_requested), (3, 1034));
/// assert_eq!((report.peak_live_bytes, report.peak_bytes_held), (1024, 1024));
/// assert_eq!(report.held_over_peak(), 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct ReplayStats {
    /// Scratch requests made (`a` events).
    pub requests: u64,
    /// Bytes those requests asked for.
    pub bytes_requested: u64,
    /// Resets made (`r` and `i` events).
    pub resets: u64,
    /// Inferences ended (`i` events).
    pub inferences: u64,
    /// The most bytes requested between two resets
    /// ([`Trace::peak_live_bytes`]).
    pub peak_live_bytes: usize,
    /// The most [`Stats::bytes_held`](crate::Stats::bytes_held) seen: sampled
    /// just before every reset and at the end, which is when an allocator
    /// holds the most.
    pub peak_bytes_held: usize,
    /// [`Stats::bytes_held`](crate::Stats::bytes_held) after the last event.
    pub bytes_held_end: usize,
    /// System allocations the allocator counted during the replay
    /// (its [`Stats::system_allocations`](crate::Stats::system_allocations)
    /// after minus before).
    pub system_allocations: u64,
}

impl ReplayStats {
    /// `peak_bytes_held / peak_live_bytes`: how much more memory the
    /// allocator held than a perfect one would have (1.0 is perfect; 0 when
    /// the trace asked for nothing).
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    /// use tempalloc::BumpAllocator;
    ///
    /// let trace = Trace::parse("a 4096 64\nr\n")?;
    /// let report = trace.replay(&mut BumpAllocator::new())?;
    /// assert!(report.held_over_peak() >= 1.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn held_over_peak(&self) -> f64 {
        if self.peak_live_bytes == 0 {
            0.0
        } else {
            self.peak_bytes_held as f64 / self.peak_live_bytes as f64
        }
    }
}

impl ReplayStats {
    /// Fills in what the allocator's counters say at the end of a replay.
    fn finish(&mut self, before: &Stats, after: &Stats) {
        self.bytes_held_end = after.bytes_held;
        self.peak_bytes_held = self.peak_bytes_held.max(after.bytes_held);
        self.system_allocations = after
            .system_allocations
            .saturating_sub(before.system_allocations);
    }
}

impl fmt::Display for ReplayStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests ({} B), {} resets, {} inferences, peak live {} B, peak held {} B ({:.2}x), \
             {} B held at the end, {} system allocations",
            self.requests,
            self.bytes_requested,
            self.resets,
            self.inferences,
            self.peak_live_bytes,
            self.peak_bytes_held,
            self.held_over_peak(),
            self.bytes_held_end,
            self.system_allocations,
        )
    }
}

/// Writes the first and last byte of a fresh buffer, as a kernel would.
#[inline(always)]
fn touch(buf: NonNull<[u8]>, size: usize) {
    if size == 0 {
        return;
    }
    let first = buf.cast::<u8>();
    // SAFETY: the `TempAllocator` contract makes `buf` at least `size` bytes,
    // writable, disjoint from every other live buffer and valid until the
    // next reset, which can only come after this call (it needs `&mut`).
    unsafe {
        first.as_ptr().write_volatile(1);
        first.as_ptr().add(size - 1).write_volatile(1);
    }
}

impl Trace {
    /// Replays the trace through `temp`: every `a` is a request whose first
    /// and last byte are then written, every `r` and `i` a
    /// [`reset`](TempAllocator::reset). Reports what was asked and what the
    /// allocator held (one [`stats`](TempAllocator::stats) call per reset;
    /// time [`Trace::run`] instead).
    ///
    /// Buffers asked for after the last reset stay allocated in `temp`.
    ///
    /// ```
    /// use tempalloc::trace::Steady;
    /// use tempalloc::BumpAllocator;
    ///
    /// let trace = Steady { layers: 4, inferences: 2 }.generate();
    /// let report = trace.replay(&mut BumpAllocator::new())?;
    /// assert_eq!(report.requests, 40);
    /// assert_eq!(report.peak_live_bytes, 262144 + 1024 + 512);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The first error `temp` returns (the replay stops there), or
    /// [`Error::InvalidAlignment`] / [`Error::SizeOverflow`] for an event
    /// that is not a valid `Layout` (possible in a trace built by hand).
    pub fn replay(&self, temp: &mut dyn TempAllocator) -> Result<ReplayStats, Error> {
        let before = temp.stats();
        let mut report = ReplayStats {
            peak_live_bytes: self.peak_live_bytes(),
            ..ReplayStats::default()
        };
        self.drive(temp, |temp, event| match event {
            Event::Alloc { size, .. } => {
                report.requests += 1;
                report.bytes_requested += size as u64;
            }
            Event::Reset | Event::EndInference => {
                report.peak_bytes_held = report.peak_bytes_held.max(temp.stats().bytes_held);
                report.resets += 1;
                report.inferences += u64::from(event == Event::EndInference);
            }
            Event::Checkpoint { .. } | Event::Rewind { .. } | Event::Thread { .. } => {}
        })?;
        report.finish(&before, &temp.stats());
        Ok(report)
    }

    /// Replays the trace like [`Trace::replay`] (same requests, touches and
    /// resets) but measures nothing: the loop to put under a timer.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    /// use tempalloc::{MallocAllocator, TempAllocator};
    ///
    /// let mut temp = MallocAllocator::new();
    /// Trace::parse("a 64 64\nr\n")?.run(&mut temp)?;
    /// assert_eq!((temp.stats().allocations, temp.stats().resets), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Trace::replay`].
    pub fn run(&self, temp: &mut dyn TempAllocator) -> Result<(), Error> {
        self.drive(temp, |_, _| {})
    }

    /// The replay loop both of the above share: `observe` sees each event
    /// after its request (and before its reset).
    #[inline(always)]
    fn drive(
        &self,
        temp: &mut dyn TempAllocator,
        mut observe: impl FnMut(&dyn TempAllocator, Event),
    ) -> Result<(), Error> {
        for &event in &self.events {
            match event {
                Event::Alloc { size, align } => {
                    let layout = Layout::from_size_align(size, align)
                        .map_err(|_| Error::layout(size, align))?;
                    touch(temp.allocate(layout)?, size);
                    observe(temp, event);
                }
                Event::Reset | Event::EndInference => {
                    observe(temp, event);
                    temp.reset();
                }
                // A `TempAllocator` has no checkpoints and runs on this
                // thread: see `replay_caching` for both.
                Event::Checkpoint { .. } | Event::Rewind { .. } | Event::Thread { .. } => {
                    observe(temp, event)
                }
            }
        }
        Ok(())
    }

    /// Replays the trace through a [`CachingAllocator`] as the recorded
    /// runtime ran it: `c`/`w` events take and rewind real checkpoints, and
    /// the requests of each thread id between two resets or rewinds run on a
    /// thread of their own (thread 0 on the calling one; the threads are
    /// started for each such stretch and run concurrently), so a trace of a
    /// runtime that checkpoints per kernel and runs worker threads replays
    /// faithfully. Reports as [`Trace::replay`], with the held bytes also
    /// sampled before each rewind.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    /// use tempalloc::{CachingAllocator, TempAllocator};
    ///
    /// // A kernel with a worker thread, checkpointed and rewound, twice.
    /// let one = "c 0\na 4096 64\nt 1\na 8192 64\nt 0\nw 0\n";
    /// let trace = Trace::parse(&format!("{one}{one}i\n"))?;
    /// let mut temp = CachingAllocator::new();
    /// let report = trace.replay_caching(&mut temp)?;
    /// assert_eq!((report.requests, report.inferences), (4, 1));
    /// assert_eq!(report.peak_live_bytes, 4096 + 8192);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Trace::replay`], plus [`Error::StaleCheckpoint`] (or another
    /// error of [`CachingAllocator::rewind`]) for a rewind the allocator
    /// refuses. A rewind to a checkpoint the trace never took is ignored.
    pub fn replay_caching(&self, temp: &mut CachingAllocator) -> Result<ReplayStats, Error> {
        let before = temp.stats();
        let mut report = ReplayStats {
            peak_live_bytes: self.peak_live_bytes(),
            ..ReplayStats::default()
        };
        let mut checkpoints: HashMap<u64, Checkpoint> = HashMap::new();
        // Requests since the last reset or rewind, by thread id.
        let mut pending: Vec<(u32, Layout)> = Vec::new();
        let mut thread = 0u32;
        for &event in &self.events {
            match event {
                Event::Alloc { size, align } => {
                    let layout = Layout::from_size_align(size, align)
                        .map_err(|_| Error::layout(size, align))?;
                    report.requests += 1;
                    report.bytes_requested += size as u64;
                    pending.push((thread, layout));
                }
                Event::Thread { id } => thread = id,
                Event::Checkpoint { id } => {
                    run_threads(temp, &mut pending)?;
                    checkpoints.insert(id, temp.checkpoint()?);
                }
                Event::Rewind { id } => {
                    run_threads(temp, &mut pending)?;
                    report.peak_bytes_held = report.peak_bytes_held.max(temp.stats().bytes_held);
                    if let Some(checkpoint) = checkpoints.remove(&id) {
                        temp.rewind(checkpoint)?;
                    }
                }
                Event::Reset | Event::EndInference => {
                    run_threads(temp, &mut pending)?;
                    report.peak_bytes_held = report.peak_bytes_held.max(temp.stats().bytes_held);
                    report.resets += 1;
                    report.inferences += u64::from(event == Event::EndInference);
                    checkpoints.clear();
                    temp.reset();
                }
            }
        }
        run_threads(temp, &mut pending)?;
        report.finish(&before, &temp.stats());
        Ok(report)
    }
}

/// Serves `pending` (and empties it): thread 0's requests on this thread,
/// every other thread id's on a scoped thread of its own, all at once. A
/// thread the system will not start (a trace with more thread ids than it
/// allows) has its requests served on this thread after thread 0's, not a
/// panic.
fn run_threads(temp: &CachingAllocator, pending: &mut Vec<(u32, Layout)>) -> Result<(), Error> {
    let serve = |thread: u32| -> Result<(), Error> {
        for &(_, layout) in pending.iter().filter(|(t, _)| *t == thread) {
            touch(temp.allocate(layout)?, layout.size());
        }
        Ok(())
    };
    let mut others: Vec<u32> = pending
        .iter()
        .map(|&(t, _)| t)
        .filter(|&t| t != 0)
        .collect();
    others.sort_unstable();
    others.dedup();
    let result = std::thread::scope(|scope| {
        let mut here = Vec::new();
        let workers: Vec<_> = others
            .iter()
            .filter_map(|&t| {
                let spawned = std::thread::Builder::new().spawn_scoped(scope, move || serve(t));
                spawned.map_err(|_| here.push(t)).ok()
            })
            .collect();
        let mut result = serve(0);
        for t in here {
            result = result.and_then(|()| serve(t));
        }
        for worker in workers {
            // `serve` reports errors instead of panicking; should a worker
            // panic all the same, the panic goes on in this thread.
            let outcome = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            result = result.and(outcome);
        }
        result
    });
    pending.clear();
    result
}
