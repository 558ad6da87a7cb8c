//! Fast, aligned scratch memory for inference kernels, recycled all at once.
//!
//! A runtime owns a [`TempAllocator`] and hands each kernel a
//! [`KernelContext`]; the kernel takes scratch from it (bytes with
//! [`allocate_temp`](KernelContext::allocate_temp), typed slices with
//! [`scratch`](KernelContext::scratch) and
//! [`scratch_aligned`](KernelContext::scratch_aligned), or collections such as
//! [`ScratchVec`]) and never frees anything. When the
//! kernel or the inference ends the runtime calls
//! [`reset`](TempAllocator::reset), which recycles every buffer at once.
//! Because `reset` takes `&mut self`, using a buffer after the reset that
//! recycles it does not compile.
//!
//! Implementations:
//!
//! - [`CachingAllocator`]: the one to use. A bump region per thread that
//!   grows in place (reserved address space, pages committed as needed),
//!   memory shared and limited through a [`BlockCache`]; zero system
//!   allocations after warm-up; checkpoints and frames for per-kernel rewinds.
//! - [`FixedAllocator`]: a caller's buffer, never a system allocation.
//! - [`MallocAllocator`]: every request is a system allocation; the baseline.
//! - [`BumpAllocator`]: a `bumpalo::Bump` behind the trait, single-threaded.
//! - [`AnyTemp`]: one of the above, picked at run time, with frames.
//! - [`RecordingAllocator`]: any of them, recording every call as a
//!   [`trace::Trace`] that [`trace`] can write, read, generate and replay.
//!
//! ```
//! use tempalloc::{with_context, Error, KernelContext, MallocAllocator, TempAllocator};
//!
//! // A kernel: takes scratch from the context, returns the real error.
//! fn row_sums(ctx: &KernelContext, rows: &[[f32; 4]]) -> Result<f32, Error> {
//!     let sums = ctx.scratch::<f32>(rows.len())?;
//!     for (s, row) in sums.iter_mut().zip(rows) {
//!         *s = row.iter().sum();
//!     }
//!     Ok(sums.iter().sum())
//! }
//!
//! // A runtime: one context per execute call, one reset after it.
//! let mut temp = MallocAllocator::new();
//! let rows = [[1.0; 4]; 8];
//! for _inference in 0..3 {
//!     let total = with_context(&mut temp, |ctx| row_sums(ctx, &rows))?;
//!     assert_eq!(total, 32.0);
//! }
//! assert_eq!(temp.stats().resets, 3);
//! # Ok::<(), Error>(())
//! ```
//!
//! With a [`Rewind`] allocator such as [`CachingAllocator`], a runtime runs
//! each inference in a [`Frame`] and each kernel in a kernel frame, so
//! inference-long scratch (activations) survives the per-kernel recycling
//! without `unsafe`; see [`CachingAllocator::frame`]. A frame takes scratch
//! with the context's methods (it derefs to a [`KernelContext`]), and
//! collections that grow between kernels use its
//! [`allocator`](Frame::allocator). Kernels and runtimes return their own
//! error type: anything [`Error`] converts into.
//!
//! # Features
//!
//! - `std` (default): everything below [`FixedAllocator`] in the list above,
//!   [`BlockCache`] and [`trace`]. Without it the crate is
//!   `#![no_std]` and needs no heap: [`TempAllocator`], [`KernelContext`],
//!   [`with_context`], [`Rewind`], [`Frame`], [`FrameAllocator`], [`Error`],
//!   [`Stats`] and [`FixedAllocator`] use only `core` (and compare-and-swap, which
//!   Cortex-M3 and later have), so a kernel builds unchanged for a
//!   microcontroller. CI builds that configuration for
//!   `thumbv7em-none-eabihf`.
//! - `alloc`: [`ScratchVec`], [`FrameVec`], [`ScratchVecExt`] and the
//!   `TempAllocator` impl for `Box`, for
//!   targets with a global allocator but no operating system (`std` turns
//!   it on).
//! - `derive` (default): `#[derive(tempalloc::Zeroable)]` for a kernel's own
//!   element types, and `tempalloc::bytemuck` for its `crate` attribute
//!   (see [`Zeroable`]).
//! - `dyn-stack`: `KernelContext::mem_stack`, a `dyn_stack::MemStack` carved
//!   from scratch for faer's routines, and `tempalloc::dyn_stack` (the
//!   crate, re-exported).
//! - `capi`: the C API (module `capi`, docs/capi.md); `cli`: the
//!   `tempalloc-replay` binary. Both turn on `std`.
//! - `test-util`: `tempalloc::testing`, failure injection for tests (a
//!   request, a system allocation or a system call made to fail). Not for
//!   production builds: turn it on where the tests are, as with tokio's
//!   `test-util`:
//!
//!   ```toml
//!   [dev-dependencies]
//!   tempalloc = { version = "0.1", features = ["test-util"] }
//!   ```
//!
//!   It needs `std` (on by default) and does not turn it on.
//!
//! On docs.rs every item says which feature it needs.
#![cfg_attr(not(feature = "std"), no_std)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item says which
// feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link the `std` allocators; without `std` those links have nothing
// to point at, and the text stays.
#![cfg_attr(not(feature = "std"), allow(rustdoc::broken_intra_doc_links))]
#![deny(
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]

