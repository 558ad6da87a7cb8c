//! The allocators the demo, the replay example and the benchmarks compare,
//! by name. Needs `mod exact_size_cache;` at the including crate's root.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use tempalloc::{
    BumpAllocator, CachingAllocator, CachingConfig, MallocAllocator, Rewind, TempAllocator,
};

use crate::exact_size_cache::ExactSizeCache;

/// Makes a fresh allocator.
pub type Constructor = fn() -> Box<dyn TempAllocator>;

/// What to do with each allocator, given its own type: frames need
/// [`Rewind`], which `Box<dyn TempAllocator>` cannot offer (the trait is not
/// object-safe).
pub trait Each {
    type Error;
    fn with<A: Rewind>(&mut self, name: &'static str, temp: A) -> Result<(), Self::Error>;
}

/// One list of (name, constructor), in table order, as both [`ALLOCATORS`]
/// (boxed) and [`each`] (typed), so the two cannot drift apart.
macro_rules! allocators {
    ($($name:literal => $make:expr,)*) => {
        /// Every allocator, in table order: (name, constructor).
        pub const ALLOCATORS: &[(&str, Constructor)] = &[$(($name, || Box::new($make))),*];

        /// Calls `each.with` on a fresh allocator of every kind, in table
        /// order, until one fails.
        pub fn each<E: Each>(each: &mut E) -> Result<(), E::Error> {
            $(each.with($name, $make)?;)*
            Ok(())
        }
    };
}

allocators! {
    "malloc" => MallocAllocator::new(),
    "exact-size-cache" => ExactSizeCache::new(),
    "bumpalo" => BumpAllocator::new(),
    "caching" => caching(),
}

/// Whether `caching` asks for transparent huge pages on its regions
/// (`CachingConfig::huge_pages`): the demo's `--huge-pages`.
pub static CACHING_HUGE_PAGES: AtomicBool = AtomicBool::new(false);

/// `CachingAllocator::new()`, with huge pages if [`CACHING_HUGE_PAGES`] says.
fn caching() -> CachingAllocator {
    let huge = CACHING_HUGE_PAGES.load(Ordering::Relaxed);
    CachingAllocator::with_config(CachingConfig::default().huge_pages(huge))
}

/// The allocator ratios are computed against: `caching` when present, else `malloc`.
pub fn reference(names: &[&str]) -> Option<usize> {
    names
        .iter()
        .position(|n| *n == "caching")
        .or_else(|| names.iter().position(|n| *n == "malloc"))
}

/// The constructor named `name`.
pub fn by_name(name: &str) -> Option<Constructor> {
    ALLOCATORS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}
