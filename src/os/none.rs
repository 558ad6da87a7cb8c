//! No reservations (wasm and any system that is neither Unix nor Windows):
//! `reserve` refuses, so no `Mapping` exists and the other calls are never
//! made; callers fall back to heap blocks. The page size is 4096.

use core::ffi::CStr;
use core::ptr::NonNull;

/// Whether `reserve` can succeed here.
pub(super) const RESERVES: bool = false;

pub(super) fn system_page_size() -> usize {
    4096
}

/// Calls `f` with the bytes of the environment variable `name`, if set.
/// Allocates (once per process: the page size is read once); where there
/// is no environment (wasm32-unknown-unknown) it is never set.
pub(super) fn with_var<R>(name: &CStr, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let value = std::env::var_os(name.to_str().ok()?)?;
    Some(f(value.as_encoded_bytes()))
}

pub(super) fn huge_page_size(_system_page: usize) -> Option<usize> {
    None
}

/// No address-space limit to read here.
pub(super) fn address_space_limit() -> Option<usize> {
    None
}

pub(super) fn reserve(_: usize) -> Option<NonNull<u8>> {
    None
}

/// # Safety
///
/// Never called: there is no reservation.
pub(super) unsafe fn commit(_: NonNull<u8>, _: usize) -> bool {
    false
}

/// # Safety
///
/// Never called: there is no reservation.
pub(super) unsafe fn decommit(_: NonNull<u8>, _: usize) -> bool {
    false
}

/// # Safety
///
/// Never called: there is no reservation.
pub(super) unsafe fn release(_: NonNull<u8>, _: usize) {}

/// # Safety
///
/// The range is memory this crate owns.
pub(super) unsafe fn advise_huge_pages(_: NonNull<u8>, _: usize) {}
