//! [`RecordingAllocator`]: any [`TempAllocator`], with a log of every call.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use crate::trace::{Event, Trace};
use crate::{Error, Rewind, Stats, TempAllocator};

/// Wraps a [`TempAllocator`], passes every call through and records it as a
/// [`Trace`]: each request as `a SIZE ALIGN` (preceded by `t ID` when it
/// comes from another thread than the request before it; the thread that
/// made the recorder is 0), each reset as `r`, each
/// [`mark_inference`](RecordingAllocator::mark_inference) as `i`, and, over a
/// [`Rewind`] allocator, each checkpoint and rewind (frames and kernels
/// included) as `c ID` and `w ID`.
///
/// Record a real run of a runtime once, then replay the trace through other
/// allocators ([`Trace::replay`]) or save it ([`Trace::write_to`]). Requests
/// are recorded as asked, including those the inner allocator refused. The
/// log sits behind a mutex, so the wrapper is `Sync` when the inner
/// allocator is; the order of concurrent requests is the order they took the
/// log's lock.
///
/// ```
/// use tempalloc::{with_context, MallocAllocator, RecordingAllocator, TempAllocator};
///
/// let mut temp = RecordingAllocator::new(MallocAllocator::new());
/// with_context(&mut temp, |ctx| ctx.scratch::<f32>(256).map(|_| ()))?;
/// temp.mark_inference();
/// assert_eq!(temp.trace().to_string(), "a 1024 4\nr\ni\n");
///
/// // Replaying the recording asks another allocator for the same thing.
/// let (_malloc, trace) = temp.into_parts();
/// let mut other = tempalloc::BumpAllocator::new();
/// trace.replay(&mut other)?;
/// assert_eq!((other.stats().allocations, other.stats().bytes_requested), (1, 1024));
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct RecordingAllocator<A> {
    inner: A,
    events: Mutex<Log>,
}

/// The recorded events, and which thread asked last.
#[derive(Debug, Default)]
struct Log {
    events: Vec<Event>,
    /// Every thread that asked, in the order first seen: index = `t` id.
    threads: Vec<ThreadId>,
    /// The thread of the last recorded request (a trace starts on 0).
    current: u32,
    /// The next checkpoint's id.
    checkpoints: u64,
}

impl Log {
    /// Room for one more event, or [`Error::OutOfMemory`]: the log must not
    /// abort a runtime that is being recorded.
    fn reserve_one(&mut self) -> Result<(), Error> {
        self.events
            .try_reserve(1)
            .map_err(|_| Error::out_of_memory(Layout::new::<Event>()))
    }

    /// The `t` id of the calling thread, numbering it if new.
    fn thread_id(&mut self) -> u32 {
        let me = thread::current().id();
        let index = match self.threads.iter().position(|&t| t == me) {
            Some(index) => index,
            None => {
                self.threads.push(me);
                self.threads.len() - 1
            }
        };
        u32::try_from(index).unwrap_or(u32::MAX)
    }
}

impl<A: TempAllocator> RecordingAllocator<A> {
    /// Records every call made through it to `inner`.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, RecordingAllocator};
    ///
    /// let temp = RecordingAllocator::new(BumpAllocator::new());
    /// assert!(temp.trace().is_empty());
    /// ```
    pub fn new(inner: A) -> Self {
        RecordingAllocator {
            inner,
            events: Mutex::new(Log {
                // The thread that makes the recorder is thread 0.
                threads: vec![thread::current().id()],
                ..Log::default()
            }),
        }
    }

    /// The wrapped allocator.
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let temp = RecordingAllocator::new(MallocAllocator::new());
    /// assert_eq!(temp.inner().stats().allocations, 0);
    /// ```
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// Ends one inference: resets the inner allocator and records `i` (which
    /// a replay also treats as a reset).
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(MallocAllocator::new());
    /// temp.mark_inference();
    /// assert_eq!((temp.trace().inferences(), temp.stats().resets), (1, 1));
    /// ```
    pub fn mark_inference(&mut self) {
        self.inner.reset();
        self.events_mut().events.push(Event::EndInference);
    }

    /// A copy of what was recorded so far.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(BumpAllocator::new());
    /// temp.reset();
    /// assert_eq!(temp.trace().to_string(), "r\n");
    /// ```
    pub fn trace(&self) -> Trace {
        Trace::from(self.events().events.clone())
    }

    /// Takes what was recorded so far and starts an empty log.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(BumpAllocator::new());
    /// temp.reset();
    /// assert_eq!(temp.take_trace().len(), 1);
    /// assert!(temp.trace().is_empty());
    /// ```
    pub fn take_trace(&mut self) -> Trace {
        Trace::from(core::mem::take(&mut self.events_mut().events))
    }

    /// The inner allocator and the recorded trace.
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(MallocAllocator::new());
    /// temp.reset();
    /// let (inner, trace) = temp.into_parts();
    /// assert_eq!((inner.stats().resets, trace.len()), (1, 1));
    /// ```
    pub fn into_parts(self) -> (A, Trace) {
        let log = self
            .events
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (self.inner, Trace::from(log.events))
    }

