//! The Unix backend: `mmap(PROT_NONE)` reserves, `mprotect` commits, and a
//! decommit gives the pages back with `madvise` and makes them `PROT_NONE`
//! (so a stray access faults instead of silently committing again). The
//! systems differ in two places:
//!
//! - `MAP_NORESERVE` (no swap charged for the reservation) on Linux and
//!   Android only: the BSDs do not have it (libc dropped it for them), and
//!   Darwin does not charge a `PROT_NONE` mapping anyway.
//! - How pages are given back ([`discard`]): `MADV_DONTNEED` on Linux and
//!   Android (the pages leave at once and read as zero); on Darwin
//!   `MADV_FREE_REUSABLE`, undone by `MADV_FREE_REUSE` before reuse, as
//!   Chromium's PartitionAlloc and V8 do (`MADV_DONTNEED` there only
//!   deactivates pages: they stay in the footprint iOS kills apps by);
//!   `MADV_FREE` on the BSDs and illumos, where `MADV_DONTNEED` is only a
//!   hint; `MADV_DONTNEED` elsewhere.
//!
//! Under Miri nothing is reserved ([`RESERVES`]); only the environment is
//! read, through `getenv`, which Miri provides.

use core::ffi::{CStr, c_int, c_void};
use core::ptr::NonNull;

#[cfg(any(target_os = "linux", target_os = "android"))]
use super::parse::parse_decimal;

/// Whether `reserve` can succeed here.
pub(super) const RESERVES: bool = cfg!(not(miri));

pub(super) fn system_page_size() -> usize {
    // SAFETY: `sysconf` reads a configuration value; no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Calls `f` with the bytes of the environment variable `name`, if set;
/// without allocating.
pub(super) fn with_var<R>(name: &CStr, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // SAFETY: `name` is NUL-terminated. `getenv` may race only with a change
    // of the environment, which on Unix only `std::env::set_var` and
    // `remove_var` make, and those are `unsafe` for this reason: their
    // callers must ensure no other thread reads the environment.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: a non-null result of `getenv` is a NUL-terminated string that
    // stays valid until the environment changes (see above); it is read here
    // and not kept.
    Some(f(unsafe { CStr::from_ptr(value) }.to_bytes()))
}

/// The transparent huge page size, if THP is on.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn huge_page_size(system_page: usize) -> Option<usize> {
    let mut buf = [0; 64];
    let enabled = read_file(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buf)?;
    // "always [madvise] never": the bracketed word is the mode in force.
    if enabled.windows(7).any(|w| w == b"[never]") {
        return None;
    }
    let size = read_file(
        c"/sys/kernel/mm/transparent_hugepage/hpage_pmd_size",
        &mut buf,
    );
    huge_page_from(size, system_page)
}

/// The huge page size for the contents of `hpage_pmd_size` (`None`: no
/// such file) on a kernel whose page is `system_page` bytes.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn huge_page_from(hpage_pmd_size: Option<&[u8]>, system_page: usize) -> Option<usize> {
    match hpage_pmd_size {
        Some(size) => parse_decimal(size.trim_ascii()),
        // Kernels before 4.13 lack the file; a PMD maps 2 MiB at 4 KiB pages.
        None => (system_page == 4096).then_some(2 << 20),
    }
}

/// No transparent huge pages to hint at.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn huge_page_size(_system_page: usize) -> Option<usize> {
    None
}

/// The start of the file at `path`, read into `buf` without allocating.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_file<'a>(path: &CStr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: `path` is NUL-terminated; opening a file read-only has no
    // effect on memory.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `buf` is writable for `buf.len()` bytes; `fd` is open.
    let read = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    let read = usize::try_from(read).ok()?;
    Some(&buf[..read])
}

#[cfg(any(target_os = "linux", target_os = "android"))]
const NORESERVE: c_int = libc::MAP_NORESERVE;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const NORESERVE: c_int = 0;

