//! Reserved address ranges whose pages are committed as they are needed: the
//! memory behind a region that grows in place. One small API over the
//! platform:
//!
//! - the page size, read at run time ([`page_size`]), and the transparent
//!   huge page size where that hint applies ([`huge_page_size`]);
//! - [`Mapping`]: reserve, commit, decommit, release;
//! - a process-wide cap on reserved address space ([`RESERVE_LIMIT`]) and
//!   the default size of a region's reservation ([`REGION_RESERVE`]).
//!
//! Backends, one file each: `os/unix.rs` (`mmap`/`mprotect`/`madvise`; Linux
//! and Android, Darwin, the BSDs and other Unix systems differ only in flags
//! and in how pages are given back), `os/windows.rs` (`VirtualAlloc`/
//! `VirtualFree`), `os/none.rs` (wasm and anything else: no reservations).
//! Under Miri nothing is reserved either. Where no reservation can be had,
//! [`Mapping::reserve`] returns `None` and callers fall back to heap blocks.
//!
//! Every address and length handed to the system passes one check, in the
//! thin `sys` layer below: whole pages of [`page_size`] (the raw reservation
//! itself: whole pages of the system's page, which is the same unless
//! `TEMPALLOC_PAGE_SIZE` raised [`page_size`]).
//!
//! Two environment variables, read once each, are test aids: one raises
//! the page size (`TEMPALLOC_PAGE_SIZE`), the other refuses every
//! reservation (`TEMPALLOC_RESERVE=off`), so the whole test suite runs on
//! the heap-block fallback of the platforms without reservations.

use core::cell::Cell;
use core::ffi::CStr;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};

use crate::testing::SystemCall;

#[cfg_attr(unix, path = "os/unix.rs")]
#[cfg_attr(windows, path = "os/windows.rs")]
#[cfg_attr(not(any(unix, windows)), path = "os/none.rs")]
mod imp;

/// The environment variable that raises the page size (a test aid: run the
/// allocator on this machine as if on a 16 KiB or 64 KiB kernel).
const PAGE_SIZE_VAR: &CStr = c"TEMPALLOC_PAGE_SIZE";

/// The environment variable that refuses every reservation when it is
/// `off` (a test aid: run the allocator on this machine as where nothing
/// can be reserved, on heap blocks).
const RESERVE_VAR: &CStr = c"TEMPALLOC_RESERVE";

/// The largest page `TEMPALLOC_PAGE_SIZE` may ask for: the largest base page
/// of any kernel the crate targets is 64 KiB; 1 MiB leaves room to test past it.
const MAX_PAGE_SIZE: usize = 1 << 20;

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

/// The page size for a `TEMPALLOC_PAGE_SIZE` of `value` on a system whose
/// page is `system` bytes: the value when it is a decimal number of bytes,
/// a power of two, at least `system` and at most 1 MiB; else `system` (an
/// unusable value is ignored, never an error: it is a test aid).
fn page_size_from(value: Option<&[u8]>, system: usize) -> usize {
    value
        .and_then(parse_decimal)
        .filter(|&p| p.is_power_of_two() && p >= system && p <= MAX_PAGE_SIZE)
        .unwrap_or(system)
}

/// A decimal number: ASCII digits only, no sign, no overflow.
fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| {
        let d = d.checked_sub(b'0').filter(|&d| d <= 9)?;
        n.checked_mul(10)?.checked_add(usize::from(d))
    })
}

/// Whether `TEMPALLOC_RESERVE=off` refuses every reservation: 0 until read,
/// 1 no, 2 yes.
static RESERVE_OFF: AtomicU8 = AtomicU8::new(0);

/// Whether every reservation is refused, as the system refuses one it
/// cannot make: `TEMPALLOC_RESERVE` is `off` (read once per process, without
/// allocating, like `TEMPALLOC_PAGE_SIZE`). Regions then run on heap blocks,
/// as on the platforms without reservations.
fn reservations_refused() -> bool {
    match RESERVE_OFF.load(Relaxed) {
        0 => {
            let off = imp::with_var(RESERVE_VAR, reserve_off_from).unwrap_or(false);
            RESERVE_OFF.store(if off { 2 } else { 1 }, Relaxed);
            off
        }
        read => read == 2,
    }
}

