//! Typed scratch: the alignment each method gives, contents, and errors.

use tempalloc::{Error, KernelContext};

use crate::util::{addr, for_each_allocator};

#[test]
fn scratch_aligned_gives_the_alignment_asked_and_zeroes() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for align in [1, 2, 8, 64, 128, 4096] {
            let s = ctx.scratch_aligned::<f32>(33, align).unwrap();
            assert_eq!(s.len(), 33, "{name}");
            assert_eq!(addr(s) % align.max(4), 0, "{name}: align {align}");
            assert!(s.iter().all(|&x| x == 0.0), "{name}");
            s.fill(1.5);
        }
        // Never less than the type's own alignment.
        let s = ctx.scratch_aligned::<u64>(3, 1).unwrap();
        assert_eq!(addr(s) % align_of::<u64>(), 0, "{name}");
    });
}

#[test]
fn scratch_aligned_refuses_bad_alignments_and_overflow() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for align in [0, 3, 48, usize::MAX] {
            assert_eq!(
                ctx.scratch_aligned::<f32>(4, align),
                Err(Error::InvalidAlignment { align }),
                "{name}"
            );
        }
        assert_eq!(
            ctx.scratch_aligned::<u32>(usize::MAX / 2, 64),
            Err(Error::SizeOverflow {
                size: usize::MAX,
                align: 64
            }),
            "{name}"
        );
        assert_eq!(ctx.failure(), None, "{name}: returned, not recorded");
    });
}

#[test]
fn copy_fill_and_with_hold_what_they_say() {
    // A tuple of numbers is `Zeroable` (bytemuck) and `Copy`.
    type Pair = (u16, f32);
    #[allow(non_snake_case)]
    fn Pair(a: u16, b: f32) -> Pair {
        (a, b)
    }
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        let src: Vec<Pair> = (0..50).map(|i| Pair(i, i as f32 / 2.0)).collect();
        let copy = ctx.scratch_copy(&src).unwrap();
        assert_eq!(copy, &src[..], "{name}");
        assert_eq!(addr(copy) % align_of::<Pair>(), 0, "{name}");
        let filled = ctx.scratch_fill(7, Pair(9, 1.0)).unwrap();
        assert!(filled.iter().all(|&p| p == Pair(9, 1.0)), "{name}");
        let mut order = Vec::new();
        let with = ctx
            .scratch_with(5, |i| {
                order.push(i);
                i as u8 * 3
            })
            .unwrap();
        assert_eq!(with, &[0, 3, 6, 9, 12], "{name}");
        assert_eq!(order, [0, 1, 2, 3, 4], "{name}: f runs in index order");
        // Zero-length requests are fine and empty.
        assert!(ctx.scratch_copy::<u8>(&[]).unwrap().is_empty(), "{name}");
        // Nothing clobbered anything.
        assert_eq!(copy, &src[..], "{name}");
        let zeroed = ctx.scratch::<Pair>(2).unwrap();
        assert_eq!(zeroed, &[(0, 0.0); 2], "{name}");
    });
}

#[test]
fn typed_scratch_without_an_allocator_is_an_error() {
    let ctx = KernelContext::without_temp();
    assert_eq!(ctx.scratch_copy(&[1u8]), Err(Error::NoTempAllocator));
    assert_eq!(ctx.scratch_fill(1, 1u8), Err(Error::NoTempAllocator));
    assert_eq!(ctx.scratch_with(1, |_| 1u8), Err(Error::NoTempAllocator));
    assert_eq!(
        ctx.scratch_aligned::<u8>(1, 64),
        Err(Error::NoTempAllocator)
    );
}