/// The process's address-space limit (`RLIMIT_AS`, `ulimit -v`), if any.
#[cfg(not(miri))]
pub(super) fn address_space_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` to the pointer it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return None;
    }
    (limit.rlim_cur != libc::RLIM_INFINITY)
        .then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

#[cfg(miri)]
pub(super) fn address_space_limit() -> Option<usize> {
    None
}

pub(super) fn reserve(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: an anonymous, private, inaccessible mapping at an address the
    // system picks; it touches no existing memory.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(p.cast())
}

/// # Safety
///
/// The range lies in a live reservation of this crate.
pub(super) unsafe fn commit(start: NonNull<u8>, len: usize) -> bool {
    let ptr = start.as_ptr().cast();
    // SAFETY: the range is this crate's (the caller's precondition); making
    // it writable changes no other memory.
    if unsafe { libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        return false;
    }
    // SAFETY: the range is this crate's (the caller's precondition) and was
    // just made accessible: `reuse`'s precondition.
    unsafe { reuse(ptr, len) };
    true
}

/// # Safety
///
/// The range lies in a live reservation of this crate, and no reference
/// into it is live.
pub(super) unsafe fn decommit(start: NonNull<u8>, len: usize) -> bool {
    let ptr = start.as_ptr().cast();
    // SAFETY: the caller's precondition: nothing in the range is in use, so
    // its contents may go.
    if !unsafe { discard(ptr, len) } {
        return false;
    }
    // SAFETY: the range is this crate's and nothing in it is in use (the
    // caller's precondition); making it inaccessible touches no other
    // memory.
    if unsafe { libc::mprotect(ptr, len, libc::PROT_NONE) } == 0 {
        return true;
    }
    // Still accessible, so still committed: say so, as a commit would.
    // SAFETY: the range is this crate's, and the refused `mprotect` left it
    // accessible: `reuse`'s precondition.
    unsafe { reuse(ptr, len) };
    false
}

/// # Safety
///
/// Exactly a range `reserve` returned, not yet released, with no reference
/// into it live.
pub(super) unsafe fn release(map: NonNull<u8>, len: usize) {
    // SAFETY: the caller's precondition.
    let unmapped = unsafe { libc::munmap(map.as_ptr().cast(), len) };
    // Fails only for a range that is not a mapping: a bug, and then nothing
    // is left to do but keep the address space.
    debug_assert_eq!(unmapped, 0, "munmap of {len} bytes at {map:p}");
}

/// # Safety
///
/// The range is memory this crate owns.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) unsafe fn advise_huge_pages(start: NonNull<u8>, len: usize) {
    // SAFETY: a hint on this crate's range (the caller's precondition); it
    // never changes contents, and its failure (THP off) is harmless, so the
    // result is ignored.
    unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

/// # Safety
///
/// The range is memory this crate owns.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) unsafe fn advise_huge_pages(_: NonNull<u8>, _: usize) {}

/// How pages are given back (see the module docs).
const DISCARD: c_int = discard_advice();

/// [`DISCARD`] on this system: the `return` compiled in for it, else
/// `MADV_DONTNEED`. Each list of systems is written once; `MADV_FREE_REUSABLE`
/// and `MADV_FREE` are named only where the system has them, `MADV_DONTNEED`
/// everywhere (the systems listed have it too).
#[allow(unreachable_code)] // where a `return` is compiled in
const fn discard_advice() -> c_int {
    #[cfg(target_vendor = "apple")]
    return libc::MADV_FREE_REUSABLE;
    #[cfg(any(
        target_os = "freebsd",
        target_os = "dragonfly",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "illumos",
        target_os = "solaris"
    ))]
    return libc::MADV_FREE;
    libc::MADV_DONTNEED
}

/// What undoes [`DISCARD`]'s accounting before pages are used again: Darwin
/// counts `MADV_FREE_REUSABLE` pages out of the footprint until
/// `MADV_FREE_REUSE` (harmless on pages never made reusable).
#[cfg(target_vendor = "apple")]
const REUSE: Option<c_int> = Some(libc::MADV_FREE_REUSE);
#[cfg(not(target_vendor = "apple"))]
const REUSE: Option<c_int> = None;

/// Gives the pages of the range back to the system; `false` if refused.
///
/// # Safety
///
/// The range is this crate's, accessible, and its contents are not needed.
unsafe fn discard(ptr: *mut c_void, len: usize) -> bool {
    // SAFETY: the caller's precondition.
    unsafe { advise_retrying(ptr, len, DISCARD) }
}

/// Undoes [`discard`]'s accounting, where there is any. Its failure leaves
/// only the accounting behind, so it is not reported.
///
/// # Safety
///
/// The range is this crate's and accessible.
unsafe fn reuse(ptr: *mut c_void, len: usize) {
    if let Some(advice) = REUSE {
        // SAFETY: the caller's precondition; `MADV_FREE_REUSE` keeps contents.
        unsafe { advise_retrying(ptr, len, advice) };
    }
}

/// `madvise`, again while the system says `EAGAIN` (out of resources for
/// the moment, which Darwin answers); `false` on any other failure.
///
/// # Safety
///
/// What `advice` needs of the range.
unsafe fn advise_retrying(ptr: *mut c_void, len: usize, advice: c_int) -> bool {
    loop {
        // SAFETY: the caller's precondition.
        if unsafe { libc::madvise(ptr, len, advice) } == 0 {
            return true;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            return false;
        }
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android"), not(miri)))]
mod tests {
    use super::*;

    #[test]
    fn linux_and_android_give_pages_back_with_madv_dontneed() {
        assert_eq!(DISCARD, libc::MADV_DONTNEED);
        assert_eq!(REUSE, None);
    }

    #[test]
    fn the_huge_page_is_what_hpage_pmd_size_says_at_each_page_size() {
        // A PMD at 4, 16 and 64 KiB pages, as those kernels write it.
        for (file, page, huge) in [
            ("2097152\n", 4096, 2 << 20),
            ("33554432\n", 16384, 32 << 20),
            ("536870912\n", 65536, 512 << 20),
        ] {
            assert_eq!(
                huge_page_from(Some(file.as_bytes()), page),
                Some(huge),
                "{file:?}"
            );
        }
        // No file (before Linux 4.13): 2 MiB only where that is sure.
        assert_eq!(huge_page_from(None, 4096), Some(2 << 20));
        assert_eq!(huge_page_from(None, 16384), None);
        assert_eq!(huge_page_from(Some(b"two megabytes"), 4096), None);
    }
}
