//! `exact-size-cache`: a model of ExecuTorch's `CPUCachingAllocator`
//! (extension/memory_allocator), the design `tempalloc` is measured against.
//! Not library API: the replay example, the benchmarks and the tests include
//! this file with `#[path = ...] mod exact_size_cache;`.
//!
//! What it does, as in the C++ class:
//!
//! - one `std::sync::Mutex` around every call (`reset` included);
//! - `available`: size -> free pointers; `live`: pointer -> size, updated on
//!   every request;
//! - `allocate(size, align)` rejects a non-power-of-two alignment, raises the
//!   alignment to at least 64, grows the size by `align - 1` when the
//!   alignment is above 16 (so always), looks up that exact size, mallocs a
//!   new block on a miss (the total may pass the cap) and aligns the pointer
//!   up inside the block;
//! - `reset` frees **everything** (cached and live) and starts from zero when
//!   the total allocated since the last such purge exceeds the cap, and
//!   otherwise moves every live block to the free lists;
//! - `rewind` (for frames; ExecuTorch has none, it resets after every
//!   instruction instead) does the same to the blocks handed out after the
//!   checkpoint, and over the cap frees every block that is not live, so a
//!   kernel frame costs what ExecuTorch's reset after that kernel costs;
//! - the cap is a `u32`, 10 MiB by default (ExecuTorch's LLM runner).
//!
//! Cost model: C++'s `std::unordered_map` allocates a node for every insert
//! of a new key and frees it on `clear()`. The `Box` in `live` stands for the
//! `allocation_map_` node (one system allocation per request, even on a cache
//! hit), the `Box` in `available` for the `available_map_` node that holds a
//! size's vector, so a counting global allocator sees the system
//! allocations the C++ class makes. The hash
//! is a cheap multiplicative one, like libstdc++'s identity `std::hash`, so
//! SipHash does not make the model slower than the original. Blocks come
//! from `std::alloc` with malloc's 16-byte alignment.
#![allow(dead_code)]

use std::alloc::Layout;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tempalloc::{Error, Rewind, Stats, TempAllocator};

/// ExecuTorch's default cap for the LLM runner's temp allocator: 10 MiB.
pub const DEFAULT_CAP: u32 = 10 << 20;

/// What malloc guarantees on 64-bit targets.
const MALLOC_ALIGN: usize = 16;

/// ExecuTorch's `kCachingAllocatorDefaultAlignment`.
const MIN_ALIGN: usize = 64;

/// A model of ExecuTorch's `CPUCachingAllocator`; see the module docs.
#[derive(Debug)]
pub struct ExactSizeCache {
    cap: u32,
    state: Mutex<State>,
    /// Tells this allocator's checkpoints from another's.
    id: u64,
}

/// A position in an [`ExactSizeCache`]'s window, for [`Rewind`].
#[derive(Debug)]
pub struct ExactCheckpoint {
    allocator: u64,
    resets: u64,
    /// Requests served before it: the blocks of later ones are recycled.
    served: u64,
}

#[derive(Debug, Default)]
struct State {
    /// `available_map_`: grown size -> free blocks of exactly that size.
    /// The `Box` is the C++ map node holding the vector.
    #[allow(clippy::box_collection)]
    available: HashMap<usize, Box<Vec<Block>>, Hash>,
    /// `allocation_map_`: block -> grown size, for blocks handed out since
    /// the last reset. The `Box` is the C++ map node (one malloc per insert).
    live: HashMap<Block, Box<Live>, Hash>,
    /// `current_size_`: bytes malloced since the last purge (= bytes held).
    current_size: usize,
    /// Requested bytes handed out since the last reset.
    live_bytes: usize,
    stats: Stats,
}

/// What `live` knows of a block handed out.
#[derive(Debug)]
struct Live {
    /// The block's size (the request grown for alignment).
    grown: usize,
    requested: usize,
    /// `stats.allocations` once it was served, to tell which blocks a
    /// rewind recycles.
    serial: u64,
}

/// A block from the system allocator (the pointer malloc returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Block(NonNull<u8>);

// SAFETY: a block is an owned system allocation with no thread affinity.
unsafe impl Send for Block {}

type Hash = BuildHasherDefault<MulHasher>;

/// One multiply per key (Fx-style): cheap, and spreads pointer bits.
#[derive(Debug, Default)]
struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

impl Default for ExactSizeCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactSizeCache {
    /// The allocator with ExecuTorch's 10 MiB cap.
    pub fn new() -> Self {
        Self::with_cap(DEFAULT_CAP)
    }

    /// The allocator with a cap of `cap` bytes.
    pub fn with_cap(cap: u32) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        ExactSizeCache {
            cap,
            state: Mutex::new(State::default()),
            id: NEXT_ID.fetch_add(1, Relaxed),
        }
    }

    /// The cap, in bytes.
    pub fn cap(&self) -> u32 {
        self.cap
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // State is consistent between statements that can panic, so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// `free_everything()`: frees cached and live blocks, starts from zero.
    fn free_everything(&mut self) {
        let mut freed = Freed::default();
        for (block, live) in self.live.drain() {
            freed.free(block, live.grown);
        }
        self.count(freed);
        self.free_cached();
    }

    /// Frees every block on the free lists.
    fn free_cached(&mut self) {
        let mut freed = Freed::default();
        for (size, blocks) in self.available.drain() {
            for block in *blocks {
                freed.free(block, size);
            }
        }
        self.count(freed);
    }

    fn count(&mut self, freed: Freed) {
        self.stats.system_frees += freed.blocks;
        self.current_size -= freed.bytes;
        self.stats.bytes_held = self.current_size;
    }
}

