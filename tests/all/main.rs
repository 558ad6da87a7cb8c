//! The integration tests, one binary with a module per topic.

mod exact_size_cache;
mod recording;
mod trace;
