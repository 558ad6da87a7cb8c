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

/// Puts `#[cfg(feature = "std")]` on each module it is given.
macro_rules! with_std {
    ($($item:item)*) => { $( #[cfg(feature = "std")] $item )* };
}

// The modules that need the library's `std` allocators.
with_std! {
    mod any_temp;
    mod bad_input;
    mod budget;
    mod bump;
    mod capi;
    mod capi_checks;
    mod capi_docs;
    mod checkpoints;
    mod context;
    mod debug_checks;
    mod errors;
    mod exact_size_cache;
    mod fallback;
    mod faults;
    mod grow_in_place;
    mod handled;
    mod footprint;
    mod hashbrown_map;
    mod leaks;
    mod malloc;
    mod model;
    mod plan;
    mod recording;
    mod refusals;
    mod replay_cli;
    mod scenarios;
    mod sessions;
    mod stress;
    mod testing;
    mod threads;
    mod trace;
    mod vec_in;
    mod work;
}
