//! Fault injection: the system calls a test makes fail on its own thread.
//! [`SystemCall`] names them (public as `tempalloc::testing::SystemCall`),
//! [`refuse`] arms a refusal (behind `tempalloc::testing::refuse_system_calls`)
//! and [`refused`] is what the checked-call layer (`sys.rs`) asks before each
//! call. The state is one const-initialised thread-local cell per thread:
//! no lock, no allocation, no destructor.

use core::cell::Cell;

/// A system call of the OS layer that
/// [`refuse_system_calls`](crate::testing::refuse_system_calls) can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SystemCall {
    /// Reserving address space for a region (`mmap`, `VirtualAlloc(MEM_RESERVE)`).
    /// Refused, a reservation is retried at half the size, down to what the
    /// request needs, then the region falls back to a heap block.
    Reserve,
    /// Committing pages of a reservation (`mprotect`, `VirtualAlloc(MEM_COMMIT)`).
    Commit,
    /// Giving committed pages back (`madvise` + `mprotect`,
    /// `VirtualFree(MEM_DECOMMIT)`), as `trim` does. Refused, the pages stay
    /// committed and counted.
    Decommit,
}

/// One call's injected refusals on one thread: after `skip` more calls,
/// refuse `times` (`u32::MAX`: until cleared).
#[derive(Debug, Clone, Copy)]
struct Refusals {
    skip: u32,
    times: u32,
}

std::thread_local! {
    // Const-initialised and without a destructor: usable from any thread at
    // any time, late thread-local destructors included, never allocating.
    static REFUSALS: Cell<[Refusals; 3]> =
        const { Cell::new([Refusals { skip: 0, times: 0 }; 3]) };
}

fn slot(call: SystemCall) -> usize {
    match call {
        SystemCall::Reserve => 0,
        SystemCall::Commit => 1,
        SystemCall::Decommit => 2,
    }
}

/// Arms the test hook: see [`crate::testing::refuse_system_calls`].
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn refuse(call: SystemCall, skip: u32, times: u32) {
    // Fails only while this thread's locals are destroyed; nothing to arm then.
    let _ = REFUSALS.try_with(|r| {
        let mut all = r.get();
        all[slot(call)] = Refusals { skip, times };
        r.set(all);
    });
}

/// Whether the test hook refuses this `call` on this thread now.
pub(super) fn refused(call: SystemCall) -> bool {
    REFUSALS
        .try_with(|r| {
            let mut all = r.get();
            let this = &mut all[slot(call)];
            let refuse = match *this {
                Refusals { times: 0, .. } => return false,
                Refusals { skip: 0, times } => {
                    if times != u32::MAX {
                        this.times -= 1;
                    }
                    true
                }
                Refusals { skip, .. } => {
                    this.skip = skip - 1;
                    false
                }
            };
            r.set(all);
            refuse
        })
        .unwrap_or(false)
}
