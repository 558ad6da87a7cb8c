//! Refused system calls: `testing::refuse_system_calls` makes this thread's
//! reservations, commits or decommits fail, as a system that says no would
//! (`ulimit -v`, a full commit limit, a kernel that rejects the boundary).
//! Each is an error or a clean fallback: never a crash, never a lost buffer,
//! and the books say what the system did.

use tempalloc::testing::SystemCall;
use tempalloc::{CachingAllocator, CachingConfig, KernelContext, TempAllocator};

use crate::util::{Refusing, check, fill};

fn fast() -> CachingConfig {
    CachingConfig::default().debug_checks(false)
}

#[test]
fn refused_reservations_fall_back_to_heap_blocks_that_serve_every_request() {
    let _refusing = Refusing::every(SystemCall::Reserve);
    let mut temp = CachingAllocator::with_config(fast());
    let cache = std::sync::Arc::clone(temp.cache());
    // Under Miri (which reserves nothing, so every region is heap blocks
    // anyway) an eighth of the bytes and three windows: still a block per
    // size, a page-aligned request that grows every window, and reuse
    // after each reset.
    let (windows, div) = if cfg!(miri) { (3, 8) } else { (4, 1) };
    for window in 0..windows {
        let ctx = KernelContext::new(&temp);
        let a = fill(ctx.allocate_temp(100_000 / div, 64).unwrap(), 1);
        let b = fill(
            ctx.allocate_temp((300_000 + window * 50_000) / div, 4096)
                .unwrap(),
            2,
        );
        let c = fill(ctx.allocate_temp((2 << 20) / div, 64).unwrap(), 3);
        check(a, 1);
        check(b, 2);
        check(c, 3);
        temp.reset();
    }
    assert_eq!(temp.stats().bytes_live, 0);
    // The fallback happened: heap blocks served, nothing was reserved.
    let c = cache.stats();
    assert!(c.heap_blocks > 0 && c.reservations == 0, "{c}");
}

#[test]
fn a_refused_commit_moves_the_region_and_loses_nothing() {
    let mut temp = CachingAllocator::with_config(fast());
    let ctx = KernelContext::new(&temp);
    let a = fill(ctx.allocate_temp(10_000, 64).unwrap(), 1);
    let held = temp.stats().bytes_held;
    let _refusing = Refusing::calls(SystemCall::Commit, 0, 1);
    // Past the first commit: the region must grow, and the system says no
    // to that range, not to memory: the region moves to other memory.
    let b = fill(ctx.allocate_temp(1 << 20, 64).unwrap(), 2);
    assert!(temp.stats().bytes_held > held, "{}", temp.stats());
    // On heap blocks there is no commit to refuse: the region moved to a
    // larger block all the same.
    let refusals = u64::from(crate::scenarios::mapped());
    assert_eq!(
        temp.cache().stats().refusals,
        refusals,
        "{}",
        temp.cache().stats()
    );
    check(a, 1);
    check(b, 2);
    let c = fill(ctx.allocate_temp(1 << 20, 64).unwrap(), 3);
    check(a, 1);
    check(c, 3);
    temp.reset();
    assert_eq!(temp.stats().bytes_live, 0);
}

#[test]
fn a_refused_decommit_keeps_the_counts_and_the_region_still_grows() {
    // A review found `trim` at a boundary a 16 KiB kernel rejects lowering
    // `bytes_held` with nothing freed, after which every growth of the
    // region failed. The books must follow what the system did.
    // The region's chunk keeps a window's 2 MiB committed; 10 000 bytes of
    // the next window are live below them. (Heap blocks stay whole under
    // `trim`, so where regions fall back to them nothing changes either.)
    let mut temp = CachingAllocator::with_config(fast());
    KernelContext::new(&temp)
        .allocate_temp(2 << 20, 64)
        .unwrap();
    temp.reset();
    let kept = fill(
        KernelContext::new(&temp).allocate_temp(10_000, 64).unwrap(),
        4,
    )
    .as_ptr();
    let before = temp.stats();
    let refusing = Refusing::every(SystemCall::Decommit);
    temp.trim();
    let after = temp.stats();
    assert_eq!(
        (after.bytes_held, after.system_frees),
        (before.bytes_held, before.system_frees),
        "{after}"
    );
    // The pages are still committed: the region grows over them and past.
    drop(refusing);
    let big = fill(
        KernelContext::new(&temp)
            .allocate_temp(3 << 20, 64)
            .unwrap(),
        5,
    );
    check(big, 5);
    // SAFETY: 10 000 bytes taken in this window, not reset since.
    check(unsafe { std::slice::from_raw_parts(kept, 10_000) }, 4);
    temp.reset();
    assert_eq!(temp.stats().bytes_live, 0);
}
