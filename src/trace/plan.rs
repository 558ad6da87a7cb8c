//! [`Trace::plan`]: what the regions of a
//! [`CachingAllocator`](crate::CachingAllocator) must hold to serve a
//! recorded run without growing, as a [`Plan`] (a type of the caching
//! allocator's, which [`prewarm`](crate::CachingAllocator::prewarm)
//! takes).

use core::alloc::Layout;
use std::collections::{BTreeMap, HashMap};

use super::{Event, Plan, Trace};
use crate::Error;

/// One thread's bump cursor in the current window.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    offset: usize,
    peak: usize,
}

/// The walk over the events that [`Trace::plan`] makes.
#[derive(Debug, Default)]
struct Planner {
    thread: u32,
    /// The current window's threads.
    cursors: BTreeMap<u32, Cursor>,
    /// Every thread's offset when each open checkpoint was taken.
    checkpoints: HashMap<u64, BTreeMap<u32, usize>>,
    threads: BTreeMap<u32, usize>,
    regions: Vec<usize>,
    windows: u64,
}

impl Planner {
    fn alloc(&mut self, size: usize, align: usize) -> Result<(), Error> {
        let layout =
            Layout::from_size_align(size, align).map_err(|_| Error::layout(size, align))?;
        let cursor = self.cursors.entry(self.thread).or_default();
        // A window's offsets stay below isize::MAX, as one region's would.
        let end = cursor
            .offset
            .checked_next_multiple_of(layout.align())
            .and_then(|start| start.checked_add(size))
            .filter(|&end| end <= isize::MAX as usize)
            .ok_or(Error::SizeOverflow { size, align })?;
        cursor.offset = end;
        cursor.peak = cursor.peak.max(end);
        Ok(())
    }

    fn rewind(&mut self, id: u64) {
        // A rewind to a checkpoint the trace never took is ignored, as
        // `Trace::replay_caching` ignores it.
        if let Some(marks) = self.checkpoints.remove(&id) {
            for (thread, cursor) in &mut self.cursors {
                cursor.offset = cursor.offset.min(marks.get(thread).copied().unwrap_or(0));
            }
        }
    }

    /// Ends a window: its peaks go into the threads' and the regions'.
    fn end_window(&mut self) {
        self.windows += 1;
        let mut peaks: Vec<usize> = Vec::with_capacity(self.cursors.len());
        for (&thread, cursor) in &self.cursors {
            let peak = self.threads.entry(thread).or_default();
            *peak = (*peak).max(cursor.peak);
            peaks.push(cursor.peak);
        }
        peaks.sort_unstable_by(|a, b| b.cmp(a));
        for (k, peak) in peaks.into_iter().enumerate() {
            match self.regions.get_mut(k) {
                Some(region) => *region = (*region).max(peak),
                None => self.regions.push(peak),
            }
        }
        self.cursors.clear();
        self.checkpoints.clear();
    }
}

impl Trace {
    /// What each thread and each region of a
    /// [`CachingAllocator`](crate::CachingAllocator) must hold to serve this
    /// trace without growing: see [`Plan`].
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// // A kernel frame: 4096 B rewound, then 1024 B; the window peaks at 4096 + 64.
    /// let trace = Trace::parse("a 64 64\nc 0\na 4096 64\nw 0\na 1024 64\ni\n")?;
    /// assert_eq!(trace.plan()?.regions(), &[64 + 4096]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAlignment`] or [`Error::SizeOverflow`] for a request
    /// that is not a valid `Layout` (possible in a trace built by hand), and
    /// [`Error::SizeOverflow`] when one window of one thread passes
    /// `isize::MAX` bytes.
    pub fn plan(&self) -> Result<Plan, Error> {
        let mut p = Planner::default();
        let mut open = false;
        for &event in self.events() {
            match event {
                Event::Alloc { size, align } => {
                    p.alloc(size, align)?;
                    open = true;
                }
                Event::Reset | Event::EndInference => {
                    p.end_window();
                    open = false;
                }
                Event::Checkpoint { id } => {
                    let marks = p.cursors.iter().map(|(&t, c)| (t, c.offset)).collect();
                    p.checkpoints.insert(id, marks);
                }
                Event::Rewind { id } => p.rewind(id),
                Event::Thread { id } => p.thread = id,
            }
        }
        if open {
            p.end_window();
        }
        Ok(Plan::from_parts(
            p.threads.into_iter().collect(),
            p.regions,
            p.windows,
        ))
    }
}
