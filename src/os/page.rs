//! Page sizes and the environment variables, each read once per process,
//! without allocating, and cached in an atomic:
//!
//! - [`system_page_size`]: the system's page (`sysconf(_SC_PAGESIZE)`,
//!   `GetSystemInfo().dwPageSize`, 4096 elsewhere and under Miri);
//! - [`page_size`]: the page every address and length handed to the system
//!   is a multiple of: the system's, or a larger one from
//!   `TEMPALLOC_PAGE_SIZE` (a test aid);
//! - [`huge_page_size`]: the transparent huge page, where that hint applies;
//! - [`reservations_refused`]: `TEMPALLOC_RESERVE=off` (a test aid), under
//!   which every reservation is refused.
//!
//! The backend reads the system and the environment; `parse.rs` says what
//! the values mean.

use core::ffi::CStr;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};

use super::imp;
use super::parse::{page_size_from, reserve_off_from};

/// The environment variable that raises the page size (a test aid: run the
/// allocator on this machine as if on a 16 KiB or 64 KiB kernel).
const PAGE_SIZE_VAR: &CStr = c"TEMPALLOC_PAGE_SIZE";

/// The environment variable that refuses every reservation when it is
/// `off` (a test aid: run the allocator on this machine as where nothing
/// can be reserved, on heap blocks).
const RESERVE_VAR: &CStr = c"TEMPALLOC_RESERVE";

/// Page sizes, read once; 0 until then.
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);
static SYSTEM_PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);
/// The huge page size: 0 until read, 1 when there is none.
static HUGE_PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// The page size every address and length handed to the system is a
/// multiple of: the system's (`sysconf(_SC_PAGESIZE)` on Unix,
/// `GetSystemInfo().dwPageSize` on Windows, 4096 elsewhere and under Miri),
/// or a larger power of two from the environment variable
/// `TEMPALLOC_PAGE_SIZE` (see [`page_size_from`]). Blocks, commits,
/// decommits and reservations are whole pages of it.
#[inline]
pub(crate) fn page_size() -> usize {
    match PAGE_SIZE.load(Relaxed) {
        0 => read_page_sizes().1,
        page => page,
    }
}

/// The system's own page size: the stride that touches every page once
/// (prefaulting), whatever `TEMPALLOC_PAGE_SIZE` says. Divides [`page_size`].
pub(crate) fn system_page_size() -> usize {
    match SYSTEM_PAGE_SIZE.load(Relaxed) {
        0 => read_page_sizes().0,
        page => page,
    }
}

/// Reads the system's page size and the variable, once per process (two
/// threads racing here compute and store the same values). Without
/// allocating: tests count the system allocations of a window, and the
/// first window is where this runs.
#[cold]
#[inline(never)]
fn read_page_sizes() -> (usize, usize) {
    let system = if cfg!(miri) {
        4096
    } else {
        imp::system_page_size()
    };
    let page = imp::with_var(PAGE_SIZE_VAR, |value| page_size_from(Some(value), system));
    let page = page.unwrap_or(system);
    SYSTEM_PAGE_SIZE.store(system, Relaxed);
    PAGE_SIZE.store(page, Relaxed);
    (system, page)
}

/// Whether `TEMPALLOC_RESERVE=off` refuses every reservation: 0 until read,
/// 1 no, 2 yes.
static RESERVE_OFF: AtomicU8 = AtomicU8::new(0);

/// Whether every reservation is refused, as the system refuses one it
/// cannot make: `TEMPALLOC_RESERVE` is `off` (read once per process, without
/// allocating, like `TEMPALLOC_PAGE_SIZE`). Regions then run on heap blocks,
/// as on the platforms without reservations.
pub(super) fn reservations_refused() -> bool {
    match RESERVE_OFF.load(Relaxed) {
        0 => {
            let off = imp::with_var(RESERVE_VAR, reserve_off_from).unwrap_or(false);
            RESERVE_OFF.store(if off { 2 } else { 1 }, Relaxed);
            off
        }
        read => read == 2,
    }
}

/// The transparent huge page size where the hint applies: on Linux and
/// Android read once from `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`
/// (2 MiB at 4 KiB pages, 32 MiB at 16 KiB, 512 MiB at 64 KiB; 2 MiB is
/// assumed only on a 4 KiB kernel too old to have that file). `None` where it
/// does not apply: other systems, THP off or absent, Miri.
pub(crate) fn huge_page_size() -> Option<usize> {
    let huge = match HUGE_PAGE_SIZE.load(Relaxed) {
        0 => read_huge_page_size(),
        huge => huge,
    };
    (huge > 1).then_some(huge)
}

#[cold]
#[inline(never)]
fn read_huge_page_size() -> usize {
    let huge = if cfg!(miri) {
        None
    } else {
        imp::huge_page_size(system_page_size())
    };
    // A huge page must be whole pages, or blocks aligned to it would not be.
    let huge = huge
        .filter(|&h| h.is_power_of_two() && h > page_size())
        .unwrap_or(1);
    HUGE_PAGE_SIZE.store(huge, Relaxed);
    huge
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::parse::MAX_PAGE_SIZE;

    #[test]
    fn page_sizes_are_powers_of_two_the_logical_one_whole_system_pages() {
        let (page, system) = (page_size(), system_page_size());
        assert!(page.is_power_of_two() && system.is_power_of_two());
        assert!(system >= 4096 && page >= system && page <= MAX_PAGE_SIZE);
        assert_eq!(page % system, 0);
        if cfg!(miri) || !cfg!(any(unix, windows)) {
            assert_eq!(system, 4096);
        }
        if let Some(huge) = huge_page_size() {
            assert!(huge.is_power_of_two() && huge > page, "{huge} at {page}");
        }
        if cfg!(any(
            miri,
            not(any(target_os = "linux", target_os = "android"))
        )) {
            assert_eq!(huge_page_size(), None);
        }
    }

    #[test]
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
    fn the_huge_page_size_is_read_from_this_kernel() {
        let dir = "/sys/kernel/mm/transparent_hugepage";
        let Ok(size) = std::fs::read_to_string(format!("{dir}/hpage_pmd_size")) else {
            return; // no THP here: nothing to compare with
        };
        let kernel: usize = size.trim().parse().unwrap();
        let enabled = std::fs::read_to_string(format!("{dir}/enabled")).unwrap();
        let expected = if enabled.contains("[never]") || kernel <= page_size() {
            None
        } else {
            Some(kernel)
        };
        assert_eq!(huge_page_size(), expected, "{size:?}, {enabled:?}");
        assert_eq!(
            imp::huge_page_size(imp::system_page_size()),
            (!enabled.contains("[never]")).then_some(kernel)
        );
    }
}
