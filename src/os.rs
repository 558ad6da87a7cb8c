//! Reserved address ranges whose pages are committed as they are needed: the
//! memory behind a region that grows in place. One small API over the
//! platform (`mmap`/`mprotect`/`madvise` on Unix); where it is missing (other
//! systems, Miri) or the system refuses a reservation (`ulimit -v`),
//! [`Mapping::reserve`] returns `None` and callers fall back to heap blocks.

use core::ptr::NonNull;

use crate::block::{HUGE_PAGE, PAGE};

/// The page size every address and length handed to the system is a
/// multiple of. (Interim: the OS-layer work reads it at run time.)
#[inline]
pub(crate) fn page_size() -> usize {
    PAGE
}

/// The transparent-huge-page size, where the hint applies. (Interim.)
pub(crate) fn huge_page_size() -> Option<usize> {
    cfg!(all(target_os = "linux", not(miri))).then_some(HUGE_PAGE)
}

/// A region's first reservation. (Interim value.)
pub(crate) const REGION_RESERVE: usize = if usize::BITS >= 64 { 256 << 20 } else { 8 << 20 };

/// A system call said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused;

/// A reserved range of address space, of which the first `committed` bytes
/// are readable and writable. Unmapped on drop.
///
/// Reserving costs no memory; committing makes pages usable, and the system
/// backs each with memory when it is first written, so a region's resident
/// size follows its high-water mark, never its reservation.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// Start of the usable range (2 MiB aligned when huge pages were asked).
    base: NonNull<u8>,
    /// Bytes reserved from `base`.
    reserved: usize,
    /// Bytes committed from `base`: a multiple of [`PAGE`], at most `reserved`.
    committed: usize,
    /// What `mmap` returned, and its length, for `munmap`.
    map: NonNull<u8>,
    map_len: usize,
}

// SAFETY: a `Mapping` owns its address range exclusively (like a `Box<[u8]>`),
// and the system calls on it may be made from any thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Reserves `bytes` (rounded up to pages) of address space with nothing
    /// committed, aligned to 2 MiB when `huge` (and asking for transparent
    /// huge pages on it). `None` when the platform has no reservations or
    /// refuses this one.
    pub(crate) fn reserve(bytes: usize, at_least: usize, huge: bool) -> Option<Mapping> {
        let reserved = bytes.max(at_least).checked_next_multiple_of(PAGE)?;
        let slack = if huge { HUGE_PAGE } else { 0 };
        let map_len = reserved.checked_add(slack)?;
        let map = sys::reserve(map_len)?;
        let pad = map.as_ptr().addr().wrapping_neg() & (slack.max(PAGE) - 1);
        // SAFETY: `pad < slack` (or 0), so `map + pad` stays inside the
        // `map_len` bytes just mapped.
        let base = unsafe { map.add(pad) };
        if huge {
            sys::advise_huge_pages(base, reserved);
        }
        Some(Mapping {
            base,
            reserved,
            committed: 0,
            map,
            map_len,
        })
    }

    /// The first byte.
    #[inline]
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Bytes reserved.
    #[inline]
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Bytes committed (readable and writable) from the base.
    #[inline]
    pub(crate) fn committed(&self) -> usize {
        self.committed
    }

    /// Commits pages up to `to` bytes from the base (a multiple of [`PAGE`],
    /// at most `reserved`), touching them when `prefault`. `false` when the
    /// system refuses (no memory); nothing changes then.
    pub(crate) fn commit(&mut self, to: usize, prefault: bool) -> Result<(), Refused> {
        debug_assert!(to % PAGE == 0 && to <= self.reserved && to > self.committed);
        // SAFETY: `committed` is inside the reservation.
        let start = unsafe { self.base.add(self.committed) };
        if !sys::commit(start, to - self.committed) {
            return Err(Refused);
        }
        if prefault {
            for offset in (self.committed..to).step_by(PAGE) {
                // SAFETY: `offset < to`, now committed and writable; volatile
                // so the touch is not optimised away.
                unsafe { self.base.add(offset).write_volatile(0) };
            }
        }
        self.committed = to;
        Ok(())
    }

    /// Gives the pages from `to` bytes on (a multiple of [`PAGE`]) back to
    /// the system: they leave the resident set at once and read as zero if
    /// committed again. The caller must hold no reference into them.
    pub(crate) fn decommit(&mut self, to: usize) -> Result<(), Refused> {
        debug_assert!(to % PAGE == 0 && to < self.committed);
        // SAFETY: `to < committed <= reserved`.
        let start = unsafe { self.base.add(to) };
        sys::decommit(start, self.committed - to);
        self.committed = to;
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        sys::release(self.map, self.map_len);
    }
}

#[cfg(all(unix, not(miri)))]
mod sys {
    use core::ptr::NonNull;

    pub(super) fn reserve(len: usize) -> Option<NonNull<u8>> {
        // SAFETY: an anonymous, private, inaccessible mapping at an address
        // the system picks; it touches no existing memory.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast())
    }

    pub(super) fn commit(start: NonNull<u8>, len: usize) -> bool {
        // SAFETY: `start..start + len` lies in a mapping this crate reserved
        // and owns; making it writable changes no other memory.
        unsafe {
            libc::mprotect(
                start.as_ptr().cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
            ) == 0
        }
    }

    pub(super) fn decommit(start: NonNull<u8>, len: usize) {
        // SAFETY: the range lies in a mapping this crate owns and no
        // reference into it is live (the caller's contract). MADV_DONTNEED
        // drops the pages (they read as zero afterwards); PROT_NONE makes a
        // stray access fault instead of silently re-committing. Failure of
        // either only leaves memory resident, so the results are ignored.
        unsafe {
            libc::madvise(start.as_ptr().cast(), len, libc::MADV_DONTNEED);
            libc::mprotect(start.as_ptr().cast(), len, libc::PROT_NONE);
        }
    }

    pub(super) fn release(map: NonNull<u8>, len: usize) {
        // SAFETY: exactly the range `reserve` mapped, unmapped once, by the
        // `Mapping` that owns it.
        unsafe { libc::munmap(map.as_ptr().cast(), len) };
    }

    #[cfg(target_os = "linux")]
    pub(super) fn advise_huge_pages(start: NonNull<u8>, len: usize) {
        // SAFETY: a hint on a range this crate owns; it never changes
        // contents, and its failure (no THP support) is harmless.
        unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn advise_huge_pages(_: NonNull<u8>, _: usize) {}
}

/// No reservations here: `reserve` refuses, so no `Mapping` exists and the
/// other calls are never made; callers fall back to heap blocks.
#[cfg(not(all(unix, not(miri))))]
mod sys {
    use core::ptr::NonNull;

    pub(super) fn reserve(_: usize) -> Option<NonNull<u8>> {
        None
    }
    pub(super) fn commit(_: NonNull<u8>, _: usize) -> bool {
        false
    }
    pub(super) fn decommit(_: NonNull<u8>, _: usize) {}
    pub(super) fn release(_: NonNull<u8>, _: usize) {}
    pub(super) fn advise_huge_pages(_: NonNull<u8>, _: usize) {}
}
