//! The Windows backend: `VirtualAlloc(MEM_RESERVE, PAGE_NOACCESS)` reserves,
//! `VirtualAlloc(MEM_COMMIT, PAGE_READWRITE)` commits (charging the commit
//! limit; the system backs a page when it is first touched),
//! `VirtualFree(MEM_DECOMMIT)` gives pages back (they read as zero when
//! committed again) and `VirtualFree(MEM_RELEASE)` releases the reservation.
//! No huge-page hint: large pages there need a privilege and
//! `MEM_LARGE_PAGES` up front, not a hint.
//!
//! Under Miri nothing is reserved ([`RESERVES`]).

use core::ffi::CStr;
use core::ptr::NonNull;

use windows_sys::Win32::System::Environment::GetEnvironmentVariableW;
use windows_sys::Win32::System::Memory::{
    MEM_COMMIT, MEM_DECOMMIT, MEM_RELEASE, MEM_RESERVE, PAGE_NOACCESS, PAGE_READWRITE,
    VirtualAlloc, VirtualFree,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};

/// Whether `reserve` can succeed here.
pub(super) const RESERVES: bool = cfg!(not(miri));

pub(super) fn system_page_size() -> usize {
    // SAFETY: `SYSTEM_INFO` is plain integers and pointers, valid all zero.
    let mut info: SYSTEM_INFO = unsafe { core::mem::zeroed() };
    // SAFETY: `info` is a writable `SYSTEM_INFO`.
    unsafe { GetSystemInfo(&mut info) };
    usize::try_from(info.dwPageSize)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Calls `f` with the environment variable `name` (ASCII), if set, as bytes
/// (non-ASCII characters as 0xFF, which no number has); without allocating.
/// A value longer than 32 characters is passed as its first 32.
pub(super) fn with_var<R>(name: &CStr, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let mut wide_name = [0u16; 64];
    let name = name.to_bytes();
    if name.len() >= wide_name.len() {
        return None;
    }
    for (w, &b) in wide_name.iter_mut().zip(name) {
        *w = u16::from(b);
    }
    let mut wide = [0u16; 32];
    // SAFETY: `wide_name` is NUL-terminated; `wide` is writable for its
    // length, which is what `nsize` says.
    let len = unsafe {
        GetEnvironmentVariableW(wide_name.as_ptr(), wide.as_mut_ptr(), wide.len() as u32)
    };
    if len == 0 {
        return None;
    }
    // Past `wide.len()`, `len` is the size needed and nothing was copied
    // that can be relied on: pass what no number is.
    let len = len as usize;
    if len >= wide.len() {
        return Some(f(&[0xFF]));
    }
    let mut bytes = [0u8; 32];
    for (b, &w) in bytes.iter_mut().zip(&wide[..len]) {
        *b = u8::try_from(w).unwrap_or(0xFF);
    }
    Some(f(&bytes[..len]))
}

/// No huge-page hint on Windows (see the module docs).
pub(super) fn huge_page_size(_system_page: usize) -> Option<usize> {
    None
}

/// No address-space limit to read here.
pub(super) fn address_space_limit() -> Option<usize> {
    None
}

pub(super) fn reserve(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: a new inaccessible reservation at an address the system
    // picks; it touches no existing memory.
    let p = unsafe { VirtualAlloc(core::ptr::null(), len, MEM_RESERVE, PAGE_NOACCESS) };
    NonNull::new(p.cast())
}

/// # Safety
///
/// The range lies in a live reservation of this crate.
pub(super) unsafe fn commit(start: NonNull<u8>, len: usize) -> bool {
    // SAFETY: the range is this crate's (the caller's precondition);
    // committing it changes no other memory.
    let p = unsafe { VirtualAlloc(start.as_ptr().cast(), len, MEM_COMMIT, PAGE_READWRITE) };
    !p.is_null()
}

/// # Safety
///
/// The range lies in a live reservation of this crate, and no reference
/// into it is live.
pub(super) unsafe fn decommit(start: NonNull<u8>, len: usize) -> bool {
    // SAFETY: the caller's precondition: nothing in the range is in use.
    unsafe { VirtualFree(start.as_ptr().cast(), len, MEM_DECOMMIT) != 0 }
}

/// # Safety
///
/// Exactly a range `reserve` returned, not yet released, with no reference
/// into it live.
pub(super) unsafe fn release(map: NonNull<u8>, len: usize) {
    // SAFETY: the caller's precondition; `MEM_RELEASE` takes the base the
    // reservation returned and a size of 0 (the whole reservation).
    let released = unsafe { VirtualFree(map.as_ptr().cast(), 0, MEM_RELEASE) };
    // Fails only for an address that is not a reservation's base: a bug,
    // and then nothing is left to do but keep the address space.
    debug_assert!(
        released != 0,
        "VirtualFree(MEM_RELEASE) of {len} bytes at {map:p}"
    );
}

/// # Safety
///
/// The range is memory this crate owns.
pub(super) unsafe fn advise_huge_pages(_: NonNull<u8>, _: usize) {}
