//! [`CachingAllocator`]: the product. A region per thread, leased for a
//! window, that grows in place; one budget shared with other sessions.
//!
//! One concern a file. This one: the type, its constructors, the fast path
//! and the short reset. Then `slow.rs` (what the fast path does not serve),
//! `reset.rs` (the full reset, and giving memory back: retain, `release`,
//! `trim`), `lease.rs` (which region a thread uses), `region.rs` (the bump,
//! reset, rewind, and the guard that changes a region), `grow.rs` (growth,
//! the budget rule, `prewarm`), `account.rs` (what the allocator took through
//! its cache), `checkpoint.rs`, `debug.rs` (canaries and poison),
//! `config.rs`; and below the regions, [`memory`], where their memory comes
//! from (chunks, heap blocks, the block cache, the ledger).

mod account;
mod checkpoint;
mod config;
mod debug;
mod grow;
mod lease;
mod memory;
mod plan;
mod region;
mod reset;
mod slow;

use core::alloc::Layout;
use core::fmt;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use checkpoint::Checkpoint;
pub use config::CachingConfig;
pub use memory::block_cache::{BlockCache, CacheStats};
pub use plan::Plan;

use crate::fast_path::CachingHeader;
use crate::{Error, Stats, TempAllocator};
use account::Account;
pub(crate) use checkpoint::NESTED_CHECKPOINTS;
use checkpoint::Open;
#[cfg(feature = "capi")]
pub(crate) use checkpoint::Parts as CheckpointParts;
use debug::DebugState;
use memory::block_cache::Reclaim;
use memory::chunk::Chunk;
use memory::counted;
use region::{Extend, FREE, Leased, Mark, Region, Totals};

/// Ids that tell allocators apart (never 0, which no thread remembers).
static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(1);

/// The caching temp allocator: what a runtime should use.
///
/// Every thread that allocates bumps in a *region* leased to it for the
/// window (until the next reset or rewind): a handful of instructions, no
/// lock, no atomic read-modify-write, any number of threads. A region
/// reserves address space and commits pages as its cursor first passes
/// them, so it grows in place, and after warm-up an inference makes **zero**
/// system allocations; what the system keeps resident for it stays within
/// 12.5% (and a page) of the most its thread used in one window, from the
/// first inference on. Fresh threads lease the regions the last ones left,
/// the largest first.
/// Where nothing can be reserved (Miri, `ulimit -v`), regions use heap
/// blocks sized to their peak. [`checkpoint`](CachingAllocator::checkpoint)
/// and [`rewind`](CachingAllocator::rewind) recycle one kernel's scratch
/// while the inference's stays.
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
#[repr(C)]
pub struct CachingAllocator {
    /// What the fast path reads: this window's token, from a block of the
    /// allocator's own (a thread that remembers it leases the region it
    /// remembers: `lease.rs`), and the size below which requests may take
    /// it. The first field of a `#[repr(C)]` struct, so that a pointer to
    /// the allocator stands for it (see `fast_path`).
    header: CachingHeader,
    /// The end of the block of window tokens.
    windows: lease::Windows,
    /// The one region, when a reset may take its short path (see
    /// `reset`); null when it may not. Only a full reset sets it; anything
    /// that may change what the short path relies on clears it first: a
    /// growth, a region made, a dedicated chunk, a checkpoint, `prewarm`.
    /// Read under `&mut self`, so `Relaxed` is enough.
    short_reset: AtomicPtr<Region>,
    /// The lock's state and the account, on the heap, where they stay while
    /// the allocator moves: a cache with a hard limit reaches them to take
    /// back this allocator's idle memory (see [`Core`]).
    core: NonNull<Core>,
    /// Whether the cache can reach `core` (it has a hard limit): then every
    /// `&mut self` method takes the lock too, and a reset leases no region
    /// into the next window, so that between inferences all of this
    /// allocator's memory is idle to the other sessions.
    reachable: bool,
    /// The counters that only `&mut self` methods change (resets, rewinds):
    /// outside the lock, so the short reset takes none of it.
    totals: Totals,
    config: CachingConfig,
    id: u64,
}

/// What the slow path changes under the lock, and the account: what a cache
/// with a hard limit may reach from another allocator's growth (through
/// [`Reclaim`]) to take memory no window of this allocator is using.
pub(super) struct Core {
    state: Mutex<LockedState>,
    account: Account,
    /// `CachingConfig::retain`: the least this allocator keeps when another
    /// one takes its idle memory back.
    floor: usize,
}