#[cfg(feature = "alloc")]
extern crate alloc;
// Unit tests use threads even where the library does not.
#[cfg(all(test, not(feature = "std")))]
extern crate std;

// The modules, top layer first: each imports only from the ones listed
// after it (its own submodules aside).
//
//   capi         the C ABI over a `CachingAllocator` and a `BlockCache`
//   testing      failure injection for tests (`test-util`)
//   any          `AnyTemp`: one of the allocators below, picked at run time
//   recording    `RecordingAllocator`: any allocator, writing a trace
//   trace        traces: read, write, generate, replay, plan
//   caching      `CachingAllocator`: regions, leases, growth, budgets; its
//                memory (`caching::memory`: chunks, blocks, the block
//                cache, the ledger); `Plan`, what prewarm commits
//   bump, malloc the two allocators over `bumpalo` and the system heap
//   os           pages, reservations, commits, per platform
//   scratch_vec, mem_stack   collections and faer's stack in scratch
//   fixed        `FixedAllocator`: a caller's buffer
//   frame        `Rewind`, `Frame`, `FrameAllocator`
//   context      `KernelContext`, what a kernel sees, and `with_context`
//   temp         the `TempAllocator` trait
//   failure      a context's recorded failure
//   stats, error `Stats`, `Error`
//   fast_path    what a context inlines so that a request makes no call:
//                a `FixedAllocator`'s bump state, a `CachingAllocator`'s
//                header, its regions' bump state and the thread-local lease

// `core` only: what a kernel and a heap-less runtime need.
mod context;
mod error;
mod failure;
mod fast_path;
mod fixed;
mod frame;
#[cfg(feature = "dyn-stack")]
mod mem_stack;
mod stats;
mod temp;

pub use context::{KernelContext, with_context};
pub use error::Error;
pub use fixed::{FixedAllocator, FixedCheckpoint};
pub use frame::{Frame, FrameAllocator, Rewind};
pub use stats::Stats;
pub use temp::TempAllocator;

#[cfg(feature = "alloc")]
mod scratch_vec;
#[cfg(feature = "alloc")]
pub use scratch_vec::{FrameVec, ScratchVec, ScratchVecExt};

// `std`: the allocators that take memory from the system, and their tools.
// Each item carries its own `cfg` (not a macro around them all): rustfmt
// formats only the modules it can see declared.
#[cfg(feature = "std")]
mod any;
#[cfg(feature = "std")]
mod bump;
#[cfg(feature = "std")]
mod caching;
#[cfg(feature = "std")]
mod malloc;
#[cfg(feature = "std")]
mod os;
#[cfg(feature = "std")]
mod recording;
// Test aids, with `test-util` only: a production build has none of them.
#[cfg(all(feature = "std", feature = "test-util"))]
pub mod testing;
#[cfg(feature = "std")]
pub mod trace;

