//! The slow path of a request: everything the fast path (`mod.rs`) does
//! not serve — the first request of a thread in a window (take a lease), a
//! request that does not fit (move to idle room, or grow), a dedicated
//! request, every request with the debug checks on — and of
//! `resize_in_place` past the current chunk's room. Every entry is
//! `#[cold]`, so the fast path only calls it.

use core::alloc::Layout;
use core::ptr::NonNull;

use super::debug::{CANARY_LEN, DebugState};
use super::lease;
use super::region::{Extend, FREE, Leased, Region};
use super::{CachingAllocator, LockedState, exclusive, regions};
use crate::Error;
use crate::os::page_size;
use crate::temp::dangling;

impl CachingAllocator {
    /// [`resize_in_place`](TempAllocator::resize_in_place) when the current
    /// chunk is `more` bytes short past the cursor: commits them in place
    /// if its reservation holds them, then extends.
    #[cold]
    #[inline(never)]
    pub(super) fn extend_slow(
        &self,
        region: &mut Leased,
        ptr: NonNull<u8>,
        old: usize,
        new_size: usize,
        more: usize,
        state: Option<&mut LockedState>,
    ) -> bool {
        let Ok(layout) = Layout::from_size_align(more, 1) else {
            return false;
        };
        if !region.need(layout, &self.config).in_place() {
            return false;
        }
        let grown = self.grow(region, layout, state);
        grown.is_ok() && matches!(region.extend(ptr.as_ptr(), old, new_size), Extend::Done)
    }

    /// [`resize_in_place`](TempAllocator::resize_in_place) with the debug
    /// checks on: the canary moves with the end, under the lock, and only
    /// an intact one (a damaged canary stays for the reset to report).
    #[cold]
    #[inline(never)]
    pub(super) fn resize_checked(&self, ptr: NonNull<u8>, old: usize, new_size: usize) -> bool {
        let (_, region) = lease::leased();
        // SAFETY: `resize_in_place` checked that the calling thread's token is
        // this window's, so it leases the region it remembers (see
        // `lease::leased`), alive while `&self` is; this call holds no other
        // guard of it.
        let mut region = unsafe { Leased::new(&*region) };
        let mut state = self.lock();
        let Some(canary) = state.debug.intact(ptr, old) else {
            return false;
        };
        // No overflow: a carving with its canary fits in `isize::MAX`, and
        // so does `new_size` (a `Layout` size) plus the canary.
        let (old_padded, new_padded) = (old + CANARY_LEN, new_size.saturating_add(CANARY_LEN));
        let extended = match region.extend(ptr.as_ptr(), old_padded, new_padded) {
            Extend::Done => true,
            Extend::NotNewest => false,
            Extend::NoRoom(more) => self.extend_slow(
                &mut region,
                ptr,
                old_padded,
                new_padded,
                more,
                Some(&mut state),
            ),
        };
        if extended {
            state.debug.resized(canary, new_size);
        }
        extended
    }

    /// Everything the fast path cannot serve: a request that does not fit,
    /// the first in a window, a dedicated request, every request with the
    /// debug checks on.
    #[cold]
    #[inline(never)]
    pub(super) fn allocate_slow(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if self.config.debug_checks {
            return self.allocate_checked(layout);
        }
        if layout.size() >= self.config.dedicated_from() {
            return self.allocate_dedicated(&mut self.lock(), layout, 0);
        }
        let region = self.lease(layout)?;
        self.bump_or_grow(region, layout, None).map(|(ptr, _)| ptr)
    }