/// What `exclusive` gives under `&mut self`: the lock's state, without
/// the lock where nothing else can reach it.
enum StateAccess<'a> {
    Exclusive(&'a mut LockedState),
    Locked(MutexGuard<'a, LockedState>),
}

impl core::ops::Deref for StateAccess<'_> {
    type Target = LockedState;

    fn deref(&self) -> &LockedState {
        match self {
            StateAccess::Exclusive(state) => state,
            StateAccess::Locked(state) => state,
        }
    }
}

impl core::ops::DerefMut for StateAccess<'_> {
    fn deref_mut(&mut self) -> &mut LockedState {
        match self {
            StateAccess::Exclusive(state) => state,
            StateAccess::Locked(state) => state,
        }
    }
}

/// The lock's state and the account of `core` (a `CachingAllocator`'s, to
/// which the caller has `&mut`; `reachable` is its flag).
fn exclusive(core: &mut NonNull<Core>, reachable: bool) -> (StateAccess<'_>, &Account) {
    if reachable {
        // SAFETY: `core` lives until the allocator drops (`try_with_cache`,
        // `Drop`); other allocators reach it only as `&Core`, as here.
        let core = unsafe { core.as_ref() };
        let state = counted(core.state.lock().unwrap_or_else(PoisonError::into_inner));
        return (StateAccess::Locked(state), &core.account);
    }
    // SAFETY: `core` lives until the allocator drops (`try_with_cache`,
    // `Drop`), and the cache cannot reach it (no hard limit: it was never
    // registered); with `&mut` to the allocator no other reference to it is
    // alive, so this is the only one.
    let Core { state, account, .. } = unsafe { core.as_mut() };
    let state = state.get_mut().unwrap_or_else(PoisonError::into_inner);
    (StateAccess::Exclusive(state), account)
}

/// What the slow path changes under the lock.
#[derive(Default)]
pub(super) struct LockedState {
    /// Every region made so far, freed when the allocator drops.
    regions: Vec<NonNull<Region>>,
    /// Chunks of requests above the dedicated threshold, with their sizes.
    dedicated: Vec<(Chunk, usize)>,
    /// Checkpoints not yet rewound, outermost first.
    open: Vec<Open>,
    /// Their marks of the regions in use, in the same order.
    marks: Vec<Mark>,
    next_serial: u64,
    /// Canaries of the allocations since the last reset (debug checks only).
    debug: DebugState,
    /// The most bytes live at once in this window, as of its last rewind
    /// (0 without one: a reset takes the most of it and what is live).
    window_high: usize,
    /// The counters `&self` methods change under the lock: dedicated
    /// chunks, zero-sized requests with the debug checks, `check`. Added
    /// to the allocator's own in `stats`.
    totals: Totals,
}

// SAFETY: the region pointers are to regions the allocator owns as `Box`es
// would, and regions are `Send + Sync`; chunks and marks are `Send`. (This
// is what makes the allocator `Send + Sync`: `&self` methods reach a region
// only through the lock, atomics, or a `Leased` guard.)
unsafe impl Send for LockedState {}

/// The regions in `list`, borrowed for as long as the list.
fn regions(list: &[NonNull<Region>]) -> impl Iterator<Item = &Region> + Clone {
    list.iter().map(deref)
}

