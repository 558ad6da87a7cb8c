//! Where a caching allocator's memory comes from, below its regions (which
//! this module knows nothing of): [`Block`](block::Block)s of heap memory
//! and their size classes (`block.rs`), the [`Chunk`](chunk::Chunk) a
//! region bumps through — a reservation or a heap block — (`chunk.rs`), the
//! [`BlockCache`](block_cache::BlockCache) many allocators share under one
//! budget (`block_cache.rs`), and the [`Ledger`](ledger::Ledger) that
//! counts what is held under a limit (`ledger.rs`).

pub(super) mod block;
pub(super) mod block_cache;
pub(super) mod chunk;
pub(super) mod ledger;

/// A lock's guard, just taken: counted for `testing::locks_taken` in
/// builds with `test-util`, nothing in others.
#[inline(always)]
pub(super) fn counted<G>(guard: G) -> G {
    #[cfg(feature = "test-util")]
    crate::testing::count_lock();
    guard
}
