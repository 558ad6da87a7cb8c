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
/// Recording never aborts the runtime, and a trace is never silently
/// incomplete. A request, checkpoint or rewind the log cannot grow for is
/// [`Error::OutOfMemory`] and is not passed on. Each one it records also
/// keeps room in the log for the reset or inference end that follows, which
/// cannot fail (`reset` returns nothing), so that one is recorded even when
/// memory ran out after the request. A reset or inference end that finds no
/// room (several in a row with no memory left) still resets the inner
/// allocator, and from then on [`trace`](Self::trace) returns the error,
/// not a trace without it.
///
/// ```
/// use tempalloc::{with_context, MallocAllocator, RecordingAllocator, TempAllocator};
///
/// let mut temp = RecordingAllocator::new(MallocAllocator::new());
/// with_context(&mut temp, |ctx| ctx.scratch::<f32>(256).map(|_| ()))?;
/// temp.mark_inference();
/// assert_eq!(temp.trace()?.to_string(), "a 1024 4\nr\ni\n");
///
/// // Replaying the recording asks another allocator for the same thing.
/// let (_malloc, trace) = temp.into_parts();
/// let mut other = tempalloc::BumpAllocator::new();
/// trace?.replay(&mut other)?;
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
    /// Capacity beyond the length is the room kept for the next reset or
    /// inference end (see [`Log::make_room`]).
    events: Vec<Event>,
    /// Every thread that asked, in the order first seen: index = `t` id.
    threads: Vec<ThreadId>,
    /// The thread of the last recorded request (a trace starts on 0).
    current: u32,
    /// The next checkpoint's id.
    checkpoints: u64,
    /// Why the first reset or inference end that could not be recorded was
    /// lost: the trace is incomplete from there on.
    lost: Option<Error>,
}

impl Log {
    /// An empty log with room for a first reset, if memory can be had (if
    /// not, that reset may be lost, and the trace says so).
    fn new(threads: Vec<ThreadId>) -> Log {
        let mut events = Vec::new();
        let _ = events.try_reserve(1);
        Log {
            events,
            threads,
            ..Log::default()
        }
    }

    /// Room for `events` more events and for the reset or inference end
    /// after them, or [`Error::OutOfMemory`] for what the log could not
    /// get: the log must not abort a runtime that is being recorded.
    fn make_room(&mut self, events: usize) -> Result<(), Error> {
        self.events
            .try_reserve(events + 1)
            .map_err(|_| self.growth_error(events + 1))
    }

    /// The error for a log that could not grow by `events` events.
    fn growth_error(&self, events: usize) -> Error {
        no_room_for(self.events.len().saturating_add(events))
    }

    /// Records a reset or an inference end, which cannot fail: into the
    /// room the last recorded call kept, or new room; if neither can be
    /// had the event is lost, and [`Log::trace`] says so from then on.
    fn close(&mut self, event: Event) {
        if self.events.len() == self.events.capacity() && self.events.try_reserve(1).is_err() {
            let error = self.growth_error(1);
            self.lost.get_or_insert(error);
            return;
        }
        self.events.push(event);
        // Room for the next one, while memory can be had.
        let _ = self.events.try_reserve(1);
    }

