//! The bad-input table of docs/reliability.md, one test per row, against
//! every allocator the row applies to: the call returns the error in the
//! table (or succeeds, for the inputs that are valid), nothing panics or
//! aborts, buffers allocated before the bad request keep their bytes, and
//! the allocator serves the next request.

use std::alloc::Layout;

use tempalloc::{
    BumpAllocator, CachingAllocator, CachingConfig, Error, FixedAllocator, KernelContext,
    MallocAllocator, TempAllocator,
};

use crate::util::{
    FIXED, FIXED_CAPACITY, HUGE, OwnedFixed, check, fill, with_live_buffers, with_live_buffers_in,
};

/// The largest power of two, `isize::MAX + 1` (1 << 63 on 64-bit targets):
/// a valid alignment for zero bytes, and for nothing larger.
const TOP_BIT: usize = 1 << (usize::BITS - 1);

type Make = fn() -> Box<dyn TempAllocator>;

/// Every allocator, and the caching one in each of its request paths.
const ALL: &[(&str, Make)] = &[
    ("MallocAllocator", || Box::new(MallocAllocator::new())),
    ("BumpAllocator", || Box::new(BumpAllocator::new())),
    ("CachingAllocator", || {
        Box::new(CachingAllocator::with_config(
            CachingConfig::default().debug_checks(false),
        ))
    }),
    ("CachingAllocator (debug checks)", || {
        Box::new(CachingAllocator::with_config(
            CachingConfig::default().debug_checks(true),
        ))
    }),
    ("CachingAllocator (dedicated)", || {
        Box::new(CachingAllocator::with_config(
            CachingConfig::default()
                .debug_checks(false)
                .dedicated_threshold(Some(4096)),
        ))
    }),
    (FIXED, || Box::new(OwnedFixed::new(FIXED_CAPACITY))),
];

/// Runs `row` against every allocator in `ALL`, with live buffers around it;
/// then where the context makes the request itself (the allocator's fast
/// path inlined, not a call through `dyn`): over a `FixedAllocator` (not
/// behind `OwnedFixed`) and in a kernel frame of a `CachingAllocator`.
fn for_all(mut row: impl FnMut(&str, &KernelContext)) {
    // Once more after a reset (not under Miri, to save its time).
    let passes = if cfg!(miri) { 1 } else { 2 };
    for (name, make) in ALL {
        let mut temp = make();
        for _ in 0..passes {
            with_live_buffers(name, &*temp, |ctx| row(name, ctx));
            temp.reset();
        }
    }
    // Not `vec![..]`, whose element-by-element fill Miri takes minutes over.
    let mut buf = Box::<[u8]>::new_uninit_slice(FIXED_CAPACITY);
    let mut fixed = FixedAllocator::new(&mut buf);
    for _ in 0..passes {
        with_live_buffers(FIXED, &fixed, |ctx| row(FIXED, ctx));
        fixed.reset();
    }
    let name = "CachingAllocator (kernel frame)";
    let config = CachingConfig::default().debug_checks(false);
    let mut caching = CachingAllocator::with_config(config);
    for _ in 0..passes {
        let framed = caching.frame(|inf| {
            inf.kernel(|ctx| {
                with_live_buffers_in(name, ctx, |ctx| row(name, ctx));
                Ok::<_, Error>(())
            })
        });
        framed.unwrap();
    }
}

#[test]
fn alignment_zero() {
    for_all(|name, ctx| {
        for size in [0, 1, 64] {
            let err = ctx.allocate_temp(size, 0).unwrap_err();
            assert_eq!(err, Error::InvalidAlignment { align: 0 }, "{name}");
        }
    });
}

#[test]
fn alignment_three() {
    for_all(|name, ctx| {
        let err = ctx.allocate_temp(64, 3).unwrap_err();
        assert_eq!(err, Error::InvalidAlignment { align: 3 }, "{name}");
    });
}

#[test]
fn alignment_not_a_power_of_two() {
    for_all(|name, ctx| {
        for align in [6, 12, 48, 100, 4097, 3 << 20, usize::MAX] {
            let err = ctx.allocate_temp(64, align).unwrap_err();
            assert_eq!(err, Error::InvalidAlignment { align }, "{name}");
        }
    });
}

#[test]
fn alignment_above_the_largest_supported() {
    // 1 << 63 (isize::MAX + 1) is a power of two, but no non-zero size
    // rounded up to it fits in isize::MAX: SizeOverflow. (Zero bytes at
    // that alignment are valid: see the next test.)
    let align = TOP_BIT;
    for_all(|name, ctx| {
        for size in [1, 64, 4096] {
            let err = ctx.allocate_temp(size, align).unwrap_err();
            assert_eq!(err, Error::SizeOverflow { size, align }, "{name}");
        }
    });
}

