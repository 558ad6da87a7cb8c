//! [`CachingAllocator`]: the product. A region per thread that grows in
//! place; reset and rewind in a few stores per thread; one shared budget.
//!
//! The files, one concern each: `region.rs` (one thread's bump range and its
//! chunks), `threads.rs` (which region a thread uses), `checkpoint.rs`
//! (checkpoints and rewinds), `debug.rs` (canaries and poison), `config.rs`.

mod checkpoint;
mod config;
mod debug;
mod region;
mod threads;

use core::alloc::Layout;
use core::fmt;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use checkpoint::Checkpoint;
pub use config::CachingConfig;

use crate::block::size_class;
use crate::block_cache::{BlockCache, ChunkOptions, Taken};
use crate::chunk::Chunk;
use crate::os::{Mapping, page_size};
use crate::temp::dangling;
use crate::{Error, Stats, TempAllocator};
pub(crate) use checkpoint::NESTED_CHECKPOINTS;
use checkpoint::Open;
use debug::{CANARY_LEN, DebugState};
use region::{Folded, Region, growth};
use threads::{Claimed, Regions};

/// Ids that tell allocators apart, so a checkpoint cannot be used on another.
static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(0);

/// The caching temp allocator: what a runtime should use.
///
/// Every thread that allocates gets a *region* of its own (there is no cap
/// on the thread count), so a request is a handful of instructions with no
/// lock and no atomic read-modify-write, and threads never contend. A region
/// reserves a large range of address space and commits pages as its cursor
/// first passes them, so it grows in place: no chain of blocks, no copy, and
/// after warm-up no system call. [`reset`](TempAllocator::reset) rewinds every
/// region to its start, so after warm-up an inference makes **zero** system
/// allocations, and what the allocator holds — what the system keeps resident
/// for it — stays within 12.5% (plus 16 KiB) of the most each thread used in
/// one window, from the first inference on. Where address space cannot be
/// reserved (Miri, `ulimit -v`, systems other than Unix), regions use heap
/// blocks sized to their peak instead.
///
/// [`checkpoint`](CachingAllocator::checkpoint) and
/// [`rewind`](CachingAllocator::rewind) recycle one kernel's scratch while
/// scratch taken earlier in the inference stays put.
///
/// ```
/// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
///
/// let mut temp = CachingAllocator::new();
/// for _inference in 0..3 {
///     let ctx = KernelContext::new(&temp);
///     let tile = ctx.scratch::<f32>(64 * 64)?;
///     tile[0] = 1.0;
///     temp.reset();
/// }
/// // The first request took memory once; the later inferences reused it.
/// assert_eq!(temp.stats().system_allocations, 1);
/// # Ok::<(), tempalloc::Error>(())
/// ```
pub struct CachingAllocator {
    /// Each thread's region; the fast path's only lookup.
    regions: Regions,
    /// Requests of at least this many bytes get a chunk of their own
    /// (`usize::MAX`: none do).
    dedicated_from: usize,
    /// The region the debug checks carve every request from, under the lock.
    locked: Region,
    shared: Mutex<Shared>,
    cache: Arc<BlockCache>,
    config: CachingConfig,
    id: u64,
}

/// Everything the slow path changes, under the lock.
#[derive(Default)]
pub(super) struct Shared {
    /// Proof of holding the lock, for [`Region::cold`].
    token: Locked,
    /// Every region made so far.
    claimed: Claimed,
    totals: Totals,
    /// Chunks taken over from parked regions, or that a rewind took back,
    /// for the next region that needs one in this window. A reset gives
    /// them to regions that outgrew their chunks, or back to the cache.
    spare: Vec<Chunk>,
    /// Chunks a reset or rewind takes off the regions, on their way to the
    /// cache or the spares: kept between calls so that they do not allocate.
    loose: Vec<Chunk>,
    /// Chunks of requests above the dedicated threshold, with their sizes.
    dedicated: Vec<(Chunk, usize)>,
    /// Bytes requested in `dedicated`.
    dedicated_live: usize,
    /// Checkpoints not yet rewound, outermost first.
    open: Vec<Open>,
    next_serial: u64,
    /// Canaries of the allocations since the last reset (debug checks only).
    debug: DebugState,
    /// The most bytes live at once in this window so far.
    window_high: usize,
}

