//! Scratch-allocation traces: record what kernels ask for, write and read it
//! as text, generate the reference workloads, replay a trace through any
//! [`TempAllocator`](crate::TempAllocator), and plan from it what a
//! [`CachingAllocator`](crate::CachingAllocator)'s regions must hold
//! ([`Trace::plan`]).
//!
//! The text format has one event a line:
//!
//! ```text
//! a SIZE ALIGN   a kernel asks for SIZE bytes aligned to ALIGN
//! r              the runtime resets (end of a kernel call)
//! i              end of one inference (execute call); also a reset
//! c ID           the runtime takes checkpoint ID (CachingAllocator::checkpoint)
//! w ID           the runtime rewinds to checkpoint ID (CachingAllocator::rewind)
//! t ID           the requests that follow come from thread ID (0: the first)
//! # ...          comment
//! ```
//!
//! Traces without `c`, `w` and `t` lines (every trace written before they
//! existed) read as before: all requests from thread 0, no checkpoints.
//!
//! ```
//! use tempalloc::trace::{Event, Trace};
//! use tempalloc::MallocAllocator;
//!
//! let trace: Trace = "# one kernel\na 4096 64\na 100 8\nr\ni\n".parse()?;
//! assert_eq!(trace.events()[0], Event::Alloc { size: 4096, align: 64 });
//! assert_eq!(trace.peak_live_bytes(), 4196);
//!
//! let report = trace.replay(&mut MallocAllocator::new())?;
//! assert_eq!((report.requests, report.resets, report.inferences), (2, 2, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod compare;
mod numbers;
mod parse;
mod plan;
mod replay;
mod workloads;

use core::fmt;
use std::io::{self, BufWriter, Write};

pub use crate::caching::Plan;
pub use compare::{Comparison, compare, compare_counting};
pub use parse::ParseError;
pub use replay::ReplayStats;
pub use workloads::{Decode, Mixed, Steady, decode, mixed, steady, workload};

/// One line of a trace.
///
/// ```
/// use tempalloc::trace::Event;
///
/// assert_eq!(Event::Alloc { size: 64, align: 8 }.to_string(), "a 64 8");
/// assert_eq!(Event::Reset.to_string(), "r");
/// assert_eq!(Event::EndInference.to_string(), "i");
/// ```
///
/// New kinds of events may be added (as `c`, `w` and `t` were), so a `match`
/// needs a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// A kernel asks for `size` bytes aligned to `align` (`a SIZE ALIGN`).
    Alloc {
        /// Bytes asked for.
        size: usize,
        /// Alignment asked for; a power of two in a well-formed trace.
        align: usize,
    },
    /// The runtime resets the temp allocator: a kernel call ended (`r`).
    Reset,
    /// One inference (execute call) ended; also a reset (`i`).
    EndInference,
    /// The runtime took a checkpoint, numbered `id` (`c ID`).
    Checkpoint {
        /// Names the checkpoint for the [`Event::Rewind`] that uses it.
        id: u64,
    },
    /// The runtime rewound to checkpoint `id` (`w ID`): the scratch asked
    /// for since then is recycled.
    Rewind {
        /// The [`Event::Checkpoint`] rewound to.
        id: u64,
    },
    /// The requests that follow come from thread `id` (`t ID`); a trace
    /// starts on thread 0.
    Thread {
        /// Small numbers in the order the recorder first saw each thread.
        id: u32,
    },
}

impl Event {
    /// Whether replaying this event resets the allocator (`r` and `i` do).
    ///
    /// ```
    /// use tempalloc::trace::Event;
    ///
    /// assert!(Event::Reset.is_reset() && Event::EndInference.is_reset());
    /// assert!(!Event::Alloc { size: 1, align: 1 }.is_reset());
    /// ```
    #[inline]
    pub fn is_reset(&self) -> bool {
        matches!(self, Event::Reset | Event::EndInference)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Alloc { size, align } => write!(f, "a {size} {align}"),
            Event::Reset => f.write_str("r"),
            Event::EndInference => f.write_str("i"),
            Event::Checkpoint { id } => write!(f, "c {id}"),
            Event::Rewind { id } => write!(f, "w {id}"),
            Event::Thread { id } => write!(f, "t {id}"),
        }
    }
}

/// A sequence of scratch requests and resets, as a runtime produced them.
///
/// Build one by parsing text ([`Trace::parse`], [`Trace::from_reader`]), by
/// recording a real run ([`RecordingAllocator`](crate::RecordingAllocator)),
/// with a generator ([`steady`], [`decode`], [`mixed`]) or by hand
/// ([`Trace::push`], `collect`). Its `Display` (and [`Trace::write_to`]) is
/// the text format, which parses back to the same trace (comments are not
/// kept).
///
/// ```
/// use tempalloc::trace::{Event, Trace};
///
/// let trace: Trace = [
///     Event::Alloc { size: 256, align: 64 },
///     Event::Reset,
///     Event::EndInference,
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!(trace.to_string(), "a 256 64\nr\ni\n");
/// assert_eq!(Trace::parse(&trace.to_string())?, trace);
/// # Ok::<(), tempalloc::trace::ParseError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Trace {
    events: Vec<Event>,
}

