//! [`RecordingAllocator`]: any [`TempAllocator`], with a log of every call.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use crate::trace::{Event, Trace};
use crate::{CachingAllocator, Checkpoint, Error, Stats, TempAllocator};

/// Wraps a [`TempAllocator`], passes every call through and records it as a
/// [`Trace`]: each request as `a SIZE ALIGN` (preceded by `t ID` when it
/// comes from another thread than the request before it; the thread that
/// made the recorder is 0), each reset as `r`, each
/// [`mark_inference`](RecordingAllocator::mark_inference) as `i`, and, over a
/// [`CachingAllocator`], each [`checkpoint`](RecordingAllocator::checkpoint)
/// and [`rewind`](RecordingAllocator::rewind) as `c ID` and `w ID`.
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

impl RecordingAllocator<CachingAllocator> {
    /// [`CachingAllocator::checkpoint`], recorded as `c ID` so that
    /// [`Trace::replay_caching`] takes the same checkpoint.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, RecordingAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(CachingAllocator::new());
    /// let cp = temp.checkpoint()?;
    /// KernelContext::new(&temp).scratch::<u8>(64)?;
    /// temp.rewind(cp)?;
    /// assert_eq!(temp.trace().to_string(), "c 0\na 64 1\nw 0\n");
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`CachingAllocator::checkpoint`]; the checkpoint is recorded
    /// either way, as the runtime asked for it.
    pub fn checkpoint(&mut self) -> Result<RecordedCheckpoint, Error> {
        let log = self.events_mut();
        let id = log.checkpoints;
        log.checkpoints += 1;
        log.events.push(Event::Checkpoint { id });
        Ok(RecordedCheckpoint {
            id,
            inner: self.inner.checkpoint()?,
        })
    }

    /// [`CachingAllocator::rewind`], recorded as `w ID`.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, RecordingAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(CachingAllocator::new());
    /// let cp = temp.checkpoint()?;
    /// temp.rewind(cp)?;
    /// assert_eq!(temp.trace().len(), 2);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`CachingAllocator::rewind`] (a stale checkpoint, say); the rewind
    /// is recorded either way, as the runtime asked for it.
    pub fn rewind(&mut self, checkpoint: RecordedCheckpoint) -> Result<(), Error> {
        self.events_mut()
            .events
            .push(Event::Rewind { id: checkpoint.id });
        self.inner.rewind(checkpoint.inner)
    }
}

/// A [`Checkpoint`] of a [`RecordingAllocator<CachingAllocator>`], with the
/// id its `c` event got; give it back to
/// [`RecordingAllocator::rewind`].
///
/// ```
/// use tempalloc::{CachingAllocator, RecordingAllocator};
///
/// let mut temp = RecordingAllocator::new(CachingAllocator::new());
/// let cp = temp.checkpoint()?;
/// assert_eq!(cp.id(), 0);
/// temp.rewind(cp)?;
/// # Ok::<(), tempalloc::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a checkpoint does nothing until it is given to `rewind`"]
pub struct RecordedCheckpoint {
    id: u64,
    inner: Checkpoint,
}

impl RecordedCheckpoint {
    /// The id of the `c` event that recorded it.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, RecordingAllocator};
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
