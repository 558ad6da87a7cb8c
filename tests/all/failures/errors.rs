//! Bad input and exhausted memory are errors with the numbers, never panics.

use std::alloc::Layout;

use tempalloc::{BumpAllocator, Error, KernelContext, MallocAllocator, TempAllocator};

use crate::util::{HUGE, check, fill, for_each_allocator, with_live_buffers};

const INVALID_ALIGNMENTS: [usize; 5] = [0, 3, 6, 12, 34];

#[test]
fn invalid_alignment_reports_the_alignment() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for align in INVALID_ALIGNMENTS {
            for size in [0, 1, 64, usize::MAX] {
                let err = ctx.allocate_temp(size, align).unwrap_err();
                assert_eq!(
                    err,
                    Error::InvalidAlignment { align },
                    "{name}: {size} B at align {align}"
                );
            }
        }
        assert_eq!(
            temp.stats().allocations,
            0,
            "{name}: rejected requests are not served"
        );
    });
}

#[test]
fn sizes_that_overflow_when_padded_are_size_overflow() {
    let max = isize::MAX as usize;
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for (size, align) in [
            (usize::MAX, 1),
            (usize::MAX, 64),
            (max + 1, 1),
            (max, 64),
            (max - 62, 64),
            (max, 65536),
        ] {
            let err = ctx.allocate_temp(size, align).unwrap_err();
            assert_eq!(
                err,
                Error::SizeOverflow { size, align },
                "{name}: {size} B at align {align}"
            );
        }
        assert_eq!(
            temp.stats().allocations,
            0,
            "{name}: rejected requests are not served"
        );
    });
}

#[test]
fn typed_scratch_overflow_is_size_overflow() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        match ctx.scratch::<f64>(usize::MAX / 4) {
            Err(Error::SizeOverflow { size, align }) => {
                assert_eq!(align, 8, "{name}");
                assert!(size > isize::MAX as usize, "{name}: size {size}");
            }
            other => panic!("{name}: expected SizeOverflow, got {other:?}"),
        }
        // Just past the largest valid array: the size in the error is exact.
        let len = isize::MAX as usize / 8 + 1;
        assert_eq!(
            ctx.scratch_uninit::<u64>(len).unwrap_err(),
            Error::SizeOverflow {
                size: len * 8,
                align: 8
            },
            "{name}"
        );
        assert_eq!(
            ctx.scratch::<u32>(usize::MAX).unwrap_err(),
            Error::SizeOverflow {
                size: usize::MAX,
                align: 4
            },
            "{name}"
        );
    });
}

/// Makes the request (`size`, `align`) fail with live buffers around it
/// (`with_live_buffers`), and checks that it is not counted as served.
/// Returns the error and the bytes held just before the failing request.
fn fail_after_live_buffers(
    name: &str,
    temp: &dyn TempAllocator,
    size: usize,
    align: usize,
) -> (Error, usize) {
    with_live_buffers(name, temp, |ctx| {
        let (served, held) = (temp.stats().allocations, temp.stats().bytes_held);
        let err = ctx.allocate_temp(size, align).unwrap_err();
        assert_eq!(
            temp.stats().allocations,
            served,
            "{name}: a failed request is not counted as served"
        );
        (err, held)
    })
}

#[test]
#[cfg_attr(miri, ignore = "asks the system for 1 << 62 bytes, which Miri rejects")]
fn malloc_out_of_memory_is_an_error() {
    let mut temp = MallocAllocator::new();
    for (size, align) in [(HUGE, 64), (HUGE, 1), (isize::MAX as usize, 1)] {
        let (err, _) = fail_after_live_buffers("MallocAllocator", &temp, size, align);
        assert_eq!(err, Error::OutOfMemory { size, align });
        temp.reset();
        assert_eq!(temp.stats().bytes_held, 0);
    }
}

#[test]
#[cfg_attr(miri, ignore = "asks the system for 1 << 62 bytes, which Miri rejects")]
fn bump_out_of_memory_is_an_error() {
    let mut temp = BumpAllocator::new();
    for (size, align) in [(HUGE, 64), (HUGE, 1), (isize::MAX as usize, 1)] {
        let (err, _) = fail_after_live_buffers("BumpAllocator", &temp, size, align);
        assert_eq!(err, Error::OutOfMemory { size, align });
        temp.reset();
    }
}

#[test]
fn bump_over_its_limit_is_budget_exceeded_with_the_numbers() {
    let limit = 1 << 20;
    let temp = BumpAllocator::with_limit(limit);
    for size in [HUGE, 2 << 20] {
        let (err, held) = fail_after_live_buffers("BumpAllocator", &temp, size, 64);
        assert_eq!(
            err,
            Error::BudgetExceeded {
                requested: size,
                held,
                limit
            }
        );
    }
    assert!(temp.stats().bytes_held <= limit);
}

