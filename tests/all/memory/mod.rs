//! What a `CachingAllocator` holds follows what its threads use in one
//! window (`footprint`, `threads`, `work`, `stress`), within `max_bytes`
//! (`budget`), across sessions sharing a cache (`sessions`), in agreement
//! with a model (`model`), and nothing leaks (`leaks`). The shapes of work
//! these files share are `crate::scenarios`.

mod budget;
pub mod footprint;
mod leaks;
mod model;
mod sessions;
mod stress;
mod threads;
mod work;