/// The allocator's lock is held by whoever can borrow this mutably.
#[derive(Default)]
pub(super) struct Locked(());

/// Counters of what is done, folded in at resets and rewinds (the regions
/// count their own requests in between).
#[derive(Debug, Default)]
struct Totals {
    allocations: u64,
    bytes_requested: u64,
    resets: u64,
    system_allocations: u64,
    system_frees: u64,
    bytes_held: usize,
    high_water: usize,
    /// The most bytes live at once in the window the last reset ended.
    last_window_high: usize,
    cache_hits: u64,
    cache_misses: u64,
    canary_violations: u64,
}

impl Totals {
    /// Adds what a region folded; returns the bytes it had live.
    fn fold(&mut self, folded: Folded) -> usize {
        self.allocations += folded.allocations;
        self.bytes_requested += folded.bytes_requested;
        folded.live
    }
}

impl Default for CachingAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl CachingAllocator {
    /// An allocator with the default [`CachingConfig`] and a cache of its own.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, TempAllocator};
    ///
    /// assert_eq!(CachingAllocator::new().stats().bytes_held, 0);
    /// ```
    pub fn new() -> Self {
        Self::with_config(CachingConfig::default())
    }

    /// An allocator with `config` and a cache of its own, limited by the
    /// config's [`idle_budget`](CachingConfig::idle_budget) and
    /// [`max_bytes`](CachingConfig::max_bytes).
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext};
    ///
    /// let temp = CachingAllocator::with_config(CachingConfig::default().max_bytes(Some(1 << 20)));
    /// let ctx = KernelContext::new(&temp);
    /// assert!(matches!(ctx.scratch::<u8>(4 << 20), Err(Error::BudgetExceeded { .. })));
    /// ```
    pub fn with_config(config: CachingConfig) -> Self {
        let cache = BlockCache::with_limits(config.idle_budget, config.max_bytes);
        Self::with_cache(Arc::new(cache), config)
    }

    /// An allocator that takes and gives back its memory through `cache`,
    /// shared with other allocators (one per session or model) under the
    /// cache's limits.
    ///
    /// The limits are the cache's: the config's
    /// [`idle_budget`](CachingConfig::idle_budget) and
    /// [`max_bytes`](CachingConfig::max_bytes) are **not used** here (make
    /// the cache with [`BlockCache::with_limits`] instead). Every other
    /// setting of `config` applies.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig};
    ///
    /// let cache = Arc::new(BlockCache::with_limits(0, Some(32 << 20)));
    /// let a = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
    /// let b = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
    /// assert!(Arc::ptr_eq(a.cache(), b.cache()));
    /// ```
    pub fn with_cache(cache: Arc<BlockCache>, config: CachingConfig) -> Self {
        let id = NEXT_ALLOCATOR_ID.fetch_add(1, Relaxed);
        CachingAllocator {
            regions: Regions::new(id),
            dedicated_from: config.dedicated_threshold.unwrap_or(usize::MAX),
            // Like every allocation a constructor makes (the lock, the
            // cache's `Arc`), a failure here is the global allocator's error.
            locked: Region::try_new()
                .unwrap_or_else(|| std::alloc::handle_alloc_error(Layout::new::<region::Cold>())),
            shared: Mutex::new(Shared {
                open: Vec::with_capacity(NESTED_CHECKPOINTS),
                ..Shared::default()
            }),
            cache,
            config,
            id,
        }
    }

    /// The cache behind this allocator.
    ///
    /// ```
    /// let temp = tempalloc::CachingAllocator::new();
    /// assert_eq!(temp.cache().idle_bytes(), 0);
    /// ```
    pub fn cache(&self) -> &Arc<BlockCache> {
        &self.cache
    }

    /// The configuration this allocator was made with.
    ///
    /// ```
    /// let temp = tempalloc::CachingAllocator::new();
    /// assert_eq!(temp.config().min_block_size, 64 << 10);
    /// ```
    pub fn config(&self) -> &CachingConfig {
        &self.config
    }

    /// Resets, then gives all memory back to the cache, which keeps it idle
    /// within its budget or frees it (unmapping it: resident memory falls).
    /// For memory pressure; the next request takes memory again.
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
        self.each_region(|region, locked, _, loose| {
            region.release(locked, loose);
            Folded::default()
        });
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        shared.loose.append(&mut shared.spare);
        shared.give_back_loose(&self.cache);
    }

    /// Gives back to the system the pages no scratch uses now, while every
    /// region keeps its address range: resident memory falls to what is live
    /// (nothing, right after a reset), and the next window commits pages
    /// again as it needs them: every region forgets the most it ever used,
    /// so it grows to what its thread uses from now on. Idle spare memory
    /// goes back to the cache. For
    /// a memory warning between inferences, when the next inference should
    /// still be cheap to start.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// KernelContext::new(&temp).scratch::<u8>(4 << 20)?;
    /// temp.reset();
    /// temp.trim();
    /// assert!(temp.stats().bytes_held < 4 << 20);
    /// KernelContext::new(&temp).scratch::<u8>(4 << 20)?; // still served
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    pub fn trim(&mut self) {
        let cache = Arc::clone(&self.cache);
        let (mut bytes, mut calls) = (0, 0);
        self.each_region(|region, locked, _, _| {
            let freed = region.trim(locked, &cache);
            bytes += freed;
            calls += u64::from(freed != 0);
            Folded::default()
        });
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        shared.totals.bytes_held -= bytes;
        shared.totals.system_frees += calls;
        shared.loose.append(&mut shared.spare);
        shared.give_back_loose(&self.cache);
    }

    /// Checks the canary after every allocation since the last reset, when
    /// [`CachingConfig::debug_checks`] is on: a kernel that wrote past the
    /// end of its scratch is reported here (and at the next reset, and in
    /// [`Stats::canary_violations`]) instead of silently corrupting its
    /// neighbour. Always `Ok` with the checks off.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, CachingConfig, KernelContext};
    ///
    /// let temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(true));
    /// KernelContext::new(&temp).scratch::<f32>(16)?;
    /// assert_eq!(temp.check(), Ok(()));
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::CanaryCorrupted`] for the first allocation whose canary
    /// changed, with its address, size and the first changed byte.
    pub fn check(&self) -> Result<(), Error> {
        if !self.config.debug_checks {
            return Ok(());
        }
        let mut shared = self.lock();
        let (new, first) = shared.debug.check();
        shared.totals.canary_violations += new;
        first.map_or(Ok(()), Err)
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Nothing panics while the lock is held, and the slow path leaves
        // `Shared` consistent at every early return, so poison is ignored.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How new memory is taken: reservations of the configured size (no
    /// larger than the hard limit), or heap blocks.
    fn chunk_options(&self, at_least: usize) -> ChunkOptions {
        let reserve = self.config.reserve.map(|bytes| {
            let bytes = match self.cache.max_bytes() {
                Some(limit) => bytes.min(limit),
                None => bytes,
            };
            bytes.max(at_least)
        });
        ChunkOptions {
            block: self.config.block,
            reserve,
        }
    }

    /// Everything the fast path cannot serve: a thread's first request, a
    /// request that does not fit, a dedicated request, every request with
    /// the debug checks on.
    #[cold]
    #[inline(never)]
    fn allocate_slow(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        if let Some(region) = self.regions.get() {
            // SAFETY: `Regions::get` returned the calling thread's own region.
            if unsafe { region.unpark() } && layout.size() < self.dedicated_from {
                // SAFETY: as above.
                if let Some(ptr) = unsafe { region.bump(layout) } {
                    return Ok(NonNull::slice_from_raw_parts(ptr, layout.size()));
                }
            }
        }
        let mut shared = self.lock();
        if self.config.debug_checks {
            return self.allocate_checked(&mut shared, layout);
        }
        if layout.size() >= self.dedicated_from {
            return self.allocate_dedicated(&mut shared, layout, 0);
        }
        let Shared { claimed, token, .. } = &mut *shared;
        let Some(region) = self.regions.claim(claimed, token) else {
            if threads::exiting() {
                // A thread-local destructor, after the thread's number went
                // to the next thread: no region is this thread's any more,
                // but a chunk of its own (freed at the reset) is.
                if layout.size() == 0 {
                    shared.totals.allocations += 1;
                    return Ok(dangling(layout));
                }
                return self.allocate_dedicated(&mut shared, layout, 0);
            }
            return Err(Error::out_of_memory(layout));
        };
        // SAFETY: `claim` returned the calling thread's own region. A thread
        // that had no id before `claim` may have been given an exited
        // thread's region, parked: it must be taken back before it grows,
        // or another thread could take it over while this one bumps in it.
        unsafe {
            region.unpark();
            self.bump_or_grow(&mut shared, region, layout)
        }
    }

    /// Carves `layout` from `region`, growing it first if it is full.
    ///
    /// # Safety
    ///
    /// As for [`Region::bump`]: `region` is the calling thread's own, or the
    /// locked region (the caller holds the lock: it passes `shared`).
    unsafe fn bump_or_grow(
        &self,
        shared: &mut Shared,
        region: &Region,
        layout: Layout,
    ) -> Result<NonNull<[u8]>, Error> {
        // SAFETY: the caller's contract.
        if let Some(ptr) = unsafe { region.bump(layout) } {
            return Ok(NonNull::slice_from_raw_parts(ptr, layout.size()));
        }
        if layout.size() == 0 {
            // Nothing to carve (a region without a chunk): counted, served.
            shared.totals.allocations += 1;
            return Ok(dangling(layout));
        }
        self.grow(shared, region, layout)?;
        // SAFETY: the caller's contract.
        match unsafe { region.bump(layout) } {
            Some(ptr) => Ok(NonNull::slice_from_raw_parts(ptr, layout.size())),
            None => Err(Error::out_of_memory(layout)),
        }
    }

    /// Makes room for `layout` in `region`: commits more of its reservation,
    /// or moves it to a new chunk (a spare one, or one from the cache). Under
    /// a limit, when the cache refuses and giving back the chunks parked in
    /// other regions and the spares would make room, it gives them back and
    /// tries again.
    fn grow(&self, shared: &mut Shared, region: &Region, layout: Layout) -> Result<(), Error> {
        match self.try_grow(shared, region, layout) {
            Err(Error::BudgetExceeded { held, limit, .. })
                if self.reclaim(shared, region, layout, limit.saturating_sub(held)) =>
            {
                self.try_grow(shared, region, layout)
            }
            grown => grown,
        }
    }

    /// Gives back to the cache every chunk parked in another region and every
    /// spare, if `room` plus them and the cache's idle bytes covers the least that
    /// growing `region` for `layout` can cost; says whether it did. Never
    /// for a request that cannot fit anyway: a kernel probing for a
    /// workspace over the limit would strip the parked chunks each time.
    #[cold]
    fn reclaim(&self, shared: &mut Shared, region: &Region, layout: Layout, room: usize) -> bool {
        let Shared {
            token,
            claimed,
            totals,
            spare,
            ..
        } = shared;
        let in_place = match region.cold(token).chunk() {
            Some(Chunk::Mapped(m)) => {
                let end = end_in(m, region.cursor(), layout);
                let pages = end.next_multiple_of(page_size()).saturating_sub(m.committed());
                (end <= m.reserved()).then_some(pages)
            }
            _ => None,
        };
        // Else a new chunk: whole pages of a reservation, or a heap block of
        // the request's size class, which is where a refused reservation
        // falls back to. Reckoned as the block, the larger: a request this
        // leaves out by less than 12.5% is refused, where reckoning it as
        // pages could strip the parked chunks for nothing every window.
        let need = chunk_need(layout);
        let least = in_place.unwrap_or(size_class(need).unwrap_or(usize::MAX));
        let others = || self.regions.others(claimed, region);
        let parked: usize = others().map(|r| r.parked_bytes(token)).sum();
        let spared: usize = spare.iter().map(Chunk::usable).sum();
        let reclaimable = parked + spared;
        // Idle chunks in the cache go before it refuses, but one it took and
        // could not grow is idle again by now.
        let free = room + self.cache.idle_bytes();
        if reclaimable == 0 || free + reclaimable < least {
            return false;
        }
        for chunk in others().filter_map(|r| r.steal(token, 0)) {
            totals.give_back(&self.cache, chunk);
        }
        give_back_spares(&self.cache, totals, spare);
        true
    }

    /// One attempt of [`grow`](Self::grow).
    fn try_grow(&self, shared: &mut Shared, region: &Region, layout: Layout) -> Result<(), Error> {
        let cursor = region.cursor();
        let min = self.config.min_block_size;
        let Shared {
            token,
            claimed,
            totals,
            spare,
            ..
        } = shared;
        let cold = region.cold(token);
        let peak = cold.peak();
        if let Some(Chunk::Mapped(m)) = cold.chunk() {
            let end = end_in(m, cursor, layout);
            if end <= m.reserved() {
                let before = m.committed();
                let want = growth(before, end, min.max(peak));
                self.cache
                    .grow(m, end, want, self.chunk_options(0), layout)?;
                totals.system_allocations += 1;
                totals.bytes_held += m.committed() - before;
                region.set_limit(m.committed());
                return Ok(());
            }
        }
        if region.idle(token) {
            // Nothing in it: the region starts over instead of chaining a
            // chunk twice as large to one it will not use (which the reset
            // would keep). Its chunk goes back, and the next is sized to the
            // request and the peak.
            if let Some(chunk) = region.take_chunk(token) {
                totals.give_back(&self.cache, chunk);
            }
        }
        let cold = region.cold(token);
        let need = chunk_need(layout);
        // `usable_from`: the least a parked chunk must hold to be taken
        // over. A region that starts its window without a chunk wants one
        // that holds its peak: it would outgrow a smaller one, and the
        // chunk's owner would then buy another, every window.
        let (want, reserve, usable_from) = match cold.chunk() {
            None => {
                let want = growth(0, need, min.max(peak));
                (want, peak, want)
            }
            // Outgrown: at least double, so a window chains few chunks.
            Some(c) => (growth(c.usable(), need, 2 * c.usable()), 2 * c.capacity(), need),
        };
        let options = self.chunk_options(reserve.max(need));
        // Room in the books first: a `Vec` that cannot grow aborts.
        if !cold.reserve_retired() || spare.try_reserve(1).is_err() {
            return Err(Error::out_of_memory(layout));
        }
        if spare.is_empty() {
            // A region parked at the last reset, whose owner has not asked
            // for it back: an exited thread's, or an idle one's.
            let mut others = self.regions.others(claimed, region);
            spare.extend(others.find_map(|r| r.steal(token, usable_from)));
        }
        let chunk = take_chunk(&self.cache, totals, spare, need, want, options, layout)?;
        region.switch_to(region.cold(token), chunk, layout);
        Ok(())
    }

    /// A chunk of its own for a request at or above the dedicated threshold,
    /// with `extra` bytes of room after it (for a canary).
    fn allocate_dedicated(
        &self,
        shared: &mut Shared,
        layout: Layout,
        extra: usize,
    ) -> Result<NonNull<[u8]>, Error> {
        shared
            .dedicated
            .try_reserve(1)
            .map_err(|_| Error::out_of_memory(layout))?;
        // No overflow: `extra` is 0 or a canary the layout was checked to hold.
        let need = chunk_need(layout) + extra;
        // Exactly what it needs, so that giving it back frees it all.
        let options = ChunkOptions {
            reserve: self.config.reserve.map(|_| need),
            ..self.chunk_options(need)
        };
        let taken = self.cache.take(need, need, options, layout)?;
        let chunk = shared.totals.count(taken);
        let pad = chunk.base().as_ptr().addr().wrapping_neg() & (layout.align() - 1);
        // SAFETY: `pad < align`, and the chunk holds `size + extra + align -
        // PAGE` usable bytes from a page-aligned start, so `pad + size +
        // extra` fits.
        let ptr = unsafe { chunk.base().add(pad) };
        shared.dedicated.push((chunk, layout.size()));
        shared.dedicated_live += layout.size();
        shared.totals.allocations += 1;
        shared.totals.bytes_requested += layout.size() as u64;
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    /// Every request when the debug checks are on: carved with a canary
    /// after it from the locked region (or a dedicated chunk), and recorded.
    #[cold]
    #[inline(never)]
    fn allocate_checked(
        &self,
        shared: &mut Shared,
        layout: Layout,
    ) -> Result<NonNull<[u8]>, Error> {
        if layout.size() == 0 {
            // Nothing to overflow into: a dangling pointer, counted.
            shared.totals.allocations += 1;
            return Ok(dangling(layout));
        }
        let padded = DebugState::padded(layout)?;
        shared.debug.reserve(layout)?;
        let ptr = if layout.size() >= self.dedicated_from {
            self.allocate_dedicated(shared, layout, CANARY_LEN)?.cast()
        } else {
            // SAFETY: the locked region, and the caller holds the lock.
            let carved = unsafe { self.bump_or_grow(shared, &self.locked, padded) };
            let ptr = carved.map_err(|e| e.for_request(layout))?.cast();
            // The region counted the canary as requested; the caller did not.
            self.locked.uncount(CANARY_LEN);
            ptr
        };
        shared.debug.record(ptr, layout.size());
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    /// Runs `f` on every region (the locked one last, when the debug checks
    /// use it) with the lock's token and the list of loose chunks, and folds
    /// what it returns into the totals. `keep` tells `f` whether a region
    /// stays ready for its thread's next request (the calling thread's, and
    /// the locked one) or is parked, so that its memory serves whichever
    /// thread needs some next (see `Region::reset`).
    ///
    /// Returns the bytes that were live in the regions and dedicated chunks
    /// just before, and notes them in the window's high-water mark: live
    /// bytes peak right before a reset or rewind (between them they only
    /// grow).
    fn each_region(
        &mut self,
        mut f: impl FnMut(&Region, &mut Locked, bool, &mut Vec<Chunk>) -> Folded,
    ) -> usize {
        let CachingAllocator {
            regions,
            locked,
            shared,
            config,
            ..
        } = self;
        let Shared {
            token,
            claimed,
            totals,
            loose,
            dedicated_live,
            window_high,
            ..
        } = shared.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mine = regions.get().map(|r| r as *const Region);
        let mut live = *dedicated_live;
        for region in regions.iter(claimed) {
            let keep = mine == Some(region as *const Region);
            live += totals.fold(f(region, token, keep, loose));
        }
        if config.debug_checks {
            // Only the debug checks carve from the locked region.
            live += totals.fold(f(locked, token, true, loose));
        }
        *window_high = (*window_high).max(live);
        live
    }

    /// `reset` with several regions, dedicated chunks or debug checks.
    #[cold]
    #[inline(never)]
    fn reset_all(&mut self) {
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if self.config.debug_checks {
            // Before any chunk goes back: the memory is still ours to poison.
            shared.recycle_canaries(0);
        }
        self.each_region(|region, locked, keep, loose| region.reset(locked, keep, loose));
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        while !shared.dedicated.is_empty() {
            shared.free_last_dedicated(&self.cache);
        }
    }

    /// Every region, the locked one included.
    fn all_regions<'a>(&'a self, claimed: &'a Claimed) -> impl Iterator<Item = &'a Region> {
        self.regions.iter(claimed).chain([&self.locked])
    }
}

