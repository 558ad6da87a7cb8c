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
use super::account::Account;
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
        self.each_region(|mut region, account| region.give_back(account, None));
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
    /// if temp.cache().stats().reservations > 0 {
    ///     assert!(temp.stats().bytes_held < 4 << 20); // the pages went back
    /// } // on heap blocks the block stays whole
    /// KernelContext::new(&temp).scratch::<u8>(4 << 20)?; // still served
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn trim(&mut self) {
        self.each_region(|mut region, account| region.trim(account));
    }

    /// Runs `f` on every region with its guard, and the account, under
    /// `&mut self`.
    fn each_region(&mut self, mut f: impl FnMut(Leased<'_>, &Account)) {
        let (state, account) = exclusive(&mut self.core, self.reachable);
        for region in regions(&state.regions) {
            // SAFETY: `&mut self` (and the lock, if other allocators can
            // reach this one): no thread holds a guard of the region or can
            // make one, and the list holds each region once, so this is its
            // one guard.
            f(unsafe { Leased::new(region) }, account);
        }
    }

    /// `reset` when it cannot take the short path: several regions (or
    /// none), a region with several chunks, the debug checks, a retain cap, dedicated
    /// chunks or checkpoints, or the first reset after a growth.
    #[inline(never)]
    pub(super) fn reset_all(&mut self) {
        let (mut guard, account) = exclusive(&mut self.core, self.reachable);
        let state = &mut *guard;
        if self.config.debug_checks {
            // Before any chunk goes back: the memory is still ours to poison.
            self.totals.canary_violations += state.debug.recycle(0);
        }
        let mut live = state.dedicated_live();
        // The new window first: no thread's old token may lead into a region
        // this loop frees, even if something in it panicked.
        let window = self.windows.next(&mut self.header.window);
        // Where other sessions may take idle memory back, every region is
        // FREE between inferences: the resetting thread keeps none.
        let (last, thread) = if self.reachable {
            (None, FREE)
        } else {
            lease::carry_over(self.id, window)
        };
        for region in regions(&state.regions) {
            let next = if last == Some(NonNull::from(region)) {
                thread
            } else {
                FREE
            };
            // SAFETY: `&mut self` (and the lock, if other allocators can
            // reach this one): no thread holds a guard of the region or can
            // make one, and this is its one guard.
            let mut region = unsafe { Leased::new(region) };
            live += region.reset(false, &mut self.totals);
            region.keep_one_chunk(account);
            region.unlease(next);
        }
        state.free_dedicated(0, account);
        state.open.clear();
        state.marks.clear();
        let high = core::mem::take(&mut state.window_high).max(live);
        self.totals.end_window(high);
        // Every region down to one chunk, no dedicated chunk, no checkpoint: with one
        // region, the next reset may take the short path.
        let short_allowed =
            !self.config.debug_checks && self.config.retain.is_none() && !self.reachable;
        let short = match state.regions[..] {
            [only] if short_allowed => only.as_ptr(),
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
        let (state, account) = exclusive(&mut self.core, self.reachable);
        for _ in 0..state.regions.len() {
            let excess = account.ledger.held().saturating_sub(cap);
            let largest = regions(&state.regions)
                .filter(|r| r.held() != 0)
                .max_by_key(|r| r.held());
            let Some(region) = largest.filter(|_| excess > 0) else {
                break;
            };
            // SAFETY: `&mut self`: no thread holds a guard of the region or
            // can make one, and this is its one guard.
            let mut region = unsafe { Leased::new(region) };
            // After a reset: nothing in use.
            region.give_back(account, Some(region.held().saturating_sub(excess)));
        }
    }
}
