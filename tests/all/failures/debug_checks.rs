//! `CachingConfig::debug_checks`: canaries after every allocation, poison in
//! recycled memory, overflows reported by `check`, `reset` and `Stats`.

use std::alloc::Layout;
use std::ptr::NonNull;

use tempalloc::{CachingAllocator, CachingConfig, Error, KernelContext, TempAllocator};

use crate::util::{check, fill};

fn checked() -> CachingAllocator {
    CachingAllocator::with_config(
        CachingConfig::default()
            .debug_checks(true)
            .min_block_size(4096),
    )
}

/// Bytes through the raw `TempAllocator` call: a pointer with the whole
/// block's provenance, so a test can write past the end as a buggy kernel
/// would, without undefined behaviour in the test itself.
fn raw(temp: &CachingAllocator, size: usize, align: usize) -> NonNull<u8> {
    let layout = Layout::from_size_align(size, align).unwrap();
    temp.allocate(layout).unwrap().cast()
}

#[test]
fn off_by_default_in_every_build() {
    let config = CachingConfig::default();
    assert!(!config.debug_checks);
    assert!(config.debug_checks(true).debug_checks);
    assert!(!config.debug_checks(false).debug_checks);
}

#[test]
fn an_overflow_is_reported_by_check_and_counted_once() {
    let mut temp = checked();
    let a = raw(&temp, 100, 64);
    let b = raw(&temp, 100, 64);
    assert_eq!(temp.check(), Ok(()));
    // A kernel writes two bytes past the end of `a`.
    // SAFETY: inside the block (the canary follows `a`), nothing else uses it.
    unsafe { a.add(101).write(0) };
    let err = temp.check().unwrap_err();
    assert_eq!(
        err,
        Error::CanaryCorrupted {
            addr: a.as_ptr() as usize,
            size: 100,
            byte: 1
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("100") && msg.contains(&format!("{:#x}", a.as_ptr() as usize)),
        "{msg}"
    );
    assert_eq!(temp.stats().canary_violations, 1);
    // Checked again: still reported, counted once.
    assert!(temp.check().is_err());
    assert_eq!(temp.stats().canary_violations, 1);
    // The neighbour was not touched: the canary took the write.
    assert_ne!(a, b);
    temp.reset();
    assert_eq!(temp.stats().canary_violations, 1);
    assert_eq!(temp.check(), Ok(()));
}

#[test]
fn reset_finds_an_overflow_nobody_checked() {
    let mut temp = checked();
    let a = raw(&temp, 10, 1);
    // SAFETY: the last canary byte, inside the block.
    unsafe { a.add(10 + 15).write(b'!') };
    temp.reset();
    assert_eq!(temp.stats().canary_violations, 1);
}

#[test]
fn reset_and_rewind_poison_recycled_memory() {
    let mut temp = checked();
    let first = {
        let ctx = KernelContext::new(&temp);
        fill(ctx.allocate_temp(64, 64).unwrap(), 1).as_ptr()
    };
    temp.reset();
    {
        let ctx = KernelContext::new(&temp);
        let again = ctx.allocate_temp(64, 64).unwrap();
        assert_eq!(
            again.as_ptr().cast::<u8>(),
            first,
            "same memory after reset"
        );
        // SAFETY: every byte was written with the poison at the reset.
        let bytes = unsafe { std::slice::from_raw_parts(again.as_ptr().cast::<u8>(), 64) };
        assert!(bytes.iter().all(|&b| b == 0xDD), "{bytes:x?}");
    }
    let kept = {
        let ctx = KernelContext::new(&temp);
        fill(ctx.allocate_temp(32, 8).unwrap(), 2).as_ptr()
    };
    let cp = temp.checkpoint().unwrap();
    let dropped = {
        let ctx = KernelContext::new(&temp);
        fill(ctx.allocate_temp(48, 8).unwrap(), 3).as_ptr()
    };
    temp.rewind(cp).unwrap();
    {
        let ctx = KernelContext::new(&temp);
        let again = ctx.allocate_temp(48, 8).unwrap();
        assert_eq!(
            again.as_ptr().cast::<u8>(),
            dropped,
            "same memory after rewind"
        );
        // SAFETY: poisoned at the rewind.
        let bytes = unsafe { std::slice::from_raw_parts(again.as_ptr().cast::<u8>(), 48) };
        assert!(bytes.iter().all(|&b| b == 0xDD), "{bytes:x?}");
        // SAFETY: allocated before the checkpoint, so still live and intact.
        check(unsafe { std::slice::from_raw_parts(kept, 32) }, 2);
    }
    assert_eq!(temp.stats().canary_violations, 0);
}

#[test]
fn a_rewind_checks_the_canaries_it_recycles() {
    let mut temp = checked();
    let cp = temp.checkpoint().unwrap();
    let a = raw(&temp, 7, 1);
    // SAFETY: the first canary byte, inside the block.
    unsafe { a.add(7).write(0) };
    temp.rewind(cp).unwrap();
    assert_eq!(temp.stats().canary_violations, 1);
    assert_eq!(temp.check(), Ok(()));
}

#[test]
fn stats_and_sizes_are_unchanged_by_the_canary() {
    let mut temp = checked();
    {
        let ctx = KernelContext::new(&temp);
        for size in [0, 1, 100, 5000] {
            assert_eq!(ctx.allocate_temp(size, 16).unwrap().len(), size);
        }
        // Dedicated-sized and block-growing requests too.
        assert_eq!(ctx.scratch::<u8>(1 << 20).unwrap().len(), 1 << 20);
    }
    let s = temp.stats();
    assert_eq!((s.allocations, s.bytes_requested), (5, 5101 + (1 << 20)));
    assert_eq!(s.high_water, 5101 + (1 << 20));
    temp.reset();
    assert_eq!(temp.check(), Ok(()));
    assert_eq!(temp.stats().canary_violations, 0);
}

#[test]
fn dedicated_blocks_get_canaries_too() {
    let mut temp = CachingAllocator::with_config(
        CachingConfig::default()
            .debug_checks(true)
            .dedicated_threshold(Some(8192)),
    );
    let a = raw(&temp, 10_000, 4096);
    assert_eq!(temp.check(), Ok(()));
    // SAFETY: the canary, inside the dedicated block.
    unsafe { a.add(10_003).write(0) };
    assert!(matches!(
        temp.check(),
        Err(Error::CanaryCorrupted {
            size: 10_000,
            byte: 3,
            ..
        })
    ));
    temp.reset();
    assert_eq!(temp.stats().canary_violations, 1);
}

#[test]
fn check_is_ok_with_checks_off() {
    let temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false));
    raw(&temp, 100, 8);
    assert_eq!(temp.check(), Ok(()));
}

