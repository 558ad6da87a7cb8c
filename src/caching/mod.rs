//! [`CachingAllocator`]: the product. Per-thread bump regions over recycled
//! blocks; reset and rewind in a few instructions; one shared budget.

mod checkpoint;
mod config;
mod debug;
mod slot;

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use checkpoint::Checkpoint;
pub use config::CachingConfig;

use crate::block::{Block, PAGE};
use crate::block_cache::{Acquired, BlockCache};
use crate::temp::dangling;
use crate::{Error, Stats, TempAllocator};
use checkpoint::Mark;
use debug::DebugState;
use slot::{NO_OWNER, SLOTS, Slot, raw_thread_id, thread_id};

/// The slot threads share, under the lock, when every per-thread slot is taken.
const FALLBACK: usize = SLOTS;

/// Ids that tell allocators apart, so a checkpoint cannot be used on another.
static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(0);

/// The caching temp allocator: what a runtime should use.
///
/// Each thread bump-allocates in a block of its own (a *slot*; the first
/// request of a thread claims one), so a request is a handful of
/// instructions with no lock and no atomic read-modify-write, and threads
/// never contend. Blocks come from a [`BlockCache`] (or the system, on a
/// miss). [`reset`](TempAllocator::reset) rewinds every slot to the start of
/// its block; a thread whose block overflowed during the window gets, at the
/// next request, one block sized to the most it used, so after warm-up an
/// inference makes **zero** system allocations and the allocator holds one
/// block per thread, within 12.5% (plus a page) of that thread's peak.
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
/// // The first request took one block; the later inferences reused it.
/// assert_eq!(temp.stats().system_allocations, 1);
/// # Ok::<(), tempalloc::Error>(())
/// ```
pub struct CachingAllocator {
    /// `SLOTS` per-thread slots and the locked fallback slot.
    slots: Box<[Slot; SLOTS + 1]>,
    shared: Mutex<Shared>,
    cache: Arc<BlockCache>,
    config: CachingConfig,
    id: u64,
}

/// Everything the slow path changes, under the lock.
#[derive(Default)]
struct Shared {
    slots: [SlotBlocks; SLOTS + 1],
    /// Bit `i` is set while slot `i` has an owner (the fallback's bit while
    /// it has been used since the last reset).
    owned: u32,
    /// Blocks of requests above the dedicated threshold, with their sizes.
    dedicated: Vec<(Block, usize)>,
    /// Bytes requested in `dedicated`.
    dedicated_live: usize,
    /// Counters folded in at reset, and the slow path's own.
    totals: Stats,
    /// Canaries of the allocations since the last reset (debug checks only).
    debug: DebugState,
}

/// The blocks behind one slot.
#[derive(Default)]
struct SlotBlocks {
    /// Blocks taken since the last reset; the last is the slot's current one.
    chain: Vec<Block>,
    /// Bytes used (padding included) in the chain's earlier blocks.
    retired_used: usize,
    /// The slot's `requested` counter when the window began, moved forward
    /// by what rewinds gave back: `requested - window_start` is live.
    window_start: usize,
    /// The most bytes the slot used in one window: the size its block grows to.
    peak: usize,
    /// The slot needs a new block at the next reset: it moved past its
    /// first block this window, or a rewind left it in one below its peak.
    outgrown: bool,
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
    /// config's `max_cached_bytes` and `max_bytes`.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext};
    ///
    /// let temp = CachingAllocator::with_config(CachingConfig::default().max_bytes(Some(1 << 20)));
    /// let ctx = KernelContext::new(&temp);
    /// assert!(matches!(ctx.scratch::<u8>(4 << 20), Err(Error::BudgetExceeded { .. })));
    /// ```
    pub fn with_config(config: CachingConfig) -> Self {
        let cache = BlockCache::with_limits(config.max_cached_bytes, config.max_bytes);
        Self::with_cache(Arc::new(cache), config)
    }

