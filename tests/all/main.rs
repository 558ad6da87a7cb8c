//! The integration tests, one binary with a directory per promise:
//!
//! - `scratch`: every allocator hands out scratch that is aligned, disjoint,
//!   typed and counted, and collections grow in it.
//! - `frames`: scratch lives until its scope (frame, kernel, checkpoint,
//!   `with_context`) ends, and a kernel's failure comes out of it.
//! - `allocators`: each allocator other than `CachingAllocator` keeps its own
//!   promises (and the model of ExecuTorch's the benchmarks compare against).
//! - `memory`: what a `CachingAllocator` holds follows what its threads use
//!   in one window, within `max_bytes`, across sessions, with nothing leaked.
//! - `failures`: bad input, exhausted memory, refused system calls and
//!   injected faults are errors with their numbers (or a clean fallback),
//!   never a crash, and the allocator serves the next request.
//! - `traces`: a workload recorded, replayed and planned.
//! - `capi`: the C ABI, its checks and the C and C++ of its docs.
//!
//! Without the `std` feature (`cargo test --no-default-features --test all`)
//! only the modules that need nothing but `core` from the library are built,
//! and the generic tests run against `FixedAllocator` alone.

mod util;

// `core` only from the library (each directory declares its `std` modules
// with their own `cfg`): these run without `std` too.
mod allocators;
mod counting;
mod doc_paths;
mod frames;
mod scratch;

// The directories that need the library's `std` allocators throughout, each
// with its own `cfg` (not a macro around them all: rustfmt formats only the
// modules it can see declared).
#[cfg(feature = "std")]
mod capi;
#[cfg(feature = "std")]
mod failures;
#[cfg(feature = "std")]
mod memory;
// The shapes of work the promise files of `CachingAllocator` share.
#[cfg(feature = "std")]
mod scenarios;
#[cfg(feature = "std")]
mod traces;
