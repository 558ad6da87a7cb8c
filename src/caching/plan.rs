//! [`Plan`]: what a caching allocator's regions must hold to serve a
//! recorded run without growing, which
//! [`prewarm`](super::CachingAllocator::prewarm) commits ahead.
//! [`Trace::plan`](crate::trace::Trace::plan) works one out from a trace;
//! `tempalloc::trace::Plan` is its public path.

use core::fmt;

/// What a recorded run needs of a [`CachingAllocator`](crate::CachingAllocator):
/// each thread's peak bytes in one window, and what its regions must hold,
/// laid out as a bump allocator lays out requests (each one at the next
/// offset aligned to its alignment, from the start of the window's region).
/// Made by [`Trace::plan`](crate::trace::Trace::plan); `tempalloc-replay
/// --plan TRACE` prints one.
///
/// A window is the stretch between two resets (`r` or `i`); a rewind (`w`)
/// moves every thread back to where it was at its checkpoint (`c`), as
/// [`CachingAllocator::rewind`](crate::CachingAllocator::rewind) does; the
/// requests that follow a `t ID` line are thread `ID`'s.
///
/// Two views of the same run:
///
/// - [`threads`](Plan::threads): each recorded thread's peak in any one
///   window. That is what its region holds when a thread keeps its region
///   (a persistent pool whose threads do the same share every time).
/// - [`regions`](Plan::regions): what the regions must hold whichever
///   thread takes which, largest first: entry `k` is the most that the
///   `k`-th busiest thread of any window needed. There are as many as the
///   most threads that allocated in one window, so fresh threads per kernel
///   (which a recorder numbers anew each time) need no more regions than run
///   at once. Prewarming commits one region of each size.
///
/// Offsets are counted from a region start aligned to every alignment the
/// trace asks for. Regions start page-aligned, so a request aligned past
/// the page size may need up to `align` − page size bytes more; debug
/// checks' canaries are not counted.
///
/// ```
/// use tempalloc::trace::Trace;
///
/// // Thread 0 takes 100 B then 8 B aligned to 64 (at offset 128: 136 B);
/// // thread 1 takes 4096 B in the same window; then thread 0 alone, 1000 B.
/// let trace = Trace::parse("a 100 8\na 8 64\nt 1\na 4096 64\nr\nt 0\na 1000 8\nr\n")?;
/// let plan = trace.plan()?;
/// assert_eq!(plan.threads(), &[(0, 1000), (1, 4096)]);
/// // At most two threads at once: the busier one needed 4096, the other 136.
/// assert_eq!(plan.regions(), &[4096, 136]);
/// assert_eq!((plan.total_bytes(), plan.windows()), (4232, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Plan {
    /// (thread id, peak bytes in one window), by thread id.
    threads: Vec<(u32, usize)>,
    /// Bytes per region, largest first.
    regions: Vec<usize>,
    windows: u64,
}

impl Plan {
    /// A plan [`Trace::plan`](crate::trace::Trace::plan) worked out: each
    /// thread's peak, the regions' sizes largest first, the windows.
    pub(crate) fn from_parts(
        threads: Vec<(u32, usize)>,
        regions: Vec<usize>,
        windows: u64,
    ) -> Plan {
        Plan {
            threads,
            regions,
            windows,
        }
    }

    /// A plan written by hand: the bytes each region must hold (in any
    /// order), one region per thread that allocates at once, numbered as
    /// the threads.
    ///
    /// ```
    /// use tempalloc::trace::Plan;
    ///
    /// let plan = Plan::from_regions([64 << 10, 1 << 20]);
    /// assert_eq!(plan.regions(), &[1 << 20, 64 << 10]);
    /// assert_eq!(plan.threads(), &[(0, 1 << 20), (1, 64 << 10)]);
    /// assert_eq!(plan.total_bytes(), (1 << 20) + (64 << 10));
    /// ```
    pub fn from_regions(regions: impl IntoIterator<Item = usize>) -> Plan {
        let mut regions: Vec<usize> = regions.into_iter().collect();
        regions.sort_unstable_by(|a, b| b.cmp(a));
        Plan {
            threads: (0u32..).zip(regions.iter().copied()).collect(),
            regions,
            windows: 0,
        }
    }

    /// Each recorded thread's peak bytes in one window, padding included,
    /// as (thread id, bytes) by thread id; only threads that allocated.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// let plan = Trace::parse("t 3\na 10 8\nr\n")?.plan()?;
    /// assert_eq!(plan.threads(), &[(3, 10)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn threads(&self) -> &[(u32, usize)] {
        &self.threads
    }

    /// The bytes each region must hold, largest first (see the type's docs):
    /// what a prewarm commits.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// // Two threads in each window, a new pair each time: two regions.
    /// let plan = Trace::parse("a 10 8\nt 1\na 30 8\nr\nt 2\na 20 8\nt 3\na 5 8\nr\n")?.plan()?;
    /// assert_eq!(plan.regions(), &[30, 10]);
    /// assert_eq!(plan.threads().len(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn regions(&self) -> &[usize] {
        &self.regions
    }

    /// The sum of [`regions`](Plan::regions): the bytes a prewarm commits.
    /// Saturates at `usize::MAX`.
    ///
    /// ```
    /// use tempalloc::trace::Plan;
    ///
    /// assert_eq!(Plan::from_regions([10, 20]).total_bytes(), 30);
    /// ```
    pub fn total_bytes(&self) -> usize {
        self.regions.iter().fold(0, |t, &r| t.saturating_add(r))
    }

    /// How many windows the trace had: its resets, plus a last window of
    /// requests without one.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert_eq!(Trace::parse("a 1 1\nr\na 1 1\n")?.plan()?.windows(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn windows(&self) -> u64 {
        self.windows
    }
}

/// One line per region, then one per thread, after a summary comment.
///
/// ```
/// use tempalloc::trace::Plan;
///
/// let text = Plan::from_regions([4096]).to_string();
/// assert_eq!(text, "# 0 windows, 1 threads, 1 regions, 4096 bytes in all\nregion 0 4096\nthread 0 4096\n");
/// ```
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "# {} windows, {} threads, {} regions, {} bytes in all",
            self.windows,
            self.threads.len(),
            self.regions.len(),
            self.total_bytes()
        )?;
        for (k, bytes) in self.regions.iter().enumerate() {
            writeln!(f, "region {k} {bytes}")?;
        }
        for (id, bytes) in &self.threads {
            writeln!(f, "thread {id} {bytes}")?;
        }
        Ok(())
    }
}
