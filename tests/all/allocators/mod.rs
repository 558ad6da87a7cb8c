//! Each allocator other than `CachingAllocator` does what its docs say:
//! `FixedAllocator` (a caller's buffer), `MallocAllocator`, `BumpAllocator`,
//! `AnyTemp` (one chosen at run time), and the model of ExecuTorch's
//! `CPUCachingAllocator` the benchmarks compare against.

mod fixed;

#[cfg(feature = "std")]
mod any_temp;
#[cfg(feature = "std")]
mod bump;
#[cfg(feature = "std")]
mod exact_size_cache;
#[cfg(feature = "std")]
mod malloc;
