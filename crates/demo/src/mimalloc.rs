//! `demo-mimalloc`: the demo with mimalloc as the global allocator, so that
//! `MallocAllocator` (and every other allocation) goes to mimalloc. The
//! `demo` binary runs it as a child for its `malloc/mimalloc` row (a
//! process has one global allocator, so that row needs a binary of its
//! own); run on its own (`cargo run --release -p demo --bin demo-mimalloc`) it
//! is the whole demo over mimalloc.

#[path = "../../../examples/common/allocators.rs"]
mod allocators;
mod app;
mod child;
mod cli;
#[path = "../../../examples/common/counting.rs"]
mod counting;
#[path = "../../../examples/common/exact_size_cache.rs"]
mod exact_size_cache;
mod kernels;
mod model;
// The library's generator and median, private to it: included as source.
#[allow(dead_code)]
#[path = "../../../src/trace/numbers.rs"]
mod numbers;
mod plot;
mod prewarm;
mod process;
mod reference;
mod report;
mod rng;
mod runtime;

/// mimalloc, counting every call, as the demo counts the platform's.
#[global_allocator]
static MIMALLOC: counting::CountingOver<mimalloc::MiMalloc> =
    counting::CountingOver(mimalloc::MiMalloc);

fn main() -> std::process::ExitCode {
    app::main(app::SystemAllocator::Mimalloc)
}