#[test]
fn zero_bytes_at_a_huge_alignment() {
    // Any power of two up to 1 << 63 is a valid alignment for an empty
    // request: a dangling, aligned pointer, no memory.
    for_all(|name, ctx| {
        for align in [HUGE, TOP_BIT] {
            let buf = ctx.allocate_temp(0, align).unwrap();
            assert_eq!((buf.len(), buf.as_ptr() as usize % align), (0, 0), "{name}");
        }
    });
}

#[test]
#[cfg_attr(
    miri,
    ignore = "asks the system for 1 << 62-aligned memory, which Miri rejects"
)]
fn bytes_at_a_huge_alignment() {
    let align = HUGE;
    for_all(
        |name, ctx| match ctx.allocate_temp(64, align).unwrap_err() {
            Error::OutOfMemory { size, .. } => assert!(size >= 64, "{name}"),
            e => assert_fixed_is_full(name, e, 64),
        },
    );
}

#[test]
fn size_usize_max() {
    for_all(|name, ctx| {
        for align in [1, 64] {
            let err = ctx.allocate_temp(usize::MAX, align).unwrap_err();
            let size = usize::MAX;
            assert_eq!(err, Error::SizeOverflow { size, align }, "{name}");
        }
    });
}

#[test]
fn size_isize_max_plus_one() {
    let size = isize::MAX as usize + 1;
    for_all(|name, ctx| {
        let err = ctx.allocate_temp(size, 1).unwrap_err();
        assert_eq!(err, Error::SizeOverflow { size, align: 1 }, "{name}");
    });
}

#[test]
fn size_overflows_after_padding() {
    let max = isize::MAX as usize;
    for_all(|name, ctx| {
        for (size, align) in [(max, 64), (max - 62, 64), (max - 4094, 4096)] {
            let err = ctx.allocate_temp(size, align).unwrap_err();
            assert_eq!(err, Error::SizeOverflow { size, align }, "{name}");
        }
    });
}

#[test]
fn typed_scratch_length_overflows() {
    for_all(|name, ctx| {
        let len = isize::MAX as usize / 8 + 1;
        let err = ctx.scratch::<u64>(len).unwrap_err();
        assert_eq!(
            err,
            Error::SizeOverflow {
                size: len * 8,
                // 4 on i686, whose `u64` is 4-aligned.
                align: align_of::<u64>()
            },
            "{name}"
        );
        let err = ctx.scratch_uninit::<u32>(usize::MAX).unwrap_err();
        let size = usize::MAX;
        assert_eq!(err, Error::SizeOverflow { size, align: 4 }, "{name}");
    });
}

#[test]
#[cfg_attr(miri, ignore = "asks the system for 1 << 62 bytes, which Miri rejects")]
fn request_above_memory() {
    let huge = HUGE;
    for_all(|name, ctx| {
        for align in [1, 64, 4096] {
            match ctx.allocate_temp(huge, align).unwrap_err() {
                // Caching allocators ask for a whole block (size class, page aligned).
                Error::OutOfMemory { size, .. } => assert!(size >= huge, "{name}"),
                e => assert_fixed_is_full(name, e, huge),
            }
        }
    });
}