#[test]
fn bump_filling_its_limit_ends_in_budget_exceeded() {
    let limit = 64 * 1024;
    for size in [1000, 4096, 20_000, 60_000, 65_000] {
        let temp = BumpAllocator::with_limit(limit);
        let ctx = KernelContext::new(&temp);
        let mut live = Vec::new();
        let mut held;
        let err = loop {
            held = temp.stats().bytes_held;
            match ctx.allocate_temp(size, 64) {
                Ok(buf) => {
                    let tag = live.len();
                    live.push(fill(buf, tag));
                }
                Err(e) => break e,
            }
            assert!(
                live.len() * size <= limit,
                "{size} B: served past the limit"
            );
        };
        match err {
            Error::BudgetExceeded {
                requested,
                held: h,
                limit: l,
            } => {
                assert_eq!(l, limit, "{size} B");
                // What the kernel asked for, and what was held: bumpalo's next
                // chunk is larger than the request, so their sum may still be
                // under the limit.
                assert_eq!((requested, h), (size, held), "{size} B");
            }
            other => panic!(
                "{size} B after {} buffers: expected BudgetExceeded, got {other:?}",
                live.len()
            ),
        }
        assert!(temp.stats().bytes_held <= limit, "{size} B");
        for (tag, buf) in live.iter().enumerate() {
            check(buf, tag);
        }
    }
}

#[test]
fn no_temp_allocator_is_an_error_everywhere() {
    let ctx = KernelContext::without_temp();
    assert!(ctx.temp().is_none());
    assert_eq!(
        ctx.allocate_temp(16, 8).unwrap_err(),
        Error::NoTempAllocator
    );
    assert_eq!(ctx.allocate_temp(0, 1).unwrap_err(), Error::NoTempAllocator);
    assert_eq!(
        ctx.allocate(Layout::new::<u64>()).unwrap_err(),
        Error::NoTempAllocator
    );
    assert_eq!(ctx.scratch::<f32>(4).unwrap_err(), Error::NoTempAllocator);
    assert_eq!(
        ctx.scratch_uninit::<f32>(4).unwrap_err(),
        Error::NoTempAllocator
    );
    // Bad input is still reported as such: the layout is checked first.
    assert_eq!(
        ctx.allocate_temp(16, 3).unwrap_err(),
        Error::InvalidAlignment { align: 3 }
    );
    let mut v = allocator_api2::vec::Vec::<u8, _>::new_in(&ctx);
    assert!(v.try_reserve(10).is_err());
}

#[test]
fn fail_keeps_the_first_error() {
    let temp = MallocAllocator::new();
    let ctx = KernelContext::new(&temp);
    assert_eq!(ctx.failure(), None);
    let first = ctx.allocate_temp(8, 6).unwrap_err();
    ctx.fail(first);
    ctx.fail(Error::NoTempAllocator);
    ctx.fail(Error::OutOfMemory { size: 1, align: 1 });
    assert_eq!(ctx.failure(), Some(Error::InvalidAlignment { align: 6 }));
    assert!(format!("{ctx:?}").contains("InvalidAlignment"));
    // Failing does not stop the context from serving scratch.
    assert_eq!(ctx.scratch::<u8>(3).unwrap(), &[0, 0, 0]);
}

#[test]
fn every_error_message_carries_its_numbers() {
    let cases: [(Error, &[&str]); 6] = [
        (Error::InvalidAlignment { align: 34 }, &["34"]),
        (
            Error::SizeOverflow {
                size: 12_345,
                align: 4096,
            },
            &["12345", "4096"],
        ),
        (
            Error::OutOfMemory {
                size: 3_221_225_472,
                align: 64,
            },
            &["3221225472", "64"],
        ),
        (
            Error::BudgetExceeded {
                requested: 70_001,
                held: 12_288,
                limit: 65_536,
            },
            &["70001", "12288", "65536"],
        ),
        (Error::NoTempAllocator, &["no temp allocator"]),
        (
            Error::StaleCheckpoint {
                taken_at: 41,
                now: 43,
            },
            &["41", "43"],
        ),
    ];
    for (err, parts) in cases {
        let msg = err.to_string();
        for part in parts {
            assert!(msg.contains(part), "{err:?}: {msg:?} lacks {part:?}");
        }
    }
    // Every variant's message names what went wrong distinctly.
    let messages: std::collections::HashSet<String> = [
        Error::InvalidAlignment { align: 1 },
        Error::SizeOverflow { size: 1, align: 1 },
        Error::OutOfMemory { size: 1, align: 1 },
        Error::BudgetExceeded {
            requested: 1,
            held: 1,
            limit: 1,
        },
        Error::NoTempAllocator,
        Error::StaleCheckpoint {
            taken_at: 1,
            now: 1,
        },
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(messages.len(), 6);
}
