//! The demo's kernels. Each takes `&KernelContext`, takes its scratch from it
//! and never frees it (the runtime calls each kernel in a kernel frame, which
//! recycles the scratch when the kernel returns), and returns its failure as
//! an `Error` instead of panicking, as a kernel in a runtime that must not
//! abort has to.

pub mod quantize;
pub mod sample;
pub mod sdpa;