    /// An allocator that takes and gives back its blocks through `cache`,
    /// shared with other allocators (one per session or model) under the
    /// cache's budget. The config's `max_cached_bytes` and `max_bytes` are
    /// not used: the cache's limits rule.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tempalloc::{BlockCache, CachingAllocator, CachingConfig};
    ///
    /// let cache = Arc::new(BlockCache::new(32 << 20));
    /// let a = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
    /// let b = CachingAllocator::with_cache(Arc::clone(&cache), CachingConfig::default());
    /// assert!(Arc::ptr_eq(a.cache(), b.cache()));
    /// ```
    pub fn with_cache(cache: Arc<BlockCache>, config: CachingConfig) -> Self {
        CachingAllocator {
            slots: Box::new(core::array::from_fn(|_| Slot::new())),
            shared: Mutex::new(Shared::default()),
            cache,
            config,
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Relaxed),
        }
    }

    /// The block cache behind this allocator.
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
    /// assert_eq!(temp.config().get_min_block_size(), 64 << 10);
    /// ```
    pub fn config(&self) -> &CachingConfig {
        &self.config
    }

    /// Resets, then gives every block back to the cache, which keeps them
    /// idle within its budget (or frees them). For memory pressure; the next
    /// request takes a block again, sized to what the thread needed before.
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
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for (slot, blocks) in self.slots.iter_mut().zip(&mut shared.slots) {
            // The block was large enough: the next one should be too.
            blocks.peak = blocks.peak.max(*slot.capacity.get_mut());
            *slot.owner.get_mut() = NO_OWNER;
            slot.clear();
            for block in blocks.chain.drain(..) {
                give_back(&self.cache, &mut shared.totals, block);
            }
        }
        shared.owned = 0;
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

    /// Everything the fast path cannot serve: a thread's first request, a
    /// full block, a dedicated block, or all slots taken.
    #[cold]
    #[inline(never)]
    fn allocate_slow(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let mut shared = self.lock();
        if self.config.debug_checks {
            return self.allocate_checked(&mut shared, layout);
        }
        if self.is_dedicated(layout) {
            return self.allocate_dedicated(&mut shared, layout, 0);
        }
        let index = self.claim_slot(&mut shared);
        let slot = &self.slots[index];
        let ptr = match slot.bump(layout) {
            Some(ptr) => ptr,
            None if layout.size() == 0 => {
                // Nothing to carve: no block for it, but it is counted.
                shared.totals.allocations += 1;
                return Ok(dangling(layout));
            }
            None => {
                self.grow(&mut shared, index, layout)?;
                // A fresh block of at least `size + align - PAGE` bytes.
                slot.bump(layout).ok_or(Error::OutOfMemory {
                    size: layout.size(),
                    align: layout.align(),
                })?
            }
        };
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    /// The slot the calling thread bumps in: the one it owns, else a free
    /// one (its home slot first), else the locked fallback.
    fn claim_slot(&self, shared: &mut Shared) -> usize {
        let tid = thread_id();
        let probe = || (0..SLOTS).map(move |k| (tid + k) % SLOTS);
        if let Some(i) = probe().find(|&i| self.slots[i].owner.load(Relaxed) == tid) {
            return i;
        }
        // Claims happen only under the lock and releases only under `&mut`,
        // so a plain store cannot race with another claim.
        let free = probe().find(|&i| self.slots[i].owner.load(Relaxed) == NO_OWNER);
        let index = free.unwrap_or(FALLBACK);
        if index != FALLBACK {
            self.slots[index].owner.store(tid, Relaxed);
        }
        shared.owned |= 1 << index;
        index
    }

    /// Moves slot `index` to a new block large enough for `layout`. The old
    /// block stays in the slot's chain (its memory is still lent out) until
    /// the reset.
    fn grow(&self, shared: &mut Shared, index: usize, layout: Layout) -> Result<(), Error> {
        let slot = &self.slots[index];
        // Blocks are page-aligned; a larger alignment may need the difference.
        let needed = layout.size() + layout.align().saturating_sub(PAGE);
        let capacity = slot.capacity.load(Relaxed);
        let blocks = &mut shared.slots[index];
        let want = needed
            .max(self.config.min_block_size)
            .max(blocks.peak)
            .max(capacity.saturating_mul(2));
        blocks
            .chain
            .try_reserve(1)
            .map_err(|_| Error::OutOfMemory {
                size: layout.size(),
                align: layout.align(),
            })?;
        let block = take(
            &self.cache,
            self.config,
            &mut shared.totals,
            want,
            layout.size(),
        )?;
        let blocks = &mut shared.slots[index];
        blocks.retired_used += slot.cursor.load(Relaxed);
        blocks.outgrown |= !blocks.chain.is_empty();
        slot.install(block.ptr(), block.size(), 0);
        blocks.chain.push(block);
        Ok(())
    }

    /// Whether `layout` gets a dedicated block.
    fn is_dedicated(&self, layout: Layout) -> bool {
        self.config
            .dedicated_threshold
            .is_some_and(|t| layout.size() >= t)
    }

    /// A block of its own for a request at or above the dedicated threshold,
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
            .map_err(|_| Error::OutOfMemory {
                size: layout.size(),
                align: layout.align(),
            })?;
        // No overflow: `extra` is 0 or a canary the layout was checked to hold.
        let needed = layout.size() + extra + layout.align().saturating_sub(PAGE);
        let block = take(
            &self.cache,
            self.config,
            &mut shared.totals,
            needed,
            layout.size(),
        )?;
        let pad = block.ptr().as_ptr().addr().wrapping_neg() & (layout.align() - 1);
        // SAFETY: `pad < align`, and the block holds `size + extra + align -
        // PAGE` bytes with a page-aligned start, so `pad + size + extra` fits.
        let ptr = unsafe { block.ptr().add(pad) };
        shared.dedicated.push((block, layout.size()));
        shared.dedicated_live += layout.size();
        shared.totals.allocations += 1;
        shared.totals.bytes_requested += layout.size() as u64;
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    /// Takes a checkpoint: a later [`rewind`](Self::rewind) to it recycles
    /// everything allocated after it, in O(threads), while what was allocated
    /// before stays allocated and unchanged.
    ///
    /// A runtime takes one before each kernel and rewinds after it, so the
    /// kernel's scratch serves the next kernel while scratch that lives for
    /// the whole inference stays put. Take it while no other thread is
    /// allocating from this allocator, so that "before" is well defined.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let kv = KernelContext::new(&temp).scratch::<u8>(1000)?.as_mut_ptr();
    /// let cp = temp.checkpoint();
    /// let a = KernelContext::new(&temp).scratch::<u8>(500)?.as_mut_ptr();
    /// temp.rewind(cp)?;
    /// let b = KernelContext::new(&temp).scratch::<u8>(500)?.as_mut_ptr();
    /// assert_eq!(a, b); // the kernel's scratch was recycled...
    /// assert_ne!(kv, b); // ...the inference's was not
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// Scratch allocated after a checkpoint cannot be used after the rewind:
    ///
    /// ```compile_fail,E0502
    /// use tempalloc::{CachingAllocator, KernelContext};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let cp = temp.checkpoint();
    /// let ctx = KernelContext::new(&temp);
    /// let tile = ctx.scratch::<f32>(16).unwrap();
    /// temp.rewind(cp).unwrap(); // error: `temp` is still borrowed by `tile`
    /// tile[0] = 1.0;
    /// ```
    pub fn checkpoint(&self) -> Checkpoint {
        let shared = self.lock();
        Checkpoint {
            allocator: self.id,
            resets: shared.totals.resets,
            marks: core::array::from_fn(|i| {
                let (slot, blocks) = (&self.slots[i], &shared.slots[i]);
                Mark {
                    blocks: blocks.chain.len(),
                    cursor: slot.cursor.load(Relaxed),
                    requested: slot.requested.load(Relaxed),
                    window_start: blocks.window_start,
                    retired_used: blocks.retired_used,
                }
            }),
            dedicated: shared.dedicated.len(),
            canaries: shared.debug.len(),
        }
    }

    /// Recycles everything allocated since `checkpoint` was taken. Needs
    /// `&mut self`: no scratch from after the checkpoint can still be in use
    /// and no other thread can be allocating. Checkpoints nest: rewind the
    /// inner one first.
    ///
    /// ```
    /// use tempalloc::{CachingAllocator, KernelContext, TempAllocator};
    ///
    /// let mut temp = CachingAllocator::new();
    /// let outer = temp.checkpoint();
    /// KernelContext::new(&temp).scratch::<u8>(100)?;
    /// let inner = temp.checkpoint();
    /// KernelContext::new(&temp).scratch::<u8>(200)?;
    /// temp.rewind(inner)?;
    /// temp.rewind(outer)?;
    /// assert_eq!(temp.stats().high_water, 300);
    /// # Ok::<(), tempalloc::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::StaleCheckpoint`] when a reset came after the checkpoint, it
    /// belongs to another allocator, or an earlier rewind already released
    /// what it refers to. Nothing changes then.
    pub fn rewind(&mut self, checkpoint: Checkpoint) -> Result<(), Error> {
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let now = shared.totals.resets;
        let stale = Error::StaleCheckpoint {
            taken_at: checkpoint.resets,
            now,
        };
        let fits = |(mark, blocks): (&Mark, &SlotBlocks)| match mark.blocks.checked_sub(1) {
            None => mark.cursor == 0,
            Some(last) => blocks
                .chain
                .get(last)
                .is_some_and(|b| mark.cursor <= b.size()),
        };
        if checkpoint.allocator != self.id
            || checkpoint.resets != now
            || checkpoint.dedicated > shared.dedicated.len()
            || checkpoint.canaries > shared.debug.len()
            || !checkpoint.marks.iter().zip(&shared.slots).all(fits)
        {
            return Err(stale);
        }
        if self.config.debug_checks {
            // Before any block goes back: the memory is still ours to poison.
            debug::recycle(shared, checkpoint.canaries);
        }
        let live = window_live(&self.slots[..], shared);
        shared.totals.high_water = shared.totals.high_water.max(live);
        for ((slot, blocks), mark) in self
            .slots
            .iter_mut()
            .zip(&mut shared.slots)
            .zip(&checkpoint.marks)
        {
            let requested = *slot.requested.get_mut();
            blocks.peak = blocks
                .peak
                .max(blocks.retired_used + *slot.cursor.get_mut());
            blocks.retired_used = mark.retired_used;
            // Live bytes go back to what they were at the checkpoint.
            blocks.window_start = requested - (mark.requested - mark.window_start);
            for block in blocks.chain.drain(mark.blocks..) {
                give_back(&self.cache, &mut shared.totals, block);
            }
            match blocks.chain.last() {
                Some(block) => slot.install(block.ptr(), block.size(), mark.cursor),
                None => slot.clear(),
            }
            blocks.outgrown = blocks.chain.len() > 1 || *slot.capacity.get_mut() < blocks.peak;
        }
        for (block, size) in shared.dedicated.drain(checkpoint.dedicated..) {
            shared.dedicated_live -= size;
            give_back(&self.cache, &mut shared.totals, block);
        }
        Ok(())
    }
}

