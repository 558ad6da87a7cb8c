//! The integration tests, one binary with a module per topic.

mod util;

mod alignment;
mod bad_input;
mod bump;
mod caching;
mod capi;
mod context;
mod debug_checks;
#[cfg(feature = "dyn-stack")]
mod dyn_stack;
mod errors;
mod exact_size_cache;
mod faults;
mod fixed;
mod frames;
mod hashbrown_map;
mod leaks;
mod malloc;
mod model;
mod patterns;
mod recording;
mod regions;
mod stats;
mod stress;
mod testing;
mod trace;
mod typed;
mod vec_in;