/// Where a request for `layout` at `cursor` in `m` would end, padding
/// included.
fn end_in(m: &Mapping, cursor: usize, layout: Layout) -> usize {
    let pad = m.base().as_ptr().addr().wrapping_add(cursor).wrapping_neg() & (layout.align() - 1);
    // No overflow: `cursor + pad <= isize::MAX + align` and `Layout` keeps
    // `size + align` within `isize::MAX`.
    cursor + pad + layout.size()
}

/// A chunk that serves `need` bytes, about `want` usable: a spare one if one
/// is large enough or can grow, else one from the cache.
fn take_chunk(
    cache: &BlockCache,
    totals: &mut Totals,
    spare: &mut Vec<Chunk>,
    need: usize,
    want: usize,
    options: ChunkOptions,
    request: Layout,
) -> Result<Chunk, Error> {
    let fits = |c: &Chunk| match c {
        Chunk::Mapped(m) => options.reserve.is_some() && m.reserved() >= need,
        Chunk::Heap(b) => b.size() >= need,
    };
    // The largest that fits: spares are few, and a larger one grows less.
    if let Some(i) = (0..spare.len())
        .filter(|&i| fits(&spare[i]))
        .max_by_key(|&i| spare[i].usable())
    {
        let mut chunk = spare.swap_remove(i);
        if let Chunk::Mapped(m) = &mut chunk {
            let before = m.committed();
            if before < need {
                let mut grown = cache.grow(m, need, want, options, request);
                if matches!(grown, Err(Error::BudgetExceeded { .. })) && !spare.is_empty() {
                    // The other spares count against the limit too.
                    give_back_spares(cache, totals, spare);
                    grown = cache.grow(m, need, want, options, request);
                }
                if let Err(e) = grown {
                    spare.push(chunk);
                    return Err(e);
                }
                totals.system_allocations += 1;
                totals.bytes_held += m.committed() - before;
            }
        }
        return Ok(chunk);
    }
    match cache.take(need, want, options, request) {
        Ok(taken) => Ok(totals.count(taken)),
        // Spares count against the limit too: give them up and try again.
        Err(Error::BudgetExceeded { .. }) if !spare.is_empty() => {
            give_back_spares(cache, totals, spare);
            cache
                .take(need, want, options, request)
                .map(|t| totals.count(t))
        }
        Err(e) => Err(e),
    }
}