impl Trace {
    /// An empty trace.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert!(Trace::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The events, in order.
    ///
    /// ```
    /// use tempalloc::trace::{Event, Trace};
    ///
    /// let trace = Trace::parse("r\n")?;
    /// assert_eq!(trace.events(), &[Event::Reset]);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    #[inline]
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The events, by value.
    ///
    /// ```
    /// use tempalloc::trace::{Event, Trace};
    ///
    /// assert_eq!(Trace::parse("i")?.into_events(), vec![Event::EndInference]);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    pub fn into_events(self) -> Vec<Event> {
        self.events
    }

    /// Appends one event.
    ///
    /// ```
    /// use tempalloc::trace::{Event, Trace};
    ///
    /// let mut trace = Trace::new();
    /// trace.push(Event::Alloc { size: 8, align: 8 });
    /// assert_eq!(trace.len(), 1);
    /// ```
    pub fn push(&mut self, event: Event) {
        self.events.push(event);
    }

    /// Number of events (requests and resets).
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert_eq!(Trace::parse("a 1 1\nr\n")?.len(), 2);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    #[inline]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the trace has no events.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert!(Trace::parse("# only a comment\n")?.is_empty());
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Number of scratch requests (`a` lines).
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert_eq!(Trace::parse("a 1 1\na 2 2\nr\n")?.requests(), 2);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    pub fn requests(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::Alloc { .. }))
            .count()
    }

    /// Number of inferences (`i` lines).
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert_eq!(Trace::parse("a 1 1\nr\ni\na 1 1\nr\ni\n")?.inferences(), 2);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    pub fn inferences(&self) -> usize {
        self.events
            .iter()
            .filter(|e| **e == Event::EndInference)
            .count()
    }

    /// The sizes of the requests, in order.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// let sizes: Vec<usize> = Trace::parse("a 10 8\nr\na 20 64\n")?.request_sizes().collect();
    /// assert_eq!(sizes, [10, 20]);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    pub fn request_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.events.iter().filter_map(|e| match e {
            Event::Alloc { size, .. } => Some(*size),
            _ => None,
        })
    }

    /// The most bytes requested between two resets (the bytes a perfect
    /// allocator without padding would need to hold). Saturates at
    /// `usize::MAX`.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// let trace = Trace::parse("a 100 8\na 50 8\nr\na 120 64\nr\n")?;
    /// assert_eq!(trace.peak_live_bytes(), 150);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    pub fn peak_live_bytes(&self) -> usize {
        let (mut live, mut peak) = (0usize, 0usize);
        // Live bytes when each open checkpoint was taken.
        let mut checkpoints = std::collections::HashMap::new();
        for event in &self.events {
            match event {
                Event::Alloc { size, .. } => {
                    live = live.saturating_add(*size);
                    peak = peak.max(live);
                }
                Event::Reset | Event::EndInference => {
                    live = 0;
                    checkpoints.clear();
                }
                Event::Checkpoint { id } => {
                    checkpoints.insert(*id, live);
                }
                Event::Rewind { id } => {
                    if let Some(at) = checkpoints.remove(id) {
                        live = live.min(at);
                    }
                }
                Event::Thread { .. } => {}
            }
        }
        peak
    }

    /// Writes the trace in the text format, one event a line. The writer is
    /// buffered internally.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// let trace = Trace::parse("a 64 16\nr\n")?;
    /// let mut out = Vec::new();
    /// trace.write_to(&mut out)?;
    /// assert_eq!(out, b"a 64 16\nr\n");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Whatever error the writer returns.
    pub fn write_to(&self, writer: impl Write) -> io::Result<()> {
        let mut w = BufWriter::new(writer);
        for event in &self.events {
            writeln!(w, "{event}")?;
        }
        w.flush()
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for event in &self.events {
            writeln!(f, "{event}")?;
        }
        Ok(())
    }
}

impl From<Vec<Event>> for Trace {
    fn from(events: Vec<Event>) -> Self {
        Trace { events }
    }
}

impl FromIterator<Event> for Trace {
    fn from_iter<I: IntoIterator<Item = Event>>(iter: I) -> Self {
        Trace {
            events: iter.into_iter().collect(),
        }
    }
}

impl Extend<Event> for Trace {
    fn extend<I: IntoIterator<Item = Event>>(&mut self, iter: I) {
        self.events.extend(iter);
    }
}
