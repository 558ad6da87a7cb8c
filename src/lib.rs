//! Fast, aligned scratch memory for inference kernels, recycled all at once.
//!
//! A runtime owns a [`TempAllocator`] and hands each kernel a
//! [`KernelContext`]; the kernel takes scratch from it (bytes with
//! [`allocate_temp`](KernelContext::allocate_temp), typed slices with
//! [`scratch`](KernelContext::scratch), or collections through the
//! [`allocator_api2`] `Allocator` impl) and never frees anything. When the
//! kernel or the inference ends the runtime calls
//! [`reset`](TempAllocator::reset), which recycles every buffer at once.
//! Because `reset` takes `&mut self`, using a buffer after the reset that
//! recycles it does not compile.
//!
//! Implementations:
//!
//! - [`CachingAllocator`]: the one to use. Per-thread bump regions over
//!   recycled blocks from a shared, budgeted [`BlockCache`]; zero system
//!   allocations after warm-up; checkpoints for per-kernel rewinds.
//! - [`MallocAllocator`]: every request is a system allocation; the baseline.
//! - [`BumpAllocator`]: a `bumpalo::Bump` behind the trait, single-threaded.
//! - [`RecordingAllocator`]: any of them, recording every call as a
//!   [`trace::Trace`] that [`trace`] can write, read, generate and replay.
//!
//! ```
//! use tempalloc::{with_context, KernelContext, MallocAllocator, TempAllocator};
//!
//! // A kernel: takes scratch from the context, reports failure through it.
//! fn row_sums(ctx: &KernelContext, rows: &[[f32; 4]]) -> f32 {
//!     let Ok(sums) = ctx.scratch::<f32>(rows.len()) else {
//!         ctx.fail(tempalloc::Error::NoTempAllocator);
//!         return 0.0;
//!     };
//!     for (s, row) in sums.iter_mut().zip(rows) {
//!         *s = row.iter().sum();
//!     }
//!     sums.iter().sum()
//! }
//!
//! // A runtime: one context per execute call, one reset after it.
//! let mut temp = MallocAllocator::new();
//! let rows = [[1.0; 4]; 8];
//! for _inference in 0..3 {
//!     let total = with_context(&mut temp, |ctx| row_sums(ctx, &rows));
//!     assert_eq!(total, 32.0);
//! }
//! assert_eq!(temp.stats().resets, 3);
//! ```
#![deny(
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]

mod block;
mod block_cache;
mod bump;
mod caching;
#[cfg(feature = "capi")]
pub mod capi;
mod chunk;
mod context;
#[cfg(feature = "dyn-stack")]
mod dyn_stack;
mod error;
mod fixed;
pub use fixed::{FixedAllocator, FixedCheckpoint};
mod malloc;
mod os;
mod recording;
mod stats;
mod temp;
pub mod trace;

pub use block_cache::{BlockCache, CacheStats};
pub use bump::BumpAllocator;
pub use caching::{CachingAllocator, CachingConfig, Checkpoint};
pub use context::{KernelContext, SyncKernelContext, with_context};
pub use error::Error;
pub use malloc::MallocAllocator;
pub use recording::{RecordedCheckpoint, RecordingAllocator};
pub use stats::Stats;
pub use temp::TempAllocator;

// The README's example compiles and runs as a doctest, so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
