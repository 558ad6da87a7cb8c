//! [`Ledger`]: bytes held under an optional limit, and the system calls that
//! took and gave them back — the one account kept by a
//! [`BlockCache`](crate::BlockCache) and by each
//! [`CachingAllocator`](crate::CachingAllocator) that takes memory through
//! it.

use core::alloc::Layout;
use std::sync::atomic::{
    AtomicU64, AtomicUsize, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed,
    Ordering::SeqCst,
};

use crate::Error;
use crate::os::page_size;

/// Bytes held under an optional limit, charged with one atomic operation so
/// that threads growing at once do not serialise, and the counters `Stats`
/// and `CacheStats` report.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    limit: Option<usize>,
    held: AtomicUsize,
    /// Charges being made or not yet kept: bytes that may count as held
    /// for memory that is then not taken (the system refused it). A refusal
    /// waits until there are none, so it is never for such bytes.
    pending: AtomicUsize,
    pub(crate) system_allocations: AtomicU64,
    pub(crate) system_frees: AtomicU64,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

/// Bytes a [`Ledger`] counts as held for memory being taken. [`keep`]
/// what was taken; dropped without a keep (an error, a refusal by the
/// system), it takes all of them back.
///
/// [`keep`]: Charge::keep
#[must_use = "a charge is taken back when dropped"]
pub(crate) struct Charge<'a> {
    ledger: &'a Ledger,
    bytes: usize,
}

/// How many times a refused charge waits for pending ones before it is
/// refused anyway: only charges that keep failing at the same moment reach
/// it.
const WAITS: usize = 64;

impl Ledger {
    pub(crate) fn new(limit: Option<usize>) -> Self {
        Ledger {
            limit,
            ..Ledger::default()
        }
    }

    pub(crate) fn limit(&self) -> Option<usize> {
        self.limit
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// The whole pages the limit leaves now (`usize::MAX` without one).
    pub(crate) fn room(&self) -> usize {
        self.limit
            .map_or(usize::MAX, |limit| room(self.held(), limit))
    }

    /// Counts between `need` and `want` more bytes as held: `want` shrinks
    /// to the room the limit leaves and then to what `fit` makes of it (a
    /// size class, at most its argument and at least `need`); `need` does
    /// not shrink.
    ///
    /// # Errors
    ///
    /// [`Error::BudgetExceeded`] for `request`, with what was held and the
    /// limit, when `need` does not fit once no other charge is pending;
    /// nothing is counted then.
    pub(crate) fn charge(
        &self,
        need: usize,
        want: usize,
        fit: impl Fn(usize) -> usize,
        request: Layout,
    ) -> Result<Charge<'_>, Error> {
        let want = want.max(need);
        let Some(limit) = self.limit else {
            let bytes = fit(want);
            self.pending.fetch_add(1, SeqCst);
            self.held.fetch_add(bytes, Relaxed);
            return Ok(Charge {
                ledger: self,
                bytes,
            });
        };
        let mut waits = 0;
        loop {
            // Pending before the bytes are counted (the compare-and-swap
            // releases it, the loads acquire it), so a thread that sees them
            // and is refused sees the charge too, and waits.
            self.pending.fetch_add(1, SeqCst);
            let mut now = self.held.load(Acquire);
            let refused = loop {
                let room = room(now, limit);
                if need > room {
                    break now;
                }
                let bytes = fit(want.min(room)).max(need);
                debug_assert!(bytes <= room);
                match (self.held).compare_exchange_weak(now, now + bytes, AcqRel, Acquire) {
                    Ok(_) => {
                        return Ok(Charge {
                            ledger: self,
                            bytes,
                        });
                    }
                    Err(actual) => now = actual,
                }
            };
            self.pending.fetch_sub(1, SeqCst);
            // No other charge pending (a kept one's bytes are visible
            // once its end is: `Charge::drop`), and nothing given back since
            // the refusal: it stands.
            let settled = self.pending.load(SeqCst) == 0;
            if (settled && self.held.load(Acquire) == refused) || waits == WAITS {
                return Err(over_budget(request, refused, limit));
            }
            waits += 1;
            if !settled {
                std::thread::yield_now();
            }
        }
    }

    /// [`Error::BudgetExceeded`] for `request` with what is held now, if
    /// there is a limit.
    pub(crate) fn over(&self, request: Layout) -> Option<Error> {
        (self.limit).map(|limit| over_budget(request, self.held(), limit))
    }

    /// Counts `bytes` as no longer held: memory freed, or gone back idle.
    pub(crate) fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Relaxed);
    }
}

impl Charge<'_> {
    /// The bytes charged.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Ends the charge with all its bytes taken.
    pub(crate) fn keep_all(self) {
        let bytes = self.bytes;
        self.keep(bytes);
    }

    /// Ends the charge with `used` of its bytes taken (at most what was
    /// charged); the rest is taken back.
    pub(crate) fn keep(mut self, used: usize) {
        debug_assert!(
            used <= self.bytes,
            "{used} used of a {}-byte charge",
            self.bytes
        );
        self.ledger.release(self.bytes - used);
        self.bytes = 0;
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.ledger.release(self.bytes);
        self.ledger.pending.fetch_sub(1, SeqCst);
    }
}

fn over_budget(request: Layout, held: usize, limit: usize) -> Error {
    Error::BudgetExceeded {
        requested: request.size(),
        held,
        limit,
    }
}

/// The whole pages `limit` leaves above `held`.
fn room(held: usize, limit: usize) -> usize {
    limit.saturating_sub(held) & !(page_size() - 1)
}
