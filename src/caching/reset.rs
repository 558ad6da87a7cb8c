//! The full path of a reset (the short one is in `mod.rs`), and what gives
//! memory back between inferences: the retain cap, [`release`] and
//! [`trim`].
//!
//! [`release`]: CachingAllocator::release
//! [`trim`]: CachingAllocator::trim

use core::ptr::{self, NonNull};
use std::sync::atomic::Ordering::Relaxed;

#[cfg(doc)]
use super::CachingConfig;
use super::account::Books;
use super::lease;
use super::region::{FREE, Leased};
use super::{CachingAllocator, exclusive, regions};
use crate::TempAllocator;

impl CachingAllocator {
    /// Resets, then gives all memory back to the cache, which keeps it idle
    /// within its budget or frees it: resident memory falls. For memory
    /// pressure; the next request takes memory again.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// KernelContext::new(&temp).scratch::<u8>(1 << 20)?;
    /// temp.release();
    /// assert_eq!(temp.stats().bytes_held, 0);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn release(&mut self) {
        self.reset();
        // After a reset: nothing in use.
        self.each_region(|mut region, books| region.shed(books, None));
    }

    /// Gives back the pages no scratch uses now, keeping every region's
    /// address range: resident memory falls to what is live, and every region
    /// forgets the most it ever used, growing to what its thread uses from
    /// now on. For a memory warning between inferences. A page the system
    /// refuses to decommit stays counted as held. On heap blocks (where
    /// nothing can be reserved, see [`CachingConfig::reserve`]) a region's
    /// current block stays whole, and only the blocks after it go.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// KernelContext::new(&temp).scratch::<u8>(4 << 20)?;
    /// temp.reset();
    /// temp.trim();
    /// assert!(temp.stats().bytes_held < 4 << 20); // where regions are reserved
    /// KernelContext::new(&temp).scratch::<u8>(4 << 20)?; // still served
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn trim(&mut self) {
        self.each_region(|mut region, books| region.trim(books));
    }

    /// Runs `f` on every region with its guard, and the books, under
    /// `&mut self`.
    fn each_region(&mut self, mut f: impl FnMut(Leased<'_>, &Books)) {
        let (shared, books) = exclusive(&mut self.core, self.reachable);
        for region in regions(&shared.regions) {
            // SAFETY: `&mut self` (and the lock, if other allocators can
            // reach this one): no thread holds a guard of the region or can
            // make one, and the list holds each region once, so this is its
            // one guard.
            f(unsafe { Leased::new(region) }, books);
        }
    }

    /// `reset` when it cannot take the short path: several regions (or
    /// none), a region to settle, the debug checks, a retain cap, dedicated
    /// chunks or checkpoints, or the first reset after a growth.
    #[inline(never)]
    pub(super) fn reset_all(&mut self) {
        let (mut guard, books) = exclusive(&mut self.core, self.reachable);
        let shared = &mut *guard;
        if self.config.debug_checks {
            // Before any chunk goes back: the memory is still ours to poison.
            self.totals.canary_violations += shared.debug.recycle(0);
        }
        let mut live = shared.dedicated_live();
        // The new window first: no thread's old token may lead into a region
        // this loop frees, even if something in it panicked.
        let window = self.window.next();
        // Where other sessions may take idle memory back, every region is
        // FREE between inferences: the resetting thread keeps none.
        let (mine, me) = if self.reachable {
            (None, FREE)
        } else {
            lease::renew(self.id, window)
        };
        for region in regions(&shared.regions) {
            let next = if mine == Some(NonNull::from(region)) {
                me
            } else {
                FREE
            };
            // SAFETY: `&mut self` (and the lock, if other allocators can
            // reach this one): no thread holds a guard of the region or can
            // make one, and this is its one guard.
            let mut region = unsafe { Leased::new(region) };
            live += region.reset(false, &mut self.totals);
            region.settle(books);
            region.unlease(next);
        }
        shared.free_dedicated(0, books);
        shared.open.clear();
        shared.marks.clear();
        let high = core::mem::take(&mut shared.window_high).max(live);
        self.totals.end_window(high);
        // Every region settled, no dedicated chunk, no checkpoint: with one
        // region, the next reset may take the short path.
        let plain = !self.config.debug_checks && self.config.retain.is_none() && !self.reachable;
        let short = match shared.regions[..] {
            [only] if plain => only.as_ptr(),
            _ => ptr::null_mut(),
        };
        *self.short_reset.get_mut() = short;
        drop(guard);
        if let Some(cap) = self.config.retain {
            self.retain(cap);
        }
    }

    /// Sends the next reset down the full path: the regions, their chunks,
    /// the dedicated chunks or the checkpoints may change. Loads first, so
    /// threads growing at once (with several regions) only read the line.
    pub(super) fn no_short_reset(&self) {
        if !self.short_reset.load(Relaxed).is_null() {
            self.short_reset.store(ptr::null_mut(), Relaxed);
        }
    }

    /// The retain cap, after a reset: the largest regions give back what is
    /// held above `cap`, largest first.
    #[cold]
    #[inline(never)]
    fn retain(&mut self, cap: usize) {
        let (shared, books) = exclusive(&mut self.core, self.reachable);
        for _ in 0..shared.regions.len() {
            let excess = books.ledger.held().saturating_sub(cap);
            let largest = regions(&shared.regions)
                .filter(|r| r.held() != 0)
                .max_by_key(|r| r.held());
            let Some(region) = largest.filter(|_| excess > 0) else {
                break;
            };
            // SAFETY: `&mut self`: no thread holds a guard of the region or
            // can make one, and this is its one guard.
            let mut region = unsafe { Leased::new(region) };
            // After a reset: nothing in use.
            region.shed(books, Some(region.held().saturating_sub(excess)));
        }
    }
}
