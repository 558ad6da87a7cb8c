//! The reservation policy: how much address space reservations may take on
//! each platform. The sizes per platform ([`REGION_RESERVE`],
//! [`RESERVE_LIMIT`]), a region's first reservation where `ulimit -v` limits
//! the process ([`region_reserve`]), and the count of what the process holds
//! against the limit ([`AddressSpace`], [`PROCESS`]). The limit of
//! `ulimit -v` is read from the system once per process.
//!
//! Beside the backends rather than in each: one table of sizes (below) says
//! why each platform gets what it gets, and the 32-bit row spans them all.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use super::imp;
use super::parse::MAX_PAGE_SIZE;

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

/// The process's address-space limit (`RLIMIT_AS`, `ulimit -v`), if any:
/// asked of the system once per process, at the first reservation or the
/// first [`region_reserve`], and kept, so that neither makes a system call
/// after that. A limit the process changes later is not seen (none of this
/// crate's callers changes it; a test sets `ulimit -v` before it starts).
fn address_space_limit() -> Option<usize> {
    static LIMIT: OnceLock<Option<usize>> = OnceLock::new();
    *LIMIT.get_or_init(imp::address_space_limit)
}

/// Address space reserved through one limit, counted without a lock.
#[derive(Debug)]
pub(super) struct AddressSpace {
    reserved: AtomicUsize,
    limit: usize,
}

/// The process's reservations: at most [`RESERVE_LIMIT`].
pub(super) static PROCESS: AddressSpace = AddressSpace::new(RESERVE_LIMIT);

impl AddressSpace {
    /// A count of nothing reserved, under `limit` bytes.
    pub(super) const fn new(limit: usize) -> Self {
        AddressSpace {
            reserved: AtomicUsize::new(0),
            limit,
        }
    }

    /// The limit, lowered to a quarter of the process's address-space limit
    /// (`ulimit -v`) if it has one, so that reservations never take what
    /// thread stacks, the heap and libraries need.
    fn limit(&self) -> usize {
        address_space_limit().map_or(self.limit, |l| self.limit.min(l / 4))
    }

    /// Counts `bytes` more as reserved, unless that passes the limit.
    pub(super) fn take(&self, bytes: usize) -> bool {
        let limit = self.limit();
        self.reserved
            .fetch_update(Relaxed, Relaxed, |r| {
                r.checked_add(bytes).filter(|&total| total <= limit)
            })
            .is_ok()
    }

    /// Counts `bytes` fewer as reserved: what [`take`](Self::take) counted
    /// for a reservation now released (or never made).
    pub(super) fn give_back(&self, bytes: usize) {
        self.reserved.fetch_sub(bytes, Relaxed);
    }

    /// Bytes counted as reserved now.
    #[cfg(test)]
    pub(super) fn reserved(&self) -> usize {
        self.reserved.load(Relaxed)
    }
}
