//! A request that cannot be served is an error with its numbers, or a clean
//! fallback, never a panic or an abort, and the allocator serves the next
//! request: bad input (`bad_input`, `errors`), refusals a kernel handles
//! (`handled`), system calls the system refuses (`refusals`, `fallback`),
//! injected faults (`faults`, `testing`), and writes past a buffer's end
//! (`debug_checks`).

mod bad_input;
mod debug_checks;
mod errors;
mod fallback;
mod faults;
mod handled;
mod refusals;
mod testing;
