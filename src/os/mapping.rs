//! [`Mapping`]: a reserved range of address space whose pages are committed
//! as they are needed, counted against the process's limit (`policy.rs`) and
//! released on drop; and what the crate does to the pages of any memory it
//! owns, reserved or from the heap: [`prefault_pages`] (touch each once) and
//! [`advise_huge_pages`]. Every system call goes through `sys.rs`.

use core::ptr::NonNull;

use super::page::{huge_page_size, page_size, system_page_size};
use super::policy::{AddressSpace, PROCESS};
use super::{imp, sys};

/// The system (or the test hook, or
/// [`RESERVE_LIMIT`](super::policy::RESERVE_LIMIT)) said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused;

/// A reserved range of address space, of which the first `committed` bytes
/// are readable and writable. Released on drop.
///
/// Reserving costs no memory; committing makes pages usable, and the system
/// backs each with memory when it is first written, so a region's resident
/// size follows its high-water mark, never its reservation.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// Start of the usable range: aligned to the page, or to the huge page
    /// when one was asked for and is known.
    base: NonNull<u8>,
    /// Bytes reserved from `base`: whole pages.
    reserved: usize,
    /// Bytes committed from `base`: whole pages, at most `reserved`.
    committed: usize,
    /// What the system returned, and its length (`reserved` plus the slack
    /// that aligned `base`), to release it.
    map: NonNull<u8>,
    map_len: usize,
    /// The limit `map_len` counts against.
    space: &'static AddressSpace,
}

// SAFETY: a `Mapping` owns its address range exclusively (like a `Box<[u8]>`),
// and the system calls on it may be made from any thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Reserves `bytes` rounded up to pages, with nothing committed (aligned
    /// to the huge page, with the transparent-huge-page hint, when `huge` and
    /// a huge page size is known). When refused, or past
    /// [`RESERVE_LIMIT`](super::policy::RESERVE_LIMIT), retries at half the
    /// size, down to `at_least` rounded up to pages. `None` when even that is
    /// refused, or the platform has no reservations (callers fall back to
    /// heap blocks).
    pub(crate) fn reserve(bytes: usize, at_least: usize, huge: bool) -> Option<Mapping> {
        Self::reserve_in(&PROCESS, bytes, at_least, huge)
    }

    fn reserve_in(
        space: &'static AddressSpace,
        bytes: usize,
        at_least: usize,
        huge: bool,
    ) -> Option<Mapping> {
        if !imp::RESERVES {
            return None;
        }
        let page = page_size();
        let least = at_least.max(1).checked_next_multiple_of(page)?;
        let mut size = bytes.max(least).checked_next_multiple_of(page)?;
        let huge = huge.then(huge_page_size).flatten();
        loop {
            if let Some(m) = Self::reserve_exactly(space, size, huge) {
                return Some(m);
            }
            if size == least {
                return None;
            }
            // No overflow: `size / 2` rounded up to a page is below `size`.
            size = (size / 2).next_multiple_of(page).max(least);
        }
    }

    /// Reserves `reserved` bytes (whole pages), aligned to `huge` if some.
    fn reserve_exactly(
        space: &'static AddressSpace,
        reserved: usize,
        huge: Option<usize>,
    ) -> Option<Mapping> {
        let align = huge.unwrap_or(page_size());
        // The system aligns to its own page; `base` then moves up to `align`.
        let slack = align - system_page_size();
        let map_len = reserved
            .checked_add(slack)
            .filter(|&len| len <= isize::MAX as usize)?;
        if !space.take(map_len) {
            return None;
        }
        let Some(map) = sys::reserve(map_len) else {
            space.give_back(map_len);
            return None;
        };
        let pad = map.as_ptr().addr().wrapping_neg() & (align - 1);
        // SAFETY: `map` is a multiple of the system page and `align` a larger
        // power of two, so `pad <= align - system page = slack`: `base` and
        // the `reserved` bytes after it lie in the `map_len` bytes just mapped.
        let base = unsafe { map.add(pad) };
        if huge.is_some() {
            // SAFETY: the range was just reserved by this mapping.
            unsafe { sys::advise_huge_pages(base, reserved) };
        }
        Some(Mapping {
            base,
            reserved,
            committed: 0,
            map,
            map_len,
            space,
        })
    }

    /// The first byte.
    #[inline]
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Bytes reserved: whole pages.
    #[inline]
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Bytes committed (readable and writable) from the base: whole pages.
    #[inline]
    pub(crate) fn committed(&self) -> usize {
        self.committed
    }

    /// Commits pages up to `to` bytes from the base (a multiple of
    /// [`page_size`]), touching each when `prefault`. Past `reserved` is
    /// `Err`, at most `committed` is `Ok` (nothing to do); on `Err` nothing changed.
    pub(crate) fn commit(&mut self, to: usize, prefault: bool) -> Result<(), Refused> {
        debug_assert!(to % page_size() == 0, "commit to {to}: not whole pages");
        if to > self.reserved {
            return Err(Refused);
        }
        if to <= self.committed {
            return Ok(());
        }
        // SAFETY: `committed < to <= reserved`: inside the reservation.
        let start = unsafe { self.base.add(self.committed) };
        // SAFETY: `start..base + to` lies in this mapping's reservation.
        if !unsafe { sys::commit(start, to - self.committed) } {
            return Err(Refused);
        }
        if prefault {
            // SAFETY: `start..base + to` was just committed: writable, in this
            // mapping's reservation, and handed out to no one yet.
            unsafe { prefault_pages(start, to - self.committed) };
        }
        self.committed = to;
        Ok(())
    }

    /// Gives the pages from `to` bytes on back to the system (`to` a multiple
    /// of [`page_size`]; at least `committed` is `Ok`): they leave the resident set
    /// and are inaccessible until committed again, when they read as zero
    /// (Linux, Android, Windows) or hold unspecified bytes (Darwin and the
    /// BSDs, whose calls free pages lazily). The caller must hold no
    /// reference into them. On `Err` the system refused: `committed` is
    /// unchanged and the pages stay committed (their contents may be lost).
    pub(crate) fn decommit(&mut self, to: usize) -> Result<(), Refused> {
        debug_assert!(to % page_size() == 0, "decommit to {to}: not whole pages");
        if to >= self.committed {
            return Ok(());
        }
        // SAFETY: `to < committed <= reserved`: inside the reservation.
        let start = unsafe { self.base.add(to) };
        // SAFETY: `start..base + committed` lies in this mapping's
        // reservation; the caller holds no reference into it.
        if !unsafe { sys::decommit(start, self.committed - to) } {
            return Err(Refused);
        }
        self.committed = to;
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range `sys::reserve` returned, released once,
        // by the `Mapping` that owns it; no reference into it outlives it.
        unsafe { sys::release(self.map, self.map_len) };
        self.space.give_back(self.map_len);
    }
}

