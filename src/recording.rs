//! [`RecordingAllocator`]: any [`TempAllocator`], with a log of every call.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::trace::{Event, Trace};
use crate::{Error, Stats, TempAllocator};

/// Wraps a [`TempAllocator`], passes every call through and records it as a
/// [`Trace`]: each request as `a SIZE ALIGN`, each reset as `r`, and each
/// [`mark_inference`](RecordingAllocator::mark_inference) as `i`.
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
    events: Mutex<Vec<Event>>,
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
            events: Mutex::new(Vec::new()),
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
        self.events_mut().push(Event::EndInference);
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
        Trace::from(self.events().clone())
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
        Trace::from(core::mem::take(self.events_mut()))
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
        let events = self
            .events
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (self.inner, Trace::from(events))
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // Pushing an event cannot leave the log half-updated, so a poisoned
        // lock (a panic elsewhere while it was held) is still usable.
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn events_mut(&mut self) -> &mut Vec<Event> {
        self.events
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

// SAFETY: every allocation is the inner allocator's, returned unchanged, so
// it carries the inner allocator's guarantees (alignment, size, disjointness,
// validity until the next reset); `reset` and `mark_inference` forward to the
// inner `reset` and take `&mut self`, so no buffer outlives them.
unsafe impl<A: TempAllocator> TempAllocator for RecordingAllocator<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let mut events = self.events();
        // Growing the log must not abort: a request it cannot record fails.
        if events.try_reserve(1).is_err() {
            return Err(Error::OutOfMemory {
                size: layout.size(),
                align: layout.align(),
            });
        }
        events.push(Event::Alloc {
            size: layout.size(),
            align: layout.align(),
        });
        drop(events);
        self.inner.allocate(layout)
    }

    fn reset(&mut self) {
        self.inner.reset();
        self.events_mut().push(Event::Reset);
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}