    fn events(&self) -> MutexGuard<'_, Log> {
        // Pushing an event cannot leave the log half-updated, so a poisoned
        // lock (a panic elsewhere while it was held) is still usable.
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn events_mut(&mut self) -> &mut Log {
        self.events
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A [`Rewind`] allocator recorded: each checkpoint as `c ID` and each rewind
/// as `w ID`, so that [`Trace::replay_caching`] takes and rewinds the same
/// checkpoints, and frames run over the recorder as over the allocator.
///
/// ```
/// use tempalloc::{CachingAllocator, Error, KernelContext, RecordingAllocator, Rewind};
///
/// let mut temp = RecordingAllocator::new(CachingAllocator::new());
/// let cp = temp.checkpoint()?;
/// KernelContext::new(&temp).scratch::<u8>(64)?;
/// temp.rewind(cp)?;
/// assert_eq!(temp.trace().to_string(), "c 0\na 64 1\nw 0\n");
///
/// // A frame is a checkpoint per kernel and a reset at its end.
/// temp.take_trace();
/// temp.frame(|inf| inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch::<u8>(8)?.len())))?;
/// assert_eq!(temp.trace().to_string(), "c 1\na 8 1\nw 1\nr\n");
/// # Ok::<(), Error>(())
/// ```
// SAFETY: checkpoints and rewinds go to `inner` unchanged (a refused one
// included), which upholds `Rewind`'s contract; the memory it hands out is
// not inside `inner`, so not inside this wrapper either.
unsafe impl<A: Rewind> Rewind for RecordingAllocator<A> {
    type Checkpoint = RecordedCheckpoint<A::Checkpoint>;

    /// The inner allocator's checkpoint, recorded as `c ID` once taken.
    ///
    /// # Errors
    ///
    /// As the inner allocator's, and [`Error::OutOfMemory`] when the log
    /// cannot grow; nothing is recorded then.
    fn checkpoint(&self) -> Result<Self::Checkpoint, Error> {
        let mut log = self.events();
        log.reserve_one()?;
        let inner = self.inner.checkpoint()?;
        let id = log.checkpoints;
        log.checkpoints += 1;
        log.events.push(Event::Checkpoint { id });
        Ok(RecordedCheckpoint { id, inner })
    }

    /// The inner allocator's rewind, recorded as `w ID` whether or not the
    /// allocator accepts it (the runtime asked for it).
    ///
    /// # Errors
    ///
    /// As the inner allocator's (a stale checkpoint, say), and
    /// [`Error::OutOfMemory`] when the log cannot grow; nothing is recorded
    /// or rewound then.
    fn rewind(&mut self, checkpoint: Self::Checkpoint) -> Result<(), Error> {
        let log = self.events_mut();
        log.reserve_one()?;
        log.events.push(Event::Rewind { id: checkpoint.id });
        self.inner.rewind(checkpoint.inner)
    }
}

/// A checkpoint of a [`RecordingAllocator`]: the inner allocator's, with the
/// id its `c` event got.
///
/// ```
/// use tempalloc::{CachingAllocator, RecordingAllocator, Rewind};
///
/// let mut temp = RecordingAllocator::new(CachingAllocator::new());
/// let cp = temp.checkpoint()?;
/// assert_eq!(cp.id(), 0);
/// temp.rewind(cp)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub struct RecordedCheckpoint<C> {
    id: u64,
    inner: C,
}

impl<C> RecordedCheckpoint<C> {
    /// The id of the `c` event that recorded it.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, RecordingAllocator, Rewind};
    ///
    /// let mut temp = RecordingAllocator::new(CachingAllocator::new());
    /// let (a, b) = (temp.checkpoint()?, temp.checkpoint()?);
    /// assert_eq!((a.id(), b.id()), (0, 1));
    /// temp.rewind(b)?;
    /// temp.rewind(a)?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }
}

// SAFETY: every allocation is the inner allocator's, returned unchanged, so
// it carries the inner allocator's guarantees (alignment, size, disjointness,
// validity until the next reset); `reset` and `mark_inference` forward to the
// inner `reset` and take `&mut self`, so no buffer outlives them.
unsafe impl<A: TempAllocator> TempAllocator for RecordingAllocator<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let mut log = self.events();
        // Growing the log must not abort: a request it cannot record fails.
        if log.events.try_reserve(2).is_err() || log.threads.try_reserve(1).is_err() {
            return Err(Error::out_of_memory(layout));
        }
        let thread = log.thread_id();
        if thread != log.current {
            log.current = thread;
            log.events.push(Event::Thread { id: thread });
        }
        log.events.push(Event::Alloc {
            size: layout.size(),
            align: layout.align(),
        });
        drop(log);
        self.inner.allocate(layout)
    }

    fn reset(&mut self) {
        self.inner.reset();
        self.events_mut().events.push(Event::Reset);
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}