/// Takes a block of at least `bytes` from `cache`, counting it.
fn take(
    cache: &BlockCache,
    config: CachingConfig,
    totals: &mut Stats,
    bytes: usize,
    request: usize,
) -> Result<Block, Error> {
    let Acquired { block, hit } = cache.acquire(bytes, config.block).map_err(|e| match e {
        // The cache sees a block's size; the caller asked for `request`.
        Error::BudgetExceeded { held, limit, .. } => Error::BudgetExceeded {
            requested: request,
            held,
            limit,
        },
        e => e,
    })?;
    if hit {
        totals.cache_hits += 1;
    } else {
        totals.cache_misses += 1;
        totals.system_allocations += 1;
    }
    totals.bytes_held += block.size();
    Ok(block)
}

/// Gives `block` back to `cache`, counting the system frees that caused.
fn give_back(cache: &BlockCache, totals: &mut Stats, block: Block) {
    totals.bytes_held -= block.size();
    totals.system_frees += cache.release(block);
}

/// Bytes requested and not rewound since the last reset.
fn window_live(slots: &[Slot], shared: &Shared) -> usize {
    let slots = slots.iter().zip(&shared.slots);
    let bumped: usize = slots
        .map(|(slot, blocks)| slot.requested.load(Relaxed) - blocks.window_start)
        .sum();
    bumped + shared.dedicated_live
}