/// Asks for transparent huge pages on `len` bytes at `start` (Linux and
/// Android; nothing elsewhere). Whole pages; `start` aligned to the huge page.
///
/// # Safety
///
/// The range is memory this crate owns (a block or a reservation).
pub(crate) unsafe fn advise_huge_pages(start: NonNull<u8>, len: usize) {
    // SAFETY: the caller's precondition.
    unsafe { sys::advise_huge_pages(start, len) }
}

/// Touches every page the system has in the `len` bytes at `start` (a write
/// of 0 at each system page from `start`), so that none faults on first use.
///
/// # Safety
///
/// The range is writable memory this crate owns (a block or committed pages
/// of a reservation), and no reference into it is live: the bytes touched
/// become 0.
pub(crate) unsafe fn prefault_pages(start: NonNull<u8>, len: usize) {
    for offset in (0..len).step_by(system_page_size()) {
        // SAFETY: `offset < len`, so the byte is inside the range, which is
        // writable and not referenced (the caller's precondition); volatile
        // so the touch is not optimised away.
        unsafe { start.add(offset).write_volatile(0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::faults::{SystemCall, refuse};
    use crate::os::page::reservations_refused;

    /// Whether reservations can be had: a platform with them, and
    /// `TEMPALLOC_RESERVE=off` not set (under it every one is refused).
    fn reserves() -> bool {
        imp::RESERVES && !reservations_refused()
    }

    /// A reservation of `bytes` (at least `at_least`) through `space`, or
    /// `None`, which only where nothing can be reserved may answer.
    fn reserve_in(space: &'static AddressSpace, bytes: usize, at_least: usize) -> Option<Mapping> {
        let m = Mapping::reserve_in(space, bytes, at_least, false);
        assert_eq!(m.is_some(), reserves(), "reservations on this platform");
        m
    }

    fn reserve(bytes: usize, at_least: usize) -> Option<Mapping> {
        reserve_in(&PROCESS, bytes, at_least)
    }

    /// A fresh limit of `limit` bytes for one test (leaked: a few bytes).
    fn space(limit: usize) -> &'static AddressSpace {
        Box::leak(Box::new(AddressSpace::new(limit)))
    }

    /// Clears this thread's refusals when a test ends, passed or not.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            for call in [
                SystemCall::Reserve,
                SystemCall::Commit,
                SystemCall::Decommit,
            ] {
                refuse(call, 0, 0);
            }
        }
    }

    #[test]
    fn no_reservations_under_miri_or_without_a_backend() {
        assert_eq!(imp::RESERVES, cfg!(all(any(unix, windows), not(miri))));
        let m = Mapping::reserve(1 << 20, 1, false);
        assert_eq!(m.is_some(), reserves());
        assert_eq!(Mapping::reserve(1 << 20, 1, true).is_some(), reserves());
    }

    #[test]
    fn reservations_are_whole_pages_from_a_page_aligned_base() {
        let page = page_size();
        for (bytes, at_least, reserved) in [
            (1, 1, page),
            (page, 0, page),
            (page + 1, 1, 2 * page),
            (3 * page - 7, page, 3 * page),
            // `at_least` above `bytes` wins, rounded up to pages.
            (page, 2 * page + 1, 3 * page),
        ] {
            let Some(m) = reserve(bytes, at_least) else {
                return;
            };
            assert_eq!((m.reserved(), m.committed()), (reserved, 0), "{bytes}");
            assert_eq!(m.base().as_ptr().addr() % page, 0);
        }
    }

    #[test]
    fn huge_reservations_are_aligned_to_the_huge_page() {
        let page = page_size();
        let m = Mapping::reserve(3 * page, page, true);
        assert_eq!(m.is_some(), reserves());
        let Some(m) = m else {
            return;
        };
        let align = huge_page_size().unwrap_or(page);
        assert_eq!(m.base().as_ptr().addr() % align, 0);
        assert_eq!(m.reserved(), 3 * page);
    }

    #[test]
    fn commit_and_decommit_move_by_whole_pages_and_keep_what_is_below() {
        let page = page_size();
        let Some(mut m) = reserve(16 * page, 1) else {
            return;
        };
        let base = m.base().as_ptr();
        assert_eq!(m.commit(page, false), Ok(()));
        // SAFETY: the first page is committed and nothing else refers to it.
        unsafe { base.write_bytes(1, page) };
        assert_eq!(m.commit(4 * page, true), Ok(()));
        assert_eq!(m.committed(), 4 * page);
        // SAFETY: four pages are committed now.
        unsafe { base.add(4 * page - 1).write(2) };
        // SAFETY: the third page is among the four committed.
        unsafe { base.add(2 * page).write(3) };
        assert_eq!(m.decommit(page), Ok(()));
        assert_eq!(m.committed(), page);
        // SAFETY: the first page is still committed.
        let first = unsafe { core::slice::from_raw_parts(base, page) };
        assert!(first.iter().all(|&b| b == 1), "the page below stays whole");
        assert_eq!(m.commit(16 * page, false), Ok(()));
        // SAFETY: all 16 pages are committed.
        let (again, last) = unsafe { (base.add(2 * page).read(), base.add(4 * page - 1).read()) };
        if cfg!(any(target_os = "linux", target_os = "android", windows)) {
            assert_eq!((again, last), (0, 0), "decommitted pages read as zero");
        }
        assert_eq!(m.decommit(0), Ok(()));
        assert_eq!(m.committed(), 0);
    }

    #[test]
    fn a_refused_commit_changes_nothing() {
        let _clear = Clear;
        let page = page_size();
        let Some(mut m) = reserve(8 * page, 1) else {
            return;
        };
        assert_eq!(m.commit(page, false), Ok(()));
        refuse(SystemCall::Commit, 1, 2);
        assert_eq!(m.commit(2 * page, false), Ok(()), "one skipped");
        assert_eq!(m.commit(4 * page, true), Err(Refused));
        assert_eq!(m.commit(3 * page, false), Err(Refused));
        assert_eq!(m.committed(), 2 * page);
        // SAFETY: two pages are committed.
        unsafe { m.base().as_ptr().add(2 * page - 1).write(7) };
        assert_eq!(
            m.commit(4 * page, false),
            Ok(()),
            "two refused, then served"
        );
        assert_eq!(m.committed(), 4 * page);
    }

    #[test]
    fn a_refused_decommit_changes_nothing_and_says_so() {
        let _clear = Clear;
        let page = page_size();
        let Some(mut m) = reserve(8 * page, 1) else {
            return;
        };
        assert_eq!(m.commit(4 * page, false), Ok(()));
        refuse(SystemCall::Decommit, 0, u32::MAX);
        for _ in 0..3 {
            assert_eq!(m.decommit(page), Err(Refused));
            assert_eq!(m.committed(), 4 * page);
        }
        // Still committed: writable.
        // SAFETY: four pages are committed.
        unsafe { m.base().as_ptr().add(4 * page - 1).write(7) };
        refuse(SystemCall::Decommit, 0, 0);
        assert_eq!(m.decommit(page), Ok(()));
        assert_eq!(m.committed(), page);
    }

    #[test]
    fn a_refused_reservation_halves_down_to_at_least() {
        let _clear = Clear;
        let page = page_size();
        refuse(SystemCall::Reserve, 0, 3);
        // 64 pages, 32, 16 refused; 8 served.
        let m = reserve(64 * page, 5 * page);
        assert_eq!(m.map(|m| m.reserved()), reserves().then_some(8 * page));
        // Halving stops at `at_least` (rounded up to pages), never below.
        refuse(SystemCall::Reserve, 0, 3);
        let m = reserve(64 * page, 12 * page - 1);
        assert_eq!(m.map(|m| m.reserved()), reserves().then_some(12 * page));
        // Refused at `at_least` too: `None`, and callers use heap blocks.
        refuse(SystemCall::Reserve, 0, 3);
        if reserves() {
            assert!(Mapping::reserve(64 * page, 16 * page, false).is_none());
        }
        refuse(SystemCall::Reserve, 0, 0);
        assert_eq!(
            reserve(64 * page, 1).map(|m| m.reserved()),
            reserves().then_some(64 * page)
        );
    }

    #[test]
    fn refusals_are_this_threads_only() {
        let _clear = Clear;
        let page = page_size();
        refuse(SystemCall::Reserve, 0, u32::MAX);
        if reserves() {
            assert!(Mapping::reserve(page, 1, false).is_none());
        }
        let there = std::thread::spawn(move || reserve(page, 1).map(|m| m.reserved()));
        assert_eq!(there.join().unwrap(), reserves().then_some(page));
    }

    #[test]
    fn the_limit_counts_every_reservation_and_halves_one_that_passes_it() {
        let page = page_size();
        if !reserves() {
            // Nothing to count (and a limit leaked for nothing: Miri says so).
            assert!(reserve(64 * page, page).is_none());
            return;
        }
        // Each reservation maps its slack too (under a page): room for two.
        let slack = page - system_page_size();
        let space = space(10 * page + 2 * slack);
        // 64 pages, 32 and 16 pass the limit; 8 fit.
        let first = reserve_in(space, 64 * page, page).unwrap();
        assert_eq!(first.reserved(), 8 * page);
        assert_eq!(space.reserved(), 8 * page + slack);
        // Two pages are left: a request for three is refused ...
        assert!(Mapping::reserve_in(space, 64 * page, 3 * page, false).is_none());
        assert_eq!(space.reserved(), 8 * page + slack);
        // ... and one for two served.
        let second = reserve_in(space, 64 * page, 2 * page).unwrap();
        assert_eq!(second.reserved(), 2 * page);
        drop(first);
        assert_eq!(space.reserved(), 2 * page + slack);
        drop(second);
        assert_eq!(space.reserved(), 0);
    }
}