/// Gives every spare chunk back to the cache: they count against its limit.
fn give_back_spares(cache: &BlockCache, totals: &mut Totals, spare: &mut Vec<Chunk>) {
    for chunk in spare.drain(..) {
        totals.give_back(cache, chunk);
    }
}

/// What a new chunk for `layout` must hold: chunks start page-aligned, so
/// `align - PAGE` bytes may go to padding.
fn chunk_need(layout: Layout) -> usize {
    layout.size() + layout.align().saturating_sub(page_size())
}

impl Totals {
    /// Gives `chunk` back to `cache`, counting the system frees that caused.
    fn give_back(&mut self, cache: &BlockCache, chunk: Chunk) {
        self.bytes_held -= chunk.usable();
        self.system_frees += cache.give_back(chunk);
    }

    /// Counts a chunk from the cache as held, and how it was had.
    fn count(&mut self, taken: Taken) -> Chunk {
        if taken.system_allocations == 0 {
            self.cache_hits += 1;
        } else {
            self.cache_misses += 1;
            self.system_allocations += taken.system_allocations;
        }
        self.bytes_held += taken.chunk.usable();
        taken.chunk
    }
}

impl Shared {
    /// Gives every loose chunk back to `cache`.
    fn give_back_loose(&mut self, cache: &BlockCache) {
        while let Some(chunk) = self.loose.pop() {
            self.totals.give_back(cache, chunk);
        }
    }

