//! [`FailureSlot`]: the first [`Error`] a kernel records, and [`NoteSlot`]:
//! the last request an allocator handle refused, both kept without `std`.
//!
//! `std::sync::OnceLock` would do, but it needs `std`, and a kernel context
//! must work on a microcontroller. A once-cell that blocks needs a lock; one
//! that spins can livelock under a priority scheduler (a high-priority worker
//! spinning while the low-priority writer it waits for never runs). This one
//! never waits: the first writer wins, later writers return at once.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::Error;

/// No error recorded.
const EMPTY: u8 = 0;
/// A writer won the slot and is writing the error.
const WRITING: u8 = 1;
/// The error is written and may be read.
const SET: u8 = 2;

/// A write-once slot for an [`Error`], shared between threads.
///
/// [`get`](Self::get) sees the error once the [`set`](Self::set) that
/// wrote it has returned (and that return happens before the read, as when
/// a scoped thread is joined). A `set` that loses to another returns at
/// once, possibly before the winner's error is readable.
pub(crate) struct FailureSlot {
    state: AtomicU8,
    error: UnsafeCell<MaybeUninit<Error>>,
}

// SAFETY: `error` is written once, by the one thread whose compare-and-swap
// took `state` from EMPTY to WRITING, and read only after an Acquire load
// sees SET, which that thread stores with Release after the write. So no
// read overlaps the write and no two writes happen. `Error` is `Copy` and
// `Send`, and is read by copy.
unsafe impl Sync for FailureSlot {}

impl FailureSlot {
    /// An empty slot.
    #[inline]
    pub(crate) const fn new() -> Self {
        FailureSlot {
            state: AtomicU8::new(EMPTY),
            error: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Records `error` if nothing is recorded yet; otherwise drops it (the
    /// first failure explains the rest).
    #[inline]
    pub(crate) fn set(&self, error: Error) {
        if self
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: the compare-and-swap made this thread the only writer,
            // and readers wait for SET, stored below.
            unsafe { (*self.error.get()).write(error) };
            self.state.store(SET, Ordering::Release);
        }
    }

    /// The recorded error, if a `set` has finished.
    #[inline]
    pub(crate) fn get(&self) -> Option<Error> {
        (self.state.load(Ordering::Acquire) == SET).then(|| {
            // SAFETY: SET is stored (Release) only after the write, and the
            // Acquire load above makes the write visible; nothing writes
            // after SET.
            unsafe { (*self.error.get()).assume_init() }
        })
    }
}

/// The error of the last request refused through the `Allocator` trait,
/// shared between threads, overwritten by each later refusal.
///
/// The trait's `AllocError` carries no numbers, so the context keeps them
/// here for the caller that sees the `AllocError` (it reads them right
/// after) and for the `Err` the kernel returns. Neither side ever waits: a
/// writer that finds the slot busy (another writer, or a reader) drops its
/// error, and a reader that finds it busy gets `None`; the caller then
/// reports the request's own size, which is what a lost race costs.
pub(crate) struct NoteSlot {
    state: AtomicU8,
    error: UnsafeCell<MaybeUninit<Error>>,
}

// SAFETY: `error` is touched only by the one thread whose compare-and-swap
// took `state` to WRITING (from EMPTY or SET), and it stores EMPTY or SET
// with Release when done; the Acquire of that swap makes the previous
// holder's accesses visible. So no two accesses overlap. `Error` is `Copy`
// and `Send`.
unsafe impl Sync for NoteSlot {}

impl NoteSlot {
    /// An empty slot.
    #[inline]
    pub(crate) const fn new() -> Self {
        NoteSlot {
            state: AtomicU8::new(EMPTY),
            error: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Keeps `error` in place of what the slot held, unless another thread
    /// holds the slot at this instant.
    #[inline]
    pub(crate) fn set(&self, error: Error) {
        let now = self.state.load(Ordering::Relaxed);
        if now != WRITING
            && self
                .state
                .compare_exchange(now, WRITING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // SAFETY: the compare-and-swap made this thread the slot's only
            // user until the store below.
            unsafe { (*self.error.get()).write(error) };
            self.state.store(SET, Ordering::Release);
        }
    }

    /// The error kept last, unless none is or another thread holds the slot
    /// at this instant.
    #[inline]
    pub(crate) fn get(&self) -> Option<Error> {
        self.state
            .compare_exchange(SET, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| {
                // SAFETY: SET means a write finished (its Release store is
                // seen by the Acquire swap), and the swap made this thread
                // the slot's only user until the store below.
                let error = unsafe { (*self.error.get()).assume_init() };
                self.state.store(SET, Ordering::Release);
                error
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_error_wins() {
        let slot = FailureSlot::new();
        assert_eq!(slot.get(), None);
        slot.set(Error::NoTempAllocator);
        slot.set(Error::InvalidAlignment { align: 3 });
        assert_eq!(slot.get(), Some(Error::NoTempAllocator));
    }

    #[test]
    fn racing_writers_leave_one_of_their_errors() {
        let slot = FailureSlot::new();
        let errors: [Error; 4] = core::array::from_fn(|align| Error::InvalidAlignment {
            align: 3 + 2 * align,
        });
        std::thread::scope(|s| {
            for e in errors {
                let slot = &slot;
                s.spawn(move || slot.set(e));
            }
        });
        // Joined: every `set` has returned, so the winner's error is visible.
        assert!(errors.contains(&slot.get().expect("one writer won")));
    }

    #[test]
    fn a_note_keeps_the_last_error() {
        let slot = NoteSlot::new();
        assert_eq!(slot.get(), None);
        slot.set(Error::NoTempAllocator);
        slot.set(Error::InvalidAlignment { align: 3 });
        assert_eq!(slot.get(), Some(Error::InvalidAlignment { align: 3 }));
        assert_eq!(slot.get(), Some(Error::InvalidAlignment { align: 3 }));
    }

    #[test]
    fn racing_notes_leave_one_of_their_errors() {
        let slot = NoteSlot::new();
        let errors: [Error; 4] = core::array::from_fn(|align| Error::InvalidAlignment {
            align: 3 + 2 * align,
        });
        std::thread::scope(|s| {
            for e in errors {
                let slot = &slot;
                s.spawn(move || {
                    slot.set(e);
                    // A reader racing the writers sees one of them or none.
                    assert!(slot.get().is_none_or(|got| errors.contains(&got)));
                });
            }
        });
        assert!(errors.contains(&slot.get().expect("one writer won")));
    }
}