#[test]
fn an_overflow_on_a_worker_thread_is_reported_and_the_others_scratch_is_intact() {
    // With the checks on, each thread carves from its own leased region;
    // every allocation is recorded, whichever thread made it.
    let mut temp = checked();
    let all_written = std::sync::Barrier::new(4);
    let addrs = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u8)
            .map(|t| {
                let (temp, all_written) = (&temp, &all_written);
                s.spawn(move || {
                    let p = raw(temp, 100, 64);
                    // SAFETY: `p` starts 100 bytes this thread owns.
                    unsafe { p.write_bytes(t, 100) };
                    if t == 2 {
                        // A buggy kernel writes one byte past its scratch.
                        // SAFETY: inside the block (the canary follows `p`).
                        unsafe { p.add(100).write(0) };
                    }
                    all_written.wait();
                    // SAFETY: this thread's 100 bytes, allocated until the reset.
                    let mine = unsafe { std::slice::from_raw_parts(p.as_ptr(), 100) };
                    assert!(mine.iter().all(|&b| b == t), "worker {t}");
                    p.as_ptr().addr()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    let err = temp.check().unwrap_err();
    assert_eq!(
        err,
        Error::CanaryCorrupted {
            addr: addrs[2],
            size: 100,
            byte: 0
        }
    );
    temp.reset();
    assert_eq!(temp.stats().canary_violations, 1);
}
