//! The integration tests, one binary with a module per topic.
//!
//! Without the `std` feature (`cargo test --no-default-features --test all`)
//! only the modules that need nothing but `core` from the library are built,
//! and the generic tests run against `FixedAllocator` alone.

mod util;

// `core` only from the library: these run without `std` too.
mod alignment;
mod counting;
mod doc_paths;
#[cfg(all(feature = "std", feature = "dyn-stack"))]
mod dyn_stack;
mod fixed;
mod frame_api;
mod frames;
mod patterns;
mod stats;
mod typed;

// The modules that need the library's `std` allocators, each with its own
// `cfg` (not a macro around them all: rustfmt formats only the modules it
// can see declared).
#[cfg(feature = "std")]
mod any_temp;
#[cfg(feature = "std")]
mod bad_input;
#[cfg(feature = "std")]
mod budget;
#[cfg(feature = "std")]
mod bump;
#[cfg(feature = "std")]
mod capi;
#[cfg(feature = "std")]
mod capi_checks;
#[cfg(feature = "std")]
mod capi_docs;
#[cfg(feature = "std")]
mod checkpoints;
#[cfg(feature = "std")]
mod context;
#[cfg(feature = "std")]
mod debug_checks;
#[cfg(feature = "std")]
mod errors;
#[cfg(feature = "std")]
mod exact_size_cache;
#[cfg(feature = "std")]
mod fallback;
#[cfg(feature = "std")]
mod faults;
#[cfg(feature = "std")]
mod footprint;
#[cfg(feature = "std")]
mod grow_in_place;
#[cfg(feature = "std")]
mod handled;
#[cfg(feature = "std")]
mod hashbrown_map;
#[cfg(feature = "std")]
mod leaks;
#[cfg(feature = "std")]
mod malloc;
#[cfg(feature = "std")]
mod model;
#[cfg(feature = "std")]
mod plan;
#[cfg(feature = "std")]
mod recording;
#[cfg(feature = "std")]
mod refusals;
#[cfg(feature = "std")]
mod replay_cli;
#[cfg(feature = "std")]
mod scenarios;
#[cfg(feature = "std")]
mod sessions;
#[cfg(feature = "std")]
mod stress;
#[cfg(feature = "std")]
mod testing;
#[cfg(feature = "std")]
mod threads;
#[cfg(feature = "std")]
mod trace;
#[cfg(feature = "std")]
mod vec_in;
#[cfg(feature = "std")]
mod work;
