//! The checked-call layer: the calls the system sees, each checked for whole
//! pages and open to the test hook (`faults.rs`, armed by
//! `tempalloc::testing::refuse_system_calls`) before the backend makes it.
//!
//! Every address and length handed to the system passes one check here:
//! whole pages of [`page_size`] (the raw reservation itself: whole pages of
//! the system's page, which is the same unless `TEMPALLOC_PAGE_SIZE` raised
//! [`page_size`]). A reservation is also refused here under
//! `TEMPALLOC_RESERVE=off`.

use core::ptr::NonNull;

use super::faults::{SystemCall, refused};
use super::imp;
use super::page::{page_size, reservations_refused, system_page_size};

/// Every address and length handed to the system: whole pages of `unit`.
fn check(start: usize, len: usize, unit: usize) {
    debug_assert!(
        len > 0 && start % unit == 0 && len % unit == 0,
        "{len} bytes at {start:#x}: not whole pages of {unit} bytes"
    );
}

/// Reserves `len` bytes (whole system pages), inaccessible.
pub(super) fn reserve(len: usize) -> Option<NonNull<u8>> {
    check(0, len, system_page_size());
    if refused(SystemCall::Reserve) || reservations_refused() {
        return None;
    }
    let map = imp::reserve(len)?;
    check(map.as_ptr().addr(), len, system_page_size());
    Some(map)
}

/// Makes the range readable and writable; `false` if refused (nothing
/// changed then).
///
/// # Safety
///
/// The range lies in a live reservation of this crate.
pub(super) unsafe fn commit(start: NonNull<u8>, len: usize) -> bool {
    check(start.as_ptr().addr(), len, page_size());
    // SAFETY: the caller's precondition.
    !refused(SystemCall::Commit) && unsafe { imp::commit(start, len) }
}

/// Gives the range's pages back and makes it inaccessible; `false` if
/// refused (the range is still accessible then).
///
/// # Safety
///
/// The range lies in a live reservation of this crate, and no reference
/// into it is live.
pub(super) unsafe fn decommit(start: NonNull<u8>, len: usize) -> bool {
    check(start.as_ptr().addr(), len, page_size());
    // SAFETY: the caller's precondition.
    !refused(SystemCall::Decommit) && unsafe { imp::decommit(start, len) }
}

/// Releases a reservation, whole.
///
/// # Safety
///
/// Exactly a range `reserve` returned, not yet released, with no
/// reference into it live.
pub(super) unsafe fn release(map: NonNull<u8>, len: usize) {
    check(map.as_ptr().addr(), len, system_page_size());
    // SAFETY: the caller's precondition.
    unsafe { imp::release(map, len) }
}

/// Asks for transparent huge pages on the range (a hint; nothing where the
/// backend has none).
///
/// # Safety
///
/// The range is memory this crate owns.
pub(super) unsafe fn advise_huge_pages(start: NonNull<u8>, len: usize) {
    check(start.as_ptr().addr(), len, page_size());
    // SAFETY: the caller's precondition.
    unsafe { imp::advise_huge_pages(start, len) }
}