/// Blocks given back to the system, to be counted in [`State`]: tallied
/// apart so blocks can be freed while the maps are borrowed.
#[derive(Debug, Default)]
struct Freed {
    blocks: u64,
    bytes: usize,
}

impl Freed {
    /// Returns `block` of `size` bytes to the system; the caller took it out
    /// of the maps, so each block is freed once.
    fn free(&mut self, block: Block, size: usize) {
        // SAFETY: `block` came from `std::alloc::alloc` with exactly this
        // layout (the size it is filed under, malloc's alignment), which was
        // valid then, and it is freed once (see above).
        unsafe {
            std::alloc::dealloc(
                block.0.as_ptr(),
                Layout::from_size_align_unchecked(size, MALLOC_ALIGN),
            )
        }
        self.blocks += 1;
        self.bytes += size;
    }
}

// SAFETY: a block is handed out only while it is in `live`, which `reset`
// (needing `&mut self`) empties; a fresh block comes from `std::alloc`, a
// cached one was removed from its free list, so live blocks are disjoint.
// Each block is `size + align - 1` bytes with `align >= 64 >= MALLOC_ALIGN`,
// so the pointer aligned up inside it leaves at least `size` bytes.
unsafe impl TempAllocator for ExactSizeCache {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        let (size, mut align) = (layout.size(), layout.align());
        if !align.is_power_of_two() {
            return Err(Error::InvalidAlignment { align });
        }
        align = align.max(MIN_ALIGN);
        let grown = if align > 16 {
            size.checked_add(align - 1)
        } else {
            Some(size)
        };
        let grown = grown
            .filter(|g| Layout::from_size_align(*g, MALLOC_ALIGN).is_ok())
            .ok_or(Error::SizeOverflow { size, align })?;

        let mut guard = self.state();
        let state = &mut *guard;
        state.stats.allocations += 1;
        state.stats.bytes_requested += size as u64;
        let block = match state.available.get_mut(&grown).and_then(|free| free.pop()) {
            Some(block) => {
                state.stats.cache_hits += 1;
                block
            }
            None => {
                // SAFETY: `grown >= 63 > 0` and the layout was checked above.
                let raw = unsafe {
                    std::alloc::alloc(Layout::from_size_align_unchecked(grown, MALLOC_ALIGN))
                };
                let ptr = NonNull::new(raw).ok_or(Error::OutOfMemory {
                    size: grown,
                    align: MALLOC_ALIGN,
                })?;
                state.stats.cache_misses += 1;
                state.stats.system_allocations += 1;
                state.current_size += grown;
                state.stats.bytes_held = state.current_size;
                Block(ptr)
            }
        };
        let serial = state.stats.allocations;
        state.live.insert(
            block,
            Box::new(Live {
                grown,
                requested: size,
                serial,
            }),
        );
        state.live_bytes += size;
        state.stats.high_water = state.stats.high_water.max(state.live_bytes);
        let addr = block.0.as_ptr().addr();
        let offset = (addr.wrapping_add(align - 1) & !(align - 1)).wrapping_sub(addr);
        // SAFETY: `offset < align` and the block is `size + align - 1` bytes,
        // so the aligned pointer and `size` bytes after it are in the block.
        let aligned = unsafe { block.0.add(offset) };
        Ok(NonNull::slice_from_raw_parts(aligned, size))
    }

    fn reset(&mut self) {
        let cap = self.cap;
        let mut guard = self.state();
        let state = &mut *guard;
        state.stats.resets += 1;
        state.live_bytes = 0;
        if state.current_size > cap as usize {
            state.free_everything();
        } else {
            for (block, live) in state.live.drain() {
                state.available.entry(live.grown).or_default().push(block);
            }
        }
    }

    fn stats(&self) -> Stats {
        self.state().stats
    }
}

impl Drop for ExactSizeCache {
    fn drop(&mut self) {
        self.reset();
        self.state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .free_everything();
    }
}

// SAFETY: a rewind takes out of `live` only the blocks served after the
// checkpoint (`serial > served`: `stats.allocations` only grows) and leaves
// the others live and untouched; a foreign or stale checkpoint is refused
// before anything changes. A checkpoint that a rewind to an earlier one
// closed recycles only blocks served after it was taken, which the contract
// allows. Blocks come from `std::alloc`, never from inside the value.
unsafe impl Rewind for ExactSizeCache {
    type Checkpoint = ExactCheckpoint;

    fn checkpoint(&self) -> Result<ExactCheckpoint, Error> {
        let state = self.state();
        Ok(ExactCheckpoint {
            allocator: self.id,
            resets: state.stats.resets,
            served: state.stats.allocations,
        })
    }

    fn rewind(&mut self, checkpoint: ExactCheckpoint) -> Result<(), Error> {
        let cap = self.cap as usize;
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if checkpoint.allocator != self.id {
            return Err(Error::ForeignCheckpoint);
        }
        let now = state.stats.resets;
        if checkpoint.resets != now {
            return Err(Error::StaleCheckpoint {
                taken_at: checkpoint.resets,
                now,
            });
        }
        // As `reset` decides, before anything moves. No buffer of our own:
        // the model must make the system allocations ExecuTorch makes, no more.
        let purge = state.current_size > cap;
        let mut freed = Freed::default();
        let State {
            live,
            available,
            live_bytes,
            ..
        } = state;
        live.retain(|&block, live| {
            if live.serial <= checkpoint.served {
                return true;
            }
            *live_bytes -= live.requested;
            if purge {
                freed.free(block, live.grown);
            } else {
                available.entry(live.grown).or_default().push(block);
            }
            false
        });
        state.count(freed);
        if purge {
            state.free_cached();
        }
        Ok(())
    }
}