/// Where the others run out of memory, `FixedAllocator` runs out of its
/// buffer: `BudgetExceeded` with the request and the buffer's length.
fn assert_fixed_is_full(name: &str, e: Error, size: usize) {
    match e {
        Error::BudgetExceeded {
            requested, limit, ..
        } if name == FIXED => assert_eq!((requested, limit), (size, FIXED_CAPACITY)),
        other => panic!("{name}: expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn request_above_the_budget() {
    let limit = 1 << 20;
    let budgeted: [(&str, Make); 3] = [
        ("BumpAllocator", || {
            Box::new(BumpAllocator::with_limit(1 << 20))
        }),
        ("CachingAllocator", || {
            Box::new(CachingAllocator::with_config(
                CachingConfig::default()
                    .max_bytes(Some(1 << 20))
                    .debug_checks(false),
            ))
        }),
        ("CachingAllocator (debug checks)", || {
            Box::new(CachingAllocator::with_config(
                CachingConfig::default()
                    .max_bytes(Some(1 << 20))
                    .debug_checks(true),
            ))
        }),
    ];
    for (name, make) in budgeted {
        let temp = make();
        with_live_buffers(name, &*temp, |ctx| {
            // Above the limit at every pointer width: 16 PiB on 64-bit
            // targets, 4 MiB on 32-bit ones.
            for size in [2 << 20, HUGE >> 8, HUGE] {
                match ctx.allocate_temp(size, 64).unwrap_err() {
                    Error::BudgetExceeded {
                        requested,
                        held,
                        limit: l,
                    } => {
                        assert_eq!((requested, l), (size, limit), "{name}");
                        assert!(held <= limit, "{name}: {held}");
                    }
                    other => panic!("{name}: {size} B: expected BudgetExceeded, got {other:?}"),
                }
            }
        });
        assert!(temp.stats().bytes_held <= limit, "{name}");
    }
}

#[test]
fn zero_sizes() {
    for_all(|name, ctx| {
        let temp = ctx.temp().unwrap();
        let held = temp.stats().bytes_held;
        for align in [1, 8, 64, 4096, 1 << 20] {
            let before = temp.stats().allocations;
            let buf = ctx.allocate_temp(0, align).unwrap();
            assert_eq!((buf.len(), buf.as_ptr() as usize % align), (0, 0), "{name}");
            let p = ctx
                .allocate(Layout::from_size_align(0, align).unwrap())
                .unwrap();
            assert_eq!(p.len(), 0, "{name}");
            assert_eq!(temp.stats().allocations, before + 2, "{name}: counted");
        }
        assert_eq!(
            temp.stats().bytes_held,
            held,
            "{name}: no memory for nothing"
        );
    });
}

#[test]
fn zero_length_typed_scratch() {
    for_all(|name, ctx| {
        assert!(ctx.scratch::<f32>(0).unwrap().is_empty(), "{name}");
        assert!(ctx.scratch_uninit::<u64>(0).unwrap().is_empty(), "{name}");
        // Zero-sized elements: any length is zero bytes.
        assert_eq!(
            ctx.scratch::<()>(usize::MAX).unwrap().len(),
            usize::MAX,
            "{name}"
        );
        assert_eq!(ctx.scratch::<[f32; 0]>(12).unwrap().len(), 12, "{name}");
    });
}

#[test]
fn vec_in_capacity_overflow() {
    for_all(|name, ctx| {
        let mut v = allocator_api2::vec::Vec::<u64, _>::new_in(ctx);
        assert!(v.try_reserve(usize::MAX).is_err(), "{name}");
        assert!(
            v.try_reserve(isize::MAX as usize / 8 + 1).is_err(),
            "{name}"
        );
        v.push(1);
        assert_eq!(v[0], 1);
    });
}

#[test]
fn stale_checkpoints() {
    for debug_checks in [false, true] {
        let config = CachingConfig::default()
            .min_block_size(4096)
            .debug_checks(debug_checks);
        let mut temp = CachingAllocator::with_config(config);
        let other = CachingAllocator::with_config(config);

        // Taken before a reset.
        let cp = temp.checkpoint().unwrap();
        temp.reset();
        assert_eq!(
            temp.rewind(cp).unwrap_err(),
            Error::StaleCheckpoint {
                taken_at: 0,
                now: 1
            }
        );

        // Another allocator's.
        let cp = other.checkpoint().unwrap();
        assert_eq!(temp.rewind(cp).unwrap_err(), Error::ForeignCheckpoint);

        // An inner checkpoint whose block an outer rewind gave back.
        let kept = {
            let ctx = KernelContext::new(&temp);
            fill(ctx.allocate_temp(1000, 64).unwrap(), 1).as_ptr()
        };
        let outer = temp.checkpoint().unwrap();
        KernelContext::new(&temp)
            .allocate_temp(100_000, 64)
            .unwrap();
        let inner = temp.checkpoint().unwrap();
        temp.rewind(outer).unwrap();
        let err = temp.rewind(inner).unwrap_err();
        assert_eq!(err, Error::CheckpointClosed { depth: 1, open: 0 });
        assert!(err.to_string().contains("released by a rewind"), "{err}");

        // Nothing changed: the scratch from before is intact, the
        // allocator serves and rewinds as before.
        // SAFETY: 1000 bytes handed out before both checkpoints, not reset since.
        check(unsafe { std::slice::from_raw_parts(kept, 1000) }, 1);
        let cp = temp.checkpoint().unwrap();
        fill(KernelContext::new(&temp).allocate_temp(500, 8).unwrap(), 2);
        temp.rewind(cp).unwrap();
        // SAFETY: as above.
        check(unsafe { std::slice::from_raw_parts(kept, 1000) }, 1);
        assert_eq!(temp.stats().canary_violations, 0);
    }
}

#[test]
fn no_temp_allocator() {
    let ctx = KernelContext::without_temp();
    assert_eq!(
        ctx.allocate_temp(16, 8).unwrap_err(),
        Error::NoTempAllocator
    );
    assert_eq!(ctx.scratch::<f32>(0).unwrap_err(), Error::NoTempAllocator);
}