/// A region of the allocator's list, borrowed for as long as the entry.
fn deref(region: &NonNull<Region>) -> &Region {
    // SAFETY: the list's regions came from `Region::try_new` and are freed
    // only by the allocator's `Drop`, after draining the list, which this
    // borrow of it keeps from happening meanwhile.
    unsafe { region.as_ref() }
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

    /// An allocator with `config` and a cache of its own, which keeps no
    /// memory idle (what the allocator gives back goes to the system).
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext};
    ///
    /// let temp = CachingAllocator::with_config(CachingConfig::default().max_bytes(Some(1 << 20)));
    /// let ctx = KernelContext::new(&temp);
    /// assert!(matches!(ctx.scratch::<u8>(4 << 20), Err(Error::BudgetExceeded { .. })));
    /// ```
    pub fn with_config(config: CachingConfig) -> Self {
        Self::with_cache(Arc::new(BlockCache::with_idle_budget(0)), config)
    }

    /// An allocator that takes and gives back its memory through `cache`,
    /// shared with other allocators (one per session or model): memory one
    /// gives back serves another, under the cache's idle budget and limit.
    /// The config's [`max_bytes`](CachingConfig::max_bytes) is this
    /// allocator's own limit within the cache's.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig, Error, KernelContext};
    ///
    /// // 32 MiB for all sessions, at most 24 MiB for any one.
    /// let cache = Arc::new(BlockCache::with_limits(0, Some(32 << 20)));
    /// let session = CachingConfig::default().max_bytes(Some(24 << 20));
    /// let a = CachingAllocator::with_cache(Arc::clone(&cache), session);
    /// let b = CachingAllocator::with_cache(Arc::clone(&cache), session);
    /// KernelContext::new(&a).scratch::<u8>(20 << 20)?;
    /// let err = KernelContext::new(&b).scratch::<u8>(20 << 20).unwrap_err();
    /// assert!(matches!(err, Error::BudgetExceeded { limit, .. } if limit == 32 << 20));
    /// let err = KernelContext::new(&a).scratch::<u8>(8 << 20).unwrap_err();
    /// assert!(matches!(err, Error::BudgetExceeded { limit, .. } if limit == 24 << 20));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn with_cache(cache: Arc<BlockCache>, config: CachingConfig) -> Self {
        // As `Vec::with_capacity` would: the global allocator's error.
        Self::try_with_cache(cache, config)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(Layout::new::<LockedState>()))
    }

    /// [`with_cache`](Self::with_cache), but an error instead of an abort
    /// when there is no memory for the allocator's records (room for 8 nested
    /// checkpoints over 8 regions), for runtimes that must not abort.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig};
    ///
    /// let cache = Arc::new(BlockCache::with_idle_budget(0));
    /// let temp = CachingAllocator::try_with_cache(cache, CachingConfig::default())?;
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] with the size of the records that could not be
    /// had.
    pub fn try_with_cache(cache: Arc<BlockCache>, config: CachingConfig) -> Result<Self, Error> {
        fn room<T>(n: usize) -> Result<Vec<T>, Error> {
            let mut account = Vec::new();
            let oom = Error::OutOfMemory {
                size: n * size_of::<T>(),
                align: align_of::<T>(),
            };
            account.try_reserve_exact(n).map_err(|_| oom)?;
            Ok(account)
        }
        let state = LockedState {
            regions: room(NESTED_CHECKPOINTS)?,
            open: room(NESTED_CHECKPOINTS)?,
            // A mark per region in use, per checkpoint.
            marks: room(NESTED_CHECKPOINTS * NESTED_CHECKPOINTS)?,
            ..LockedState::default()
        };
        let reachable = cache.max_bytes().is_some();
        let core_value = Core {
            state: Mutex::new(state),
            account: Account::new(Arc::clone(&cache), config.max_bytes),
            floor: config.retain.unwrap_or(0),
        };
        // SAFETY: `Core` is not zero-sized.
        let memory = unsafe { std::alloc::alloc(Layout::new::<Core>()) };
        let core = NonNull::new(memory.cast::<Core>())
            .ok_or(Error::out_of_memory(Layout::new::<Core>()))?;
        // SAFETY: fresh memory with `Core`'s layout, allocated as `Box` does
        // (so a `Box` frees it: `Drop`).
        unsafe { core.write(core_value) };
        if reachable {
            // SAFETY: `core` stays where it is and alive until `Drop`, which
            // removes it from the cache first.
            let registered = unsafe { cache.register(core as NonNull<dyn Reclaim>) };
            if registered.is_err() {
                // SAFETY: `core` was allocated and written just above, as
                // `Box` does, and nothing else refers to it.
                drop(unsafe { Box::from_raw(core.as_ptr()) });
                return Err(Error::out_of_memory(Layout::new::<NonNull<dyn Reclaim>>()));
            }
        }
        let (windows, window) = lease::Windows::new();
        Ok(CachingAllocator {
            header: CachingHeader {
                window,
                fast_below: if config.debug_checks {
                    0
                } else {
                    config.dedicated_from()
                },
            },
            windows,
            short_reset: AtomicPtr::new(ptr::null_mut()),
            core,
            reachable,
            totals: Totals::default(),
            config,
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Relaxed),
        })
    }

    /// The cache behind this allocator.
    ///
    /// ```
    /// let temp = tempalloc::CachingAllocator::new();
    /// assert_eq!(temp.cache().idle_bytes(), 0);
    /// ```
    pub fn cache(&self) -> &Arc<BlockCache> {
        &self.account().cache
    }

    /// The configuration this allocator was made with.
    ///
    /// ```
    /// let temp = tempalloc::CachingAllocator::new();
    /// assert_eq!(temp.config().dedicated_threshold, None);
    /// ```
    pub fn config(&self) -> &CachingConfig {
        &self.config
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
        let mut state = self.lock();
        let (new, first) = state.debug.check();
        state.totals.canary_violations += new;
        first.map_or(Ok(()), Err)
    }

    fn lock(&self) -> MutexGuard<'_, LockedState> {
        // Nothing panics under the lock, and the slow path leaves `LockedState`
        // consistent at every early return, so poison is ignored.
        counted((self.core().state.lock()).unwrap_or_else(PoisonError::into_inner))
    }

    fn core(&self) -> &Core {
        // SAFETY: `core` lives until the allocator drops (`try_with_cache`,
        // `Drop`), and is reached only as `&Core` while `&self` is alive.
        unsafe { self.core.as_ref() }
    }

    fn account(&self) -> &Account {
        &self.core().account
    }

    /// A region of this allocator, for as long as the allocator.
    fn region(&self, region: NonNull<Region>) -> &Region {
        // SAFETY: callers pass regions of this allocator (from its list, or
        // remembered by a thread with its id), which live until it drops.
        unsafe { region.as_ref() }
    }
}

