//! The allocators the replay example and the benchmarks compare, by name.
//! Needs `mod exact_size_cache;` at the including crate's root.
#![allow(dead_code)]

use tempalloc::{BumpAllocator, CachingAllocator, MallocAllocator, TempAllocator};

use crate::exact_size_cache::ExactSizeCache;

/// Makes a fresh allocator.
pub type Constructor = fn() -> Box<dyn TempAllocator>;

/// Every allocator, in table order: (name, constructor).
pub const ALLOCATORS: &[(&str, Constructor)] = &[
    ("malloc", || Box::new(MallocAllocator::new())),
    ("exact-size-cache", || Box::new(ExactSizeCache::new())),
    ("bumpalo", || Box::new(BumpAllocator::new())),
    ("caching", || Box::new(CachingAllocator::new())),
];

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