/// Whether a `TEMPALLOC_RESERVE` of `value` refuses reservations: only
/// `off` does (any other value is ignored, never an error: a test aid).
fn reserve_off_from(value: &[u8]) -> bool {
    value == b"off"
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

// Reservation sizes. A region first reserves `REGION_RESERVE` (more when its
// peak asks for more; a region that outgrows its reservation moves to a
// larger one), so 64 threads' regions must fit in what the platform lets a
// process map, next to everything else it maps; `RESERVE_LIMIT` caps them all
// together, and a reservation past it is refused like one the system refuses
// (it halves, then falls back to heap blocks). Reserving costs no memory, but
// address space is finite, and `ulimit -v` counts it.
//
// - 64-bit Linux, macOS, Windows, FreeBSD: 47 or 48 bits (128 TiB) of user
//   address space. 256 MiB per region: 64 threads take 16 GiB, a thousand
//   threads 256 GiB. The cap, 1 TiB, is under 1% of the space.
// - Android (64-bit): kernels are often built with 39-bit address spaces
//   (512 GiB, shared with the ART heap and every library). 64 MiB per
//   region (64 threads: 4 GiB); cap 32 GiB, 1/16 of the space.
// - iOS, tvOS, watchOS, visionOS: without the extended-virtual-addressing
//   entitlement an app gets a few GiB of address space. 32 MiB per region
//   (64 threads: 2 GiB); cap 4 GiB.
// - 32-bit: 2-4 GiB for everything. 8 MiB per region (64 threads: 512 MiB);
//   cap 1 GiB, so the process keeps room for its own large allocations.

/// Picks this 64-bit platform's value: iOS and its siblings (not macOS),
/// Android, the rest.
#[cfg(target_pointer_width = "64")]
const fn by_platform(apple_mobile: usize, android: usize, other: usize) -> usize {
    if cfg!(all(target_vendor = "apple", not(target_os = "macos"))) {
        apple_mobile
    } else if cfg!(target_os = "android") {
        android
    } else {
        other
    }
}

/// Bytes a region reserves at first on this platform (see above).
#[cfg(target_pointer_width = "64")]
pub(crate) const REGION_RESERVE: usize = by_platform(32 << 20, 64 << 20, 256 << 20);
/// The most address space all reservations of the process may hold at once
/// (see above).
#[cfg(target_pointer_width = "64")]
pub(crate) const RESERVE_LIMIT: usize = by_platform(4 << 30, 32 << 30, 1 << 40);
/// Bytes a region reserves at first on this platform (see above).
#[cfg(not(target_pointer_width = "64"))]
pub(crate) const REGION_RESERVE: usize = 8 << 20;
/// The most address space all reservations of the process may hold at once
/// (see above).
#[cfg(not(target_pointer_width = "64"))]
pub(crate) const RESERVE_LIMIT: usize = 1 << 30;

// 64 regions fit in half the limit, in whole pages at any page size.
const _: () = assert!(64 * REGION_RESERVE <= RESERVE_LIMIT / 2);
const _: () = assert!(REGION_RESERVE % MAX_PAGE_SIZE == 0);

/// A region's first reservation here: [`REGION_RESERVE`], or less where the
/// process's address space is limited (`ulimit -v`), so that 64 regions
/// still fit in the reservations' share of it.
pub(crate) fn region_reserve() -> usize {
    let share = PROCESS.limit() / 64 / MAX_PAGE_SIZE * MAX_PAGE_SIZE;
    REGION_RESERVE.min(share.max(MAX_PAGE_SIZE))
}

/// Address space reserved through one limit, counted without a lock.
#[derive(Debug)]
struct AddressSpace {
    reserved: AtomicUsize,
    limit: usize,
}

/// The process's reservations: at most [`RESERVE_LIMIT`].
static PROCESS: AddressSpace = AddressSpace::new(RESERVE_LIMIT);

impl AddressSpace {
    const fn new(limit: usize) -> Self {
        AddressSpace {
            reserved: AtomicUsize::new(0),
            limit,
        }
    }

    /// The limit, lowered to a quarter of the process's address-space limit
    /// (`ulimit -v`) if it has one, so that reservations never take what
    /// thread stacks, the heap and libraries need.
    fn limit(&self) -> usize {
        imp::address_space_limit().map_or(self.limit, |l| self.limit.min(l / 4))
    }

    /// Counts `bytes` more as reserved, unless that passes the limit.
    fn take(&self, bytes: usize) -> bool {
        let limit = self.limit();
        self.reserved
            .fetch_update(Relaxed, Relaxed, |r| {
                r.checked_add(bytes).filter(|&total| total <= limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.reserved.fetch_sub(bytes, Relaxed);
    }
}

/// The system (or the test hook, or [`RESERVE_LIMIT`]) said no.
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
    /// a huge page size is known). When refused, or past [`RESERVE_LIMIT`],
    /// retries at half the size, down to `at_least` rounded up to pages.
    /// `None` when even that is refused, or the platform has no reservations
    /// (callers fall back to heap blocks).
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
            // Every page the system has, so none faults on first use.
            for offset in (self.committed..to).step_by(system_page_size()) {
                // SAFETY: `offset < to`, now committed and writable; volatile
                // so the touch is not optimised away.
                unsafe { self.base.add(offset).write_volatile(0) };
            }
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

/// The calls the system sees, each checked for whole pages and open to the
/// test hook ([`crate::testing::refuse_system_calls`]) before the backend
/// makes it.
mod sys {
    use core::ptr::NonNull;

    use super::{SystemCall, imp, page_size, refused, reservations_refused, system_page_size};

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

    /// # Safety
    ///
    /// Exactly a range `reserve` returned, not yet released, with no
    /// reference into it live.
    pub(super) unsafe fn release(map: NonNull<u8>, len: usize) {
        check(map.as_ptr().addr(), len, system_page_size());
        // SAFETY: the caller's precondition.
        unsafe { imp::release(map, len) }
    }

    /// # Safety
    ///
    /// The range is memory this crate owns.
    pub(super) unsafe fn advise_huge_pages(start: NonNull<u8>, len: usize) {
        check(start.as_ptr().addr(), len, page_size());
        // SAFETY: the caller's precondition.
        unsafe { imp::advise_huge_pages(start, len) }
    }
}

/// One call's injected refusals on one thread: after `skip` more calls,
/// refuse `times` (`u32::MAX`: until cleared).
#[derive(Debug, Clone, Copy)]
struct Refusals {
    skip: u32,
    times: u32,
}

std::thread_local! {
    // Const-initialised and without a destructor: usable from any thread at
    // any time, late thread-local destructors included, never allocating.
    static REFUSALS: Cell<[Refusals; 3]> =
        const { Cell::new([Refusals { skip: 0, times: 0 }; 3]) };
}

fn slot(call: SystemCall) -> usize {
    match call {
        SystemCall::Reserve => 0,
        SystemCall::Commit => 1,
        SystemCall::Decommit => 2,
    }
}

/// Arms the test hook: see [`crate::testing::refuse_system_calls`].
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn refuse(call: SystemCall, skip: u32, times: u32) {
    // Fails only while this thread's locals are destroyed; nothing to arm then.
    let _ = REFUSALS.try_with(|r| {
        let mut all = r.get();
        all[slot(call)] = Refusals { skip, times };
        r.set(all);
    });
}

/// Whether the test hook refuses this `call` on this thread now.
fn refused(call: SystemCall) -> bool {
    REFUSALS
        .try_with(|r| {
            let mut all = r.get();
            let this = &mut all[slot(call)];
            let refuse = match *this {
                Refusals { times: 0, .. } => return false,
                Refusals { skip: 0, times } => {
                    if times != u32::MAX {
                        this.times -= 1;
                    }
                    true
                }
                Refusals { skip, .. } => {
                    this.skip = skip - 1;
                    false
                }
            };
            r.set(all);
            refuse
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_variable_is_a_power_of_two_from_the_system_page_to_1_mib() {
        let at = |value: &str, system| page_size_from(Some(value.as_bytes()), system);
        assert_eq!(page_size_from(None, 4096), 4096);
        for (value, page) in [
            ("16384", 16384),
            ("65536", 65536),
            ("4096", 4096),
            ("1048576", 1 << 20),
            // Below the system page, above 1 MiB, not a power of two: ignored.
            ("2048", 4096),
            ("2097152", 4096),
            ("12288", 4096),
            ("0", 4096),
            // Not a decimal number of bytes: ignored.
            ("", 4096),
            ("16K", 4096),
            (" 16384", 4096),
            ("+16384", 4096),
            ("0x4000", 4096),
            ("99999999999999999999999", 4096),
        ] {
            assert_eq!(at(value, 4096), page, "TEMPALLOC_PAGE_SIZE={value:?}");
        }
        assert_eq!(at("16384", 16384), 16384);
        assert_eq!(at("8192", 16384), 16384);
        assert_eq!(at("65536", 16384), 65536);
        assert_eq!(page_size_from(Some(&[0xFF]), 4096), 4096);
    }

    #[test]
    fn only_off_refuses_every_reservation() {
        assert!(reserve_off_from(b"off"));
        for value in ["", "on", "OFF", "off ", "0", "no", "false"] {
            assert!(
                !reserve_off_from(value.as_bytes()),
                "TEMPALLOC_RESERVE={value:?}"
            );
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
        // SAFETY: as above.
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
        assert_eq!(space.reserved.load(Relaxed), 8 * page + slack);
        // Two pages are left: a request for three is refused ...
        assert!(Mapping::reserve_in(space, 64 * page, 3 * page, false).is_none());
        assert_eq!(space.reserved.load(Relaxed), 8 * page + slack);
        // ... and one for two served.
        let second = reserve_in(space, 64 * page, 2 * page).unwrap();
        assert_eq!(second.reserved(), 2 * page);
        drop(first);
        assert_eq!(space.reserved.load(Relaxed), 2 * page + slack);
        drop(second);
        assert_eq!(space.reserved.load(Relaxed), 0);
    }
}