// SAFETY: a region is bumped only through its one guard (`Leased`), which
// only the thread that leases it makes, from chunks the region holds until
// `reset`, `rewind`, `release`, `trim` (which frees only pages above every
// cursor) or drop — all `&mut self` — so every pointer is disjoint from the
// others, aligned (`Leased::bump` pads to the alignment) and valid until
// then. Dedicated chunks are held the same way.
unsafe impl TempAllocator for CachingAllocator {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        // Every miss is a tail call to the slow path, so the fast path saves
        // no registers.
        // SAFETY: a `Layout`'s alignment is a power of two.
        let fast = unsafe { self.fast(layout.size(), layout.align()) };
        fast.map_or_else(|| self.allocate_slow(layout), Ok)
    }

    #[inline]
    fn fast_path(&self) -> crate::temp::sealed::FastPath<'_> {
        crate::temp::sealed::FastPath::Caching(&self.header)
    }

    /// In the calling thread's region: moves the cursor from the
    /// allocation's end to its new end when it is the newest carving,
    /// committing more of the reservation if it must; never moves the
    /// region to a new chunk, which would leave the allocation behind.
    #[inline]
    unsafe fn resize_in_place(&self, ptr: NonNull<u8>, old: Layout, new_size: usize) -> bool {
        let (window, region) = lease::leased();
        if window != self.header.window || new_size < old.size() || old.size() == 0 {
            return false;
        }
        if self.config.debug_checks {
            return self.resize_checked(ptr, old.size(), new_size);
        }
        // SAFETY: the calling thread leases the region it remembers under
        // this window's token (see `lease::leased`), a region of this
        // allocator, alive while `&self` is; this call holds no other guard
        // of it.
        let mut region = unsafe { Leased::new(&*region) };
        match region.extend(ptr.as_ptr(), old.size(), new_size) {
            Extend::Done => true,
            Extend::NotNewest => false,
            Extend::NoRoom(more) => {
                self.extend_slow(&mut region, ptr, old.size(), new_size, more, None)
            }
        }
    }

    #[inline]
    fn reset(&mut self) {
        // The usual case, kept short: one region with at most one chunk,
        // nothing else to undo (see `short_reset`).
        let Some(only) = NonNull::new(*self.short_reset.get_mut()) else {
            return self.reset_all();
        };
        // SAFETY: `&mut self`: no thread holds a guard of the region or can
        // make one, and this is its one guard.
        let mut region = unsafe { Leased::new(deref(&only)) };
        #[cfg(debug_assertions)]
        {
            // Never set where other allocators can reach `core` (`reset_all`).
            debug_assert!(!self.reachable);
            let state = self.lock();
            debug_assert!(state.regions[..] == [only] && state.dedicated.is_empty());
            // No checkpoint since the last reset, so no rewind either: the
            // window's high water is what is live now.
            debug_assert!(state.open.is_empty() && state.marks.is_empty());
            debug_assert!(state.window_high == 0);
        }
        debug_assert!(region.has_one_chunk());
        // A calling thread that holds this window's token leases the one
        // region (see `lease::leased`): the reset would lease it to the
        // thread again, so the lease and the token stay as they are. Else
        // the lease ends: a new window first, as in `reset_all`.
        let (window, _) = lease::leased();
        let next = if window == self.header.window {
            debug_assert!(region.is_leased_to(lease::last_lease(self.id).1));
            None
        } else {
            let window = self.windows.next(&mut self.header.window);
            let (last, thread) = lease::carry_over(self.id, window);
            Some(if last == Some(only) { thread } else { FREE })
        };
        // At most one chunk, and no growth since the last reset moved it:
        // the window stayed in the first chunk.
        let live = region.reset(true, &mut self.totals);
        if let Some(next) = next {
            region.unlease(next);
        }
        self.totals.end_window(live);
    }

    fn stats(&self) -> Stats {
        let state = self.lock();
        let (t, locked) = (&self.totals, &state.totals);
        // Regions count their own requests until a reset or rewind flushes
        // them in: what they hold is live, and requested.
        let (mut allocations, mut requested, mut live) = (
            t.allocations + locked.allocations,
            t.bytes_requested + locked.bytes_requested,
            state.dedicated_live(),
        );
        for region in regions(&state.regions) {
            allocations += region.count() as u64;
            requested += region.live() as u64;
            live += region.live();
        }
        let window = state.window_high.max(live);
        let account = self.account();
        Stats {
            allocations,
            bytes_requested: requested,
            resets: t.resets,
            system_allocations: account.ledger.system_allocations.load(Relaxed),
            system_frees: account.ledger.system_frees.load(Relaxed),
            bytes_held: account.ledger.held(),
            high_water: t.high_water.max(window),
            bytes_live: live,
            window_high_water: t.last_window_high.max(window),
            cache_hits: account.ledger.hits.load(Relaxed),
            cache_misses: account.ledger.misses.load(Relaxed),
            canary_violations: t.canary_violations + locked.canary_violations,
        }
    }
}