#[cfg(feature = "std")]
pub use any::{AnyCheckpoint, AnyTemp, DynRewind};
#[cfg(feature = "std")]
pub use bump::{BumpAllocator, BumpCheckpoint};
#[cfg(feature = "std")]
pub use caching::{BlockCache, CacheStats, CachingAllocator, CachingConfig, Checkpoint};
#[cfg(feature = "std")]
pub use malloc::{MallocAllocator, MallocCheckpoint};
#[cfg(feature = "std")]
pub use recording::{RecordedCheckpoint, RecordingAllocator};

#[cfg(feature = "capi")]
pub mod capi;

/// The `Allocator` trait [`ScratchVec`] and the `&KernelContext` allocator
/// use, re-exported so a user needs no version match.
pub use allocator_api2;
/// The marker for types whose all-zero bytes are valid, which
/// [`KernelContext::scratch`] needs (from `bytemuck`). With the `derive`
/// feature (on by default) it is also bytemuck's derive macro, for a kernel's own element
/// types; point the derive at this crate's re-export of `bytemuck`, so that
/// it needs no dependency of its own:
///
/// ```
/// use tempalloc::{KernelContext, MallocAllocator};
///
/// #[derive(Clone, Copy, tempalloc::Zeroable)]
/// #[bytemuck(crate = "tempalloc::bytemuck")]
/// struct Accum {
///     sum: f32,
///     count: u32,
/// }
///
/// let temp = MallocAllocator::new();
/// let acc = KernelContext::new(&temp).scratch::<Accum>(4)?;
/// assert!(acc.iter().all(|a| a.sum == 0.0 && a.count == 0));
/// # Ok::<(), tempalloc::Error>(())
/// ```
pub use bytemuck::Zeroable;

/// `bytemuck`, for `#[bytemuck(crate = "tempalloc::bytemuck")]` on a
/// `#[derive(tempalloc::Zeroable)]` (see [`Zeroable`]).
#[cfg(feature = "derive")]
pub use bytemuck;
/// `dyn-stack`, whose `StackReq` [`KernelContext::mem_stack`] takes, so a
/// user needs no version match.
#[cfg(feature = "dyn-stack")]
pub use dyn_stack;

// The README's example compiles and runs as a doctest, so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Names removed before the first release stay removed. One context type
/// serves every kernel:
///
/// ```compile_fail,E0432
/// use tempalloc::SyncKernelContext;
/// ```
///
/// ```compile_fail,E0599
/// let temp = tempalloc::MallocAllocator::new();
/// let _ = tempalloc::KernelContext::new_sync(&temp);
/// ```
///
/// The workloads' generator and median are private (the demo and benches
/// include their file as source):
///
/// ```compile_fail,E0432
/// use tempalloc::trace::SplitMix64;
/// ```
///
/// ```compile_fail,E0425
/// let _ = tempalloc::trace::median(&mut [1.0]);
/// ```
#[cfg(doctest)]
struct RemovedItems;

/// A `BlockCache` evicts idle memory with `evict_idle`: its `trim` (a verb
/// `CachingAllocator::trim`, which decommits pages, keeps) and
/// `release_all` (`evict_idle(0)`) are gone, so that one verb means one
/// thing:
///
/// ```compile_fail,E0599
/// let cache = tempalloc::BlockCache::with_idle_budget(0);
/// cache.trim(0);
/// ```
///
/// ```compile_fail,E0599
/// let cache = tempalloc::BlockCache::with_idle_budget(0);
/// cache.release_all();
/// ```
#[cfg(all(doctest, feature = "std"))]
struct RemovedCacheItems;

/// The C API says it the same way: `tempalloc_block_cache_evict_idle`, and
/// no `_trim` or `_release_all`:
///
/// ```compile_fail,E0432
/// use tempalloc::capi::tempalloc_block_cache_trim;
/// ```
///
/// ```compile_fail,E0432
/// use tempalloc::capi::tempalloc_block_cache_release_all;
/// ```
#[cfg(all(doctest, feature = "capi"))]
struct RemovedCapiItems;
