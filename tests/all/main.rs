//! The integration tests, one binary with a module per topic.

mod util;

mod alignment;
mod bad_input;
mod bump;
mod caching;
mod capi;
mod context;
mod debug_checks;
mod errors;
mod exact_size_cache;
mod faults;
mod frames;
mod leaks;
mod malloc;
mod model;
mod patterns;
mod recording;
mod stats;
mod stress;
mod testing;
mod trace;
mod typed;
mod vec_in;