impl CachingAllocator {
    /// The fast path of [`allocate`](TempAllocator::allocate): `size` bytes
    /// aligned to `align` bumped in the calling thread's region, or `None`
    /// (then `allocate` serves the request, or says why not). Any `size`,
    /// checked or not; an `align` of 0 is never served. A
    /// [`KernelContext`](crate::KernelContext) inlines the same
    /// ([`CachingHeader::fast`], on the allocator's first field).
    ///
    /// # Safety
    ///
    /// `align` is a power of two or 0.
    #[inline(always)]
    pub(crate) unsafe fn fast(&self, size: usize, align: usize) -> Option<NonNull<[u8]>> {
        // SAFETY: `header` is this allocator's, live while `&self` is, and
        // so are its regions; the caller's promise on `align` is `fast`'s.
        unsafe { self.header.fast(size, align) }
    }
}

impl LockedState {
    /// Bytes requested in `dedicated`.
    fn dedicated_live(&self) -> usize {
        self.dedicated.iter().map(|(_, size)| size).sum()
    }

    /// Gives the dedicated chunks from the `from`th on back, newest first.
    fn free_dedicated(&mut self, from: usize, account: &Account) {
        for (chunk, _) in self.dedicated.drain(from..).rev() {
            account.give_back(chunk);
        }
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        if self.reachable {
            // First: no other allocator reaches `core` from now on.
            self.account()
                .cache
                .unregister(self.core as NonNull<dyn Reclaim>);
        }
        self.release();
        // Unreachable now: the lock is not needed.
        let (mut state, _) = exclusive(&mut self.core, false);
        for region in state.regions.drain(..) {
            // SAFETY: every region came from `Region::try_new`, which
            // allocated and initialised it as `Box` does, and is freed only
            // here, once (drained from the list); `&mut self` means no
            // reference to it is left (the threads remember only pointers,
            // never used again: their window tokens can match no live
            // allocator).
            drop(unsafe { Box::from_raw(region.as_ptr()) });
        }
        drop(state);
        // SAFETY: `core` was allocated as `Box` does in `try_with_cache` and
        // is freed only here; the cache no longer reaches it (above), and
        // `&mut self` means nothing else refers to it.
        drop(unsafe { Box::from_raw(self.core.as_ptr()) });
    }
}

// SAFETY: `core` is owned as a `Box` would own it, and `Core` is `Send +
// Sync` (its state is behind a mutex, its account is atomics: checked
// below); the other fields are `Send + Sync` on their own.
unsafe impl Send for CachingAllocator {}
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Core>();
};
// SAFETY: `&self` methods reach `core` only as `&Core` (its state through
// the mutex, its account through atomics) and the regions through their
// atomics or a `Leased` guard, which one thread holds at a time (see
// `LockedState`); `Core` is `Sync` (checked above).
unsafe impl Sync for CachingAllocator {}

impl fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
