//! `cargo run --release -p demo`: a transformer at Llama-3.2-1B's
//! geometry (2 layers by default) prefills a long prompt and generates the
//! same tokens with every temp allocator, each in a process of its own and
//! several times in a rotated order, and the demo prints what each
//! allocator cost: time per token, time inside the allocator, page faults,
//! system allocations, memory held over memory live and the process's peak
//! resident memory. See docs/demo.md.
//!
//! The modules are listed again in `mimalloc.rs`, the root of the
//! `demo-mimalloc` binary: the same demo with another global allocator.

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

/// Counts every system allocation in the process, whichever temp allocator
/// runs, so the allocators are measured the same way.
#[global_allocator]
static SYSTEM: counting::Counting = counting::Counting;

fn main() -> std::process::ExitCode {
    app::main(app::SystemAllocator::Platform)
}
