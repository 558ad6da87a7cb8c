//! The integration tests, one binary with a module per topic.

mod util;

mod alignment;
mod bump;
mod caching;
mod capi;
mod context;
mod errors;
mod exact_size_cache;
mod malloc;
mod patterns;
mod recording;
mod stats;
mod trace;
mod vec_in;