/// Reset of a slot that outgrew its block this window: every block goes
/// back, and the next request takes one sized to the slot's peak.
#[cold]
#[inline(never)]
fn reset_outgrown(
    cache: &BlockCache,
    totals: &mut Stats,
    slot: &mut Slot,
    blocks: &mut SlotBlocks,
) {
    let used = core::mem::take(&mut blocks.retired_used) + *slot.cursor.get_mut();
    blocks.peak = blocks.peak.max(used);
    blocks.outgrown = false;
    for block in blocks.chain.drain(..) {
        give_back(cache, totals, block);
    }
    slot.clear();
}

/// Gives every dedicated block back; returns the bytes that were live in them.
#[cold]
#[inline(never)]
fn reset_dedicated(cache: &BlockCache, shared: &mut Shared) -> usize {
    for (block, _) in shared.dedicated.drain(..) {
        give_back(cache, &mut shared.totals, block);
    }
    core::mem::take(&mut shared.dedicated_live)
}

// SAFETY: a slot's bump region is carved only by its owner thread (or, for
// the fallback slot, under the lock), from blocks this allocator holds until
// `reset`, `rewind`, `release` or drop — all `&mut self` — so every pointer
// is disjoint from the others, aligned (`Slot::bump` pads to the alignment)
// and valid until then. Dedicated blocks are held the same way.
unsafe impl TempAllocator for CachingAllocator {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let tid = raw_thread_id();
        let slot = &self.slots[tid % SLOTS];
        // Only this thread stores its own id, so seeing it means this thread
        // owns the slot, and every field it reads it wrote itself (or a
        // `&mut` method did, before this thread got `&self`). A thread whose
        // id is not assigned yet matches no slot and takes the slow path.
        if slot.owner.load(Relaxed) == tid {
            if let Some(ptr) = slot.bump(layout) {
                return Ok(NonNull::slice_from_raw_parts(ptr, layout.size()));
            }
        }
        self.allocate_slow(layout)
    }

    fn reset(&mut self) {
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if self.config.debug_checks {
            // Before any block goes back: the memory is still ours to poison.
            debug::recycle(shared, 0);
        }
        let mut live = 0;
        let mut owned = shared.owned;
        while owned != 0 {
            let index = owned.trailing_zeros() as usize;
            owned &= owned - 1;
            let (slot, blocks) = (&mut self.slots[index], &mut shared.slots[index]);
            let requested = *slot.requested.get_mut();
            live += requested - blocks.window_start;
            blocks.window_start = requested;
            let cursor = *slot.cursor.get_mut();
            if blocks.outgrown {
                reset_outgrown(&self.cache, &mut shared.totals, slot, blocks);
            } else {
                *slot.cursor.get_mut() = 0;
            }
            if cursor == 0 || index == FALLBACK {
                // A thread that stopped allocating (or exited) gives the slot
                // up; its block stays for whichever thread claims it next.
                *slot.owner.get_mut() = NO_OWNER;
                shared.owned &= !(1 << index);
            }
        }
        if !shared.dedicated.is_empty() {
            live += reset_dedicated(&self.cache, shared);
        }
        shared.totals.high_water = shared.totals.high_water.max(live);
        shared.totals.resets += 1;
    }

    fn stats(&self) -> Stats {
        let shared = self.lock();
        // Slots count their own requests (cumulatively); the totals hold the
        // slow path's (zero-sized and dedicated requests) and the rest.
        let mut stats = shared.totals;
        for slot in self.slots.iter() {
            stats.allocations += slot.allocations.load(Relaxed) as u64;
            stats.bytes_requested += slot.requested.load(Relaxed) as u64;
        }
        stats.high_water = stats.high_water.max(window_live(&self.slots[..], &shared));
        stats
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        self.release();
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