    /// The trace, or the error that lost a reset or an inference end.
    fn trace(events: Vec<Event>, lost: Option<Error>) -> Result<Trace, Error> {
        match lost {
            Some(error) => Err(error),
            None => Ok(Trace::from(events)),
        }
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

/// [`Error::OutOfMemory`] for the bytes of `events` events.
fn no_room_for(events: usize) -> Error {
    Error::OutOfMemory {
        size: events.saturating_mul(size_of::<Event>()),
        align: align_of::<Event>(),
    }
}

impl<A: TempAllocator> RecordingAllocator<A> {
    /// Records every call made through it to `inner`.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, RecordingAllocator};
    ///
    /// let temp = RecordingAllocator::new(BumpAllocator::new());
    /// assert!(temp.trace()?.is_empty());
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn new(inner: A) -> Self {
        RecordingAllocator {
            inner,
            // The thread that makes the recorder is thread 0.
            events: Mutex::new(Log::new(vec![thread::current().id()])),
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
    /// a replay also treats as a reset). Never fails: see the type's docs
    /// for a log with no room left.
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(MallocAllocator::new());
    /// temp.mark_inference();
    /// assert_eq!((temp.trace()?.inferences(), temp.stats().resets), (1, 1));
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn mark_inference(&mut self) {
        self.inner.reset();
        self.events_mut().close(Event::EndInference);
    }

    /// A copy of what was recorded so far.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`], with the bytes the log could not get, when
    /// a reset or an inference end could not be recorded (see the type's
    /// docs): the trace would lack it, and replay windows that were never
    /// one.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(BumpAllocator::new());
    /// temp.reset();
    /// assert_eq!(temp.trace()?.to_string(), "r\n");
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn trace(&self) -> Result<Trace, Error> {
        let log = self.events();
        if let Some(error) = log.lost {
            return Err(error);
        }
        // A copy that cannot abort either.
        let mut events = Vec::new();
        let len = log.events.len();
        events
            .try_reserve_exact(len)
            .map_err(|_| no_room_for(len))?;
        events.extend_from_slice(&log.events);
        Ok(Trace::from(events))
    }

    /// Takes what was recorded so far and starts an empty log.
    ///
    /// # Errors
    ///
    /// As [`trace`](Self::trace); the log starts empty and complete either way.
    ///
    /// ```
    /// use tempalloc::{BumpAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(BumpAllocator::new());
    /// temp.reset();
    /// assert_eq!(temp.take_trace()?.len(), 1);
    /// assert!(temp.trace()?.is_empty());
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn take_trace(&mut self) -> Result<Trace, Error> {
        let log = self.events_mut();
        // Threads and checkpoints keep their numbers across logs.
        let mut fresh = Vec::new();
        let _ = fresh.try_reserve(1); // room for a first reset, if it can be had
        let events = core::mem::replace(&mut log.events, fresh);
        Log::trace(events, log.lost.take())
    }

    /// The inner allocator and the recorded trace.
    ///
    /// The trace is an error as for [`trace`](Self::trace).
    ///
    /// ```
    /// use tempalloc::{MallocAllocator, RecordingAllocator, TempAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(MallocAllocator::new());
    /// temp.reset();
    /// let (inner, trace) = temp.into_parts();
    /// assert_eq!((inner.stats().resets, trace?.len()), (1, 1));
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn into_parts(self) -> (A, Result<Trace, Error>) {
        let log = self
            .events
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (self.inner, Log::trace(log.events, log.lost))
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
/// assert_eq!(temp.trace()?.to_string(), "c 0\na 64 1\nw 0\n");
///
/// // A frame is a checkpoint per kernel and a reset at its end.
/// temp.take_trace()?;
/// temp.frame(|inf| inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch::<u8>(8)?.len())))?;
/// assert_eq!(temp.trace()?.to_string(), "c 1\na 8 1\nw 1\nr\n");
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
        log.make_room(1)?;
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
        log.make_room(1)?;
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

impl<A: Rewind> RecordingAllocator<A> {
    /// As [`Rewind::frame`], without the trait import (as
    /// [`CachingAllocator::frame`](crate::CachingAllocator::frame)): runs
    /// `f` in a [`Frame`](crate::Frame), recording it, then resets.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, Error, RecordingAllocator};
    ///
    /// let mut temp = RecordingAllocator::new(CachingAllocator::new());
    /// let n = temp.frame(|inf| inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch::<u8>(10)?.len())))?;
    /// assert_eq!(n, 10);
    /// assert!(!temp.trace()?.is_empty());
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Rewind::frame`].
    pub fn frame<R, E: From<Error>>(
        &mut self,
        f: impl for<'f> FnOnce(&mut crate::Frame<'f, Self>) -> Result<R, E>,
    ) -> Result<R, E> {
        crate::frame::run_frame(self, f)
    }
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
        // Room for a `t` line, the request, and the reset after them.
        if log.make_room(2).is_err() || log.threads.try_reserve(1).is_err() {
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
        self.events_mut().close(Event::Reset);
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }

    // `resize_in_place` and `grow` keep the trait's defaults: a growth is
    // the `allocate` (recorded above) and copy they fall back to, so a
    // replay makes the same requests.
}
