//! [`compare`]: one trace through several allocators, one row each.

use std::time::Instant;

use super::Trace;
use super::numbers::median;
use crate::{Error, TempAllocator};

/// One allocator's numbers on one trace, as [`compare`] measured them.
///
/// ```
/// use tempalloc::trace::{self, Trace};
/// use tempalloc::{MallocAllocator, TempAllocator};
///
/// let trace = Trace::parse("a 4096 64\nr\ni\n")?;
/// let mut malloc = MallocAllocator::new();
/// let rows = trace::compare(&trace, [("malloc", &mut malloc as &mut dyn TempAllocator)], 3)?;
/// assert_eq!(rows[0].allocator, "malloc");
/// assert_eq!(rows[0].system_allocations_per_request, 1.0);
/// assert_eq!(rows[0].vs_reference, 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Comparison {
    /// The name the allocator was given.
    pub allocator: String,
    /// Median over the timed passes of (pass time / requests), in nanoseconds.
    pub ns_per_request: f64,
    /// System allocations in the timed passes, per request: the allocator's
    /// own [`Stats::system_allocations`](crate::Stats::system_allocations)
    /// with [`compare`], the caller's counter with [`compare_counting`].
    pub system_allocations_per_request: f64,
    /// Peak bytes held over peak bytes live between two resets
    /// ([`ReplayStats::held_over_peak`](super::ReplayStats::held_over_peak)),
    /// measured in one more pass after the timed ones.
    pub held_over_peak: f64,
    /// `ns_per_request` over the reference row's: the row named `caching`
    /// when there is one, else the first row.
    pub vs_reference: f64,
}

/// Replays `trace` through each allocator: one warm-up pass, `passes` timed
/// passes ([`Trace::run`]), then one measured pass ([`Trace::replay`]).
/// Returns one row per allocator, in order.
///
/// ```
/// use tempalloc::trace::{self, Steady};
/// use tempalloc::{BumpAllocator, CachingAllocator, TempAllocator};
///
/// let trace = Steady { layers: 4, inferences: 3 }.generate();
/// let (mut bump, mut caching) = (BumpAllocator::new(), CachingAllocator::new());
/// let allocators: [(&str, &mut dyn TempAllocator); 2] =
///     [("bumpalo", &mut bump), ("caching", &mut caching)];
/// let rows = trace::compare(&trace, allocators, 5)?;
/// assert_eq!(rows.len(), 2);
/// assert_eq!(rows[1].vs_reference, 1.0); // `caching` is the reference
/// assert_eq!(rows[1].system_allocations_per_request, 0.0); // warm after one pass
/// # Ok::<(), tempalloc::Error>(())
/// ```
///
/// # Errors
///
/// The first error an allocator returns, as [`Trace::replay`].
pub fn compare<'a>(
    trace: &Trace,
    allocators: impl IntoIterator<Item = (&'a str, &'a mut dyn TempAllocator)>,
    passes: usize,
) -> Result<Vec<Comparison>, Error> {
    compare_counting(trace, allocators, passes, None)
}

/// [`compare`], with system allocations counted by `counter` (a process-wide
/// count, such as a counting `#[global_allocator]` keeps) instead of each
/// allocator's own [`Stats`](crate::Stats): an allocator that allocates
/// behind its own counters (a hash-map node per request, say) is seen too.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tempalloc::trace::{self, Trace};
/// use tempalloc::{MallocAllocator, TempAllocator};
///
/// static CALLS: AtomicU64 = AtomicU64::new(0);
/// let count = || CALLS.load(Ordering::Relaxed);
/// let trace = Trace::parse("a 64 64\nr\n")?;
/// let mut malloc = MallocAllocator::new();
/// let rows = trace::compare_counting(
///     &trace,
///     [("malloc", &mut malloc as &mut dyn TempAllocator)],
///     2,
///     Some(&count),
/// )?;
/// assert_eq!(rows[0].system_allocations_per_request, 0.0); // nothing counted CALLS
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`compare`].
pub fn compare_counting<'a>(
    trace: &Trace,
    allocators: impl IntoIterator<Item = (&'a str, &'a mut dyn TempAllocator)>,
    passes: usize,
    counter: Option<&dyn Fn() -> u64>,
) -> Result<Vec<Comparison>, Error> {
    let passes = passes.max(1);
    let requests = trace.requests().max(1) as f64;
    let mut rows = Vec::new();
    let mut samples = Vec::with_capacity(passes);
    for (name, temp) in allocators {
        trace.run(temp)?;
        samples.clear();
        let count = |temp: &dyn TempAllocator| match counter {
            Some(counter) => counter(),
            None => temp.stats().system_allocations,
        };
        let before = count(temp);
        for _ in 0..passes {
            let start = Instant::now();
            trace.run(temp)?;
            samples.push(start.elapsed().as_nanos() as f64 / requests);
        }
        let system = count(temp).saturating_sub(before);
        let report = trace.replay(temp)?;
        rows.push(Comparison {
            allocator: name.to_owned(),
            ns_per_request: median(&mut samples),
            system_allocations_per_request: system as f64 / (requests * passes as f64),
            held_over_peak: report.held_over_peak(),
            vs_reference: 1.0,
        });
    }
    let reference = rows
        .iter()
        .position(|r| r.allocator == "caching")
        .unwrap_or(0);
    if let Some(ns) = rows.get(reference).map(|r| r.ns_per_request) {
        for row in &mut rows {
            row.vs_reference = if ns > 0.0 {
                row.ns_per_request / ns
            } else {
                1.0
            };
        }
    }
    Ok(rows)
}
