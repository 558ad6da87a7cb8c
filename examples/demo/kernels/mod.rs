//! The demo's kernels. Each takes `&KernelContext`, takes its scratch from it
//! and never frees it (the runtime resets after the call), and records a
//! failure with `ctx.fail` instead of panicking, as a kernel in a runtime
//! that must not abort has to.

pub mod quantize;
pub mod sample;
pub mod sdpa;

use tempalloc::{Error, KernelContext};

/// Records `result`'s error in `ctx` and returns the value, if any: the one
/// place where a kernel's `?`-style body meets the context's failure state.
fn report<T>(ctx: &KernelContext, result: Result<T, Error>) -> Option<T> {
    result.map_err(|error| ctx.fail(error)).ok()
}