    /// The calling thread's region for this window: the one it last leased
    /// if that is free or still its own (lock-free), else, under the lock,
    /// the FREE region that holds the most, or a new one.
    fn lease(&self, layout: Layout) -> Result<Leased<'_>, Error> {
        let (last, thread) = lease::last_lease(self.id);
        let region = match last {
            Some(last) if self.region(last).lease(thread) => last,
            _ => {
                let mut state = self.lock();
                let count = state.regions.len();
                let region = lease::lease_any(&mut state.regions, thread)
                    .ok_or_else(|| Error::out_of_memory(layout))?;
                if state.regions.len() != count {
                    // A region made: the short reset knows only one.
                    self.no_short_reset();
                }
                region
            }
        };
        lease::record(self.header.window, self.id, region);
        // SAFETY: the calling thread leases `region` (`Region::lease` or
        // `lease_any` said so), a region of this allocator, and holds no
        // other guard of it: a guard lives only in the call that made it.
        Ok(unsafe { Leased::new(self.region(region)) })
    }

    /// Carves `layout` from `region`, or from a FREE region with the room
    /// if nothing is in `region` yet (or it reached the region cap), else
    /// grows `region` first. Returns the region that served it too.
    /// `state` is the lock's guard if the caller holds it.
    fn bump_or_grow<'r>(
        &'r self,
        mut region: Leased<'r>,
        layout: Layout,
        mut state: Option<&mut LockedState>,
    ) -> Result<(NonNull<[u8]>, Leased<'r>), Error> {
        if let Some(ptr) = region.bump(layout) {
            return Ok((ptr, region));
        }
        if layout.size() == 0 {
            // A region without a chunk: nothing to carve, but a request.
            region.count_request(0);
            return Ok((dangling(layout), region));
        }
        // Memory follows the work: a thread with nothing in its region yet
        // moves to room committed and idle this window before the region
        // grows, and so does one whose region reached the region cap. (One
        // with scratch in it otherwise grows: the room it would take is a
        // region the next kernel's threads need.) Not under a limit, whose
        // rule counts on each thread growing its own region (README,
        // `max_bytes`): there the budget rule reclaims idle room instead.
        let limited = self.account().limited();
        // On reservations only: a heap region chains blocks and keeps
        // one at a reset, which moving on would undo every window.
        let capped =
            (self.config.region_cap).is_some_and(|cap| region.held() >= cap) && region.is_mapped();
        if !limited && (capped || region.is_empty()) {
            region = match state.as_deref_mut() {
                Some(state) => self.move_on(state, region, layout)?,
                None => self.move_on(&mut self.lock(), region, layout)?,
            };
            if let Some(ptr) = region.bump(layout) {
                return Ok((ptr, region));
            }
        }
        self.grow(&mut region, layout, state)?;
        let ptr = region
            .bump(layout)
            .ok_or_else(|| Error::out_of_memory(layout))?;
        Ok((ptr, region))
    }

    /// For a `region` that cannot serve `layout`: the smallest FREE region
    /// whose committed room serves it now — and, if nothing is in `region`,
    /// holds `peak` (what `region` would grow to: the most its thread used
    /// in one window), so larger rooms stay for larger needs — leased to the
    /// calling thread in its place. An empty `region` becomes FREE; one
    /// with scratch in it (at the region cap) stays the thread's until the
    /// window ends. Past the cap with no such FREE region, a new region;
    /// an empty `region` with none stays. A thread whose share of the work
    /// grew takes memory another thread left idle before anything is
    /// committed.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when there is no memory for a new region's
    /// record.
    #[cold]
    fn move_on<'r>(
        &'r self,
        state: &mut LockedState,
        mut region: Leased<'r>,
        layout: Layout,
    ) -> Result<Leased<'r>, Error> {
        let empty = region.is_empty();
        let peak = if empty { region.parts().1.peak } else { 0 };
        let (_, thread) = lease::last_lease(self.id);
        let serves = |r: &&Region| r.is_leased_to(FREE) && r.fits(layout) && r.room() >= peak;
        let idle = lease::first(thread, || {
            regions(&state.regions)
                .filter(serves)
                .min_by_key(|r| r.room())
        });
        let next = match idle {
            Some(idle) => NonNull::from(idle),
            None if empty => return Ok(region),
            None => {
                self.no_short_reset();
                lease::lease_new(&mut state.regions, thread)
                    .ok_or_else(|| Error::out_of_memory(layout))?
            }
        };
        if empty {
            region.unlease(FREE);
        }
        lease::record(self.header.window, self.id, next);
        // SAFETY: the calling thread just leased `next`, a region of this
        // allocator (a FREE one, or one it made), and holds no other guard
        // of it: its one guard was of `region`, another region, and is gone.
        Ok(unsafe { Leased::new(self.region(next)) })
    }

    /// The frame's thread takes the region that holds the most, when
    /// nothing is live: what an inference keeps for its whole length lands
    /// in one region whichever thread runs the frame (a rayon worker, the
    /// caller), instead of one copy per thread that ever ran one. The other
    /// regions become FREE, for the frame's kernels' threads.
    pub(super) fn adopt_largest(&mut self) {
        let (state, _) = exclusive(&mut self.core, self.reachable);
        let quiet = state.open.is_empty() && state.dedicated.is_empty();
        let (last, thread) = lease::last_lease(self.id);
        let largest = regions(&state.regions).max_by_key(|r| r.held());
        let Some(largest) = largest.filter(|_| quiet) else {
            return;
        };
        if last == Some(NonNull::from(largest)) && largest.is_leased_to(thread)
            || regions(&state.regions).any(|r| !r.is_empty())
        {
            return;
        }
        // Leases change: a new window, so no thread's fast path reaches a
        // region through the token it leased it under.
        let window = self.windows.next(&mut self.header.window);
        for region in regions(&state.regions) {
            // SAFETY: `&mut self`: no thread holds a guard of the region or
            // can make one, and this is its one guard.
            unsafe { Leased::new(region) }.unlease(FREE);
        }
        let leased = largest.lease(thread);
        debug_assert!(leased, "every region was just made FREE, under `&mut self`");
        lease::record(window, self.id, NonNull::from(largest));
    }

    /// A chunk of its own for a request at or above the dedicated threshold,
    /// with `extra` bytes of room after it (for a canary).
    fn allocate_dedicated(
        &self,
        state: &mut LockedState,
        layout: Layout,
        extra: usize,
    ) -> Result<NonNull<[u8]>, Error> {
        self.no_short_reset();
        state
            .dedicated
            .try_reserve(1)
            .map_err(|_| Error::out_of_memory(layout))?;
        // No overflow: `extra` is 0 or a canary the layout was checked to hold.
        let need = layout.size() + layout.align().saturating_sub(page_size()) + extra;
        // Exactly what it needs, so that giving it back frees it all.
        let reserve = self.config.reserve.map(|_| need);
        let chunk = self
            .account()
            .take(need, need, reserve, self.config.block, layout)?;
        let pad = chunk.base().as_ptr().addr().wrapping_neg() & (layout.align() - 1);
        // SAFETY: `pad < align`, and the chunk holds `size + extra + align -
        // page` usable bytes from a page-aligned start, so `pad + size +
        // extra` fits.
        let ptr = unsafe { chunk.base().add(pad) };
        state.dedicated.push((chunk, layout.size()));
        state.totals.allocations += 1;
        state.totals.bytes_requested += layout.size() as u64;
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    /// Every request when the debug checks are on: carved, with a canary
    /// after it, from the thread's region (or a dedicated chunk), and
    /// recorded under the lock.
    #[cold]
    #[inline(never)]
    fn allocate_checked(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if layout.size() == 0 {
            // Nothing to overflow into: a dangling pointer, counted.
            self.lock().totals.allocations += 1;
            return Ok(dangling(layout));
        }
        let padded =
            DebugState::padded(layout).map_err(|e| self.account().past_any_size(layout, e))?;
        let dedicated = layout.size() >= self.config.dedicated_from();
        // Leased before the lock is taken: leasing may take it.
        let region = if dedicated {
            None
        } else {
            Some(self.lease(padded)?)
        };
        let mut state = self.lock();
        state.debug.reserve(layout)?;
        let ptr = match region {
            None => self
                .allocate_dedicated(&mut state, layout, CANARY_LEN)?
                .cast(),
            Some(region) => {
                let carved = self.bump_or_grow(region, padded, Some(&mut state));
                let (ptr, mut region) = carved.map_err(|e| e.for_request(layout))?;
                // The region counted the canary as requested; the caller did not.
                region.count_request(-(CANARY_LEN as isize));
                ptr.cast()
            }
        };
        state.debug.record(ptr, layout.size());
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }
}