    /// Gives the newest dedicated chunk back.
    fn free_last_dedicated(&mut self, cache: &BlockCache) {
        if let Some((chunk, size)) = self.dedicated.pop() {
            self.dedicated_live -= size;
            self.totals.give_back(cache, chunk);
        }
    }

    /// Checks and poisons the canaries from the `from`th on (debug checks).
    fn recycle_canaries(&mut self, from: usize) {
        self.totals.canary_violations += self.debug.recycle(from);
    }
}

// SAFETY: each region's range is carved only by its owner thread (or, for
// the locked region, under the lock), from chunks this allocator holds until
// `reset`, `rewind`, `release`, `trim` (which frees only pages above every
// cursor) or drop — all `&mut self` — so every pointer is disjoint from the
// others, aligned (`Region::bump` pads to the alignment) and valid until
// then. Dedicated chunks are held the same way.
unsafe impl TempAllocator for CachingAllocator {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        // Every miss is a tail call to the slow path, so the fast path saves
        // no registers.
        if let Some(region) = self.regions.cached() {
            if layout.size() < self.dedicated_from {
                // SAFETY: `Regions::cached` returned the calling thread's own
                // region. A thread id belongs to one live thread at a time;
                // the thread that had it before (and its region) has exited,
                // its writes ordered before ours by the id's hand-over.
                if let Some(ptr) = unsafe { region.bump(layout) } {
                    return Ok(NonNull::slice_from_raw_parts(ptr, layout.size()));
                }
            }
        }
        self.allocate_slow(layout)
    }

    #[inline]
    fn reset(&mut self) {
        let debug_checks = self.config.debug_checks;
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if !shared.spare.is_empty() {
            // A region that outgrew its chunk may take a spare one that holds
            // its peak; the rest go back. (`loose` is empty between calls:
            // swapping moves no chunk and allocates nothing.)
            debug_assert!(shared.loose.is_empty());
            core::mem::swap(&mut shared.spare, &mut shared.loose);
        }
        match self.regions.only(&shared.claimed) {
            // The usual case, kept short: one thread allocates.
            Some(region) if !debug_checks && shared.dedicated.is_empty() => {
                let keep = self
                    .regions
                    .cached()
                    .is_some_and(|mine| ptr::eq(mine, region));
                let folded = region.reset(&mut shared.token, keep, &mut shared.loose);
                let live = shared.totals.fold(folded);
                shared.window_high = shared.window_high.max(live);
            }
            _ => self.reset_all(),
        }
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if !shared.loose.is_empty() {
            shared.give_back_loose(&self.cache);
        }
        shared.open.clear();
        let totals = &mut shared.totals;
        totals.last_window_high = core::mem::take(&mut shared.window_high);
        totals.high_water = totals.high_water.max(totals.last_window_high);
        totals.resets += 1;
    }

    fn stats(&self) -> Stats {
        let shared = self.lock();
        let t = &shared.totals;
        // Regions count their own requests until a reset or rewind folds
        // them in: what they hold is live, and requested.
        let (mut allocations, mut requested, mut live) =
            (t.allocations, t.bytes_requested, shared.dedicated_live);
        for region in self.all_regions(&shared.claimed) {
            allocations += region.count() as u64;
            requested += region.live() as u64;
            live += region.live();
        }
        let window = shared.window_high.max(live);
        Stats {
            allocations,
            bytes_requested: requested,
            resets: t.resets,
            system_allocations: t.system_allocations,
            system_frees: t.system_frees,
            bytes_held: t.bytes_held,
            high_water: t.high_water.max(window),
            bytes_live: live,
            window_high_water: t.last_window_high.max(window),
            cache_hits: t.cache_hits,
            cache_misses: t.cache_misses,
            canary_violations: t.canary_violations,
        }
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        self.release();
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        self.regions.free(&mut shared.claimed);
    }
}

impl fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
