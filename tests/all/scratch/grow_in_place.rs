//! A collection pushed element by element grows its
//! block in place when it is the newest of the thread's window, so it
//! holds its capacity, not every capacity it doubled through (about twice
//! that).

use core::alloc::Layout;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use tempalloc::{
    AnyTemp, BumpAllocator, CachingAllocator, CachingConfig, Error, FixedAllocator, FrameVec,
    KernelContext, ScratchVec, ScratchVecExt, TempAllocator, with_context,
};

use crate::scenarios::mapped;
use crate::util::{check, fill};

/// One million `u32` (fewer under Miri, where it only checks soundness).
const N: usize = if cfg!(miri) { 2_000 } else { 1_000_000 };

/// Pushes `N` values one by one and checks them.
fn push_all<A: tempalloc::allocator_api2::alloc::Allocator>(
    v: &mut tempalloc::allocator_api2::vec::Vec<u32, A>,
) {
    for i in 0..N as u32 {
        v.push(i);
    }
    assert!(v.iter().copied().eq(0..N as u32));
}

/// `high` is the vector's capacity `capacity` (in `u32`), and 12.5% for
/// the kernels' scratch beside it, where regions are reservations, which
/// grow in place; a copy per doubling would leave every smaller capacity
/// carved, about twice it. On heap blocks (Miri, `TEMPALLOC_RESERVE=off`)
/// a region cannot grow past its block, so each time the vector outgrows
/// the block it moves and leaves its old buffer carved: at most every
/// capacity it doubled through, twice the last.
fn holds_its_capacity(high: usize, capacity: usize) {
    let held = capacity * size_of::<u32>();
    let bound = if mapped() { held + held / 8 } else { 2 * held };
    assert!(
        high <= bound,
        "window high water {high} for a capacity of {held} bytes (at most {bound})"
    );
}

#[test]
fn a_scratch_vec_pushed_to_4_mb_holds_its_capacity() {
    // With the debug checks the canary moves with the end of the block.
    for debug_checks in [false, true] {
        let config = CachingConfig::default().debug_checks(debug_checks);
        let mut temp = CachingAllocator::with_config(config);
        let pushed = with_context(&mut temp, |ctx| {
            let mut v = ScratchVec::new_in(ctx);
            push_all(&mut v);
            Ok::<_, Error>((v.len(), v.capacity()))
        });
        let (len, capacity) = pushed.unwrap();
        assert_eq!(len, N);
        holds_its_capacity(temp.stats().window_high_water, capacity);
        assert_eq!(temp.check(), Ok(()));
    }
}

#[test]
fn a_frame_vec_pushed_to_4_mb_holds_its_capacity() {
    let mut temp = CachingAllocator::new();
    let r = temp.frame(|inf| {
        let mut v = FrameVec::new_in(inf.allocator());
        for chunk in 0..4 {
            // Kernels between the pushes: their scratch is rewound, so the
            // vector is the newest block again when it grows.
            let first = inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch_fill(64, chunk)?[0]))?;
            for i in 0..N as u32 / 4 {
                v.try_push(i ^ first)?;
            }
        }
        Ok::<_, Error>((v.len(), v.capacity()))
    });
    let (len, capacity) = r.unwrap();
    assert_eq!(len, N / 4 * 4);
    holds_its_capacity(temp.stats().window_high_water, capacity);
}

#[test]
fn a_fixed_allocator_grows_the_newest_block_in_place() {
    // Under Miri an eighth: a capacity of 1024 still doubles in place eight
    // times, in a buffer still too small for a copy per doubling.
    let (pushes, capacity) = if cfg!(miri) {
        (1_000, 8 * 1024)
    } else {
        (8_000, 64 * 1024)
    };
    let mut buf = vec![MaybeUninit::uninit(); capacity];
    let mut temp = FixedAllocator::new(&mut buf);
    let r = with_context(&mut temp, |ctx| {
        let mut v = ScratchVec::new_in(ctx);
        for i in 0..pushes {
            v.try_push(i)?;
        }
        Ok::<_, Error>(v.iter().sum::<u32>())
    });
    assert_eq!(r, Ok((0..pushes).sum()));
    // A capacity of 8192 held in place (32 KiB); a copy per doubling
    // would leave the smaller blocks behind (64 KiB in all).
    let high = temp.stats().window_high_water;
    assert!(high <= capacity / 2, "{high}");
}

#[test]
fn only_the_newest_block_grows_in_place_and_its_bytes_stay() {
    for temp in [
        &CachingAllocator::new() as &dyn TempAllocator,
        &FixedAllocator::new(&mut [MaybeUninit::uninit(); 4096]),
    ] {
        let old = Layout::from_size_align(64, 8).unwrap();
        let a = temp.allocate(old).unwrap().cast::<u8>();
        let b = temp.allocate(old).unwrap().cast::<u8>();
        // SAFETY: `a` and `b` are live allocations of `temp` for `old`.
        unsafe {
            assert!(!temp.resize_in_place(a, old, 128), "not the newest");
            b.as_ptr().write_bytes(7, 64);
            assert!(temp.resize_in_place(b, old, 1024));
            assert!(
                !temp.resize_in_place(b, Layout::from_size_align(1024, 8).unwrap(), 512),
                "never shrinks"
            );
            assert!(!temp.resize_in_place(
                b,
                Layout::from_size_align(1024, 8).unwrap(),
                isize::MAX as usize / 2
            ));
            assert_eq!(*b.as_ptr().add(63), 7);
        }
        // The next request comes after the grown block.
        let c = temp.allocate(old).unwrap().cast::<u8>();
        assert!(c.as_ptr().addr() >= b.as_ptr().addr() + 1024);
        assert_eq!(temp.stats().bytes_live, 64 + 1024 + 64);
    }
}

#[test]
fn a_vec_shrinks_without_a_copy_and_grows_when_it_moved_between_blocks() {
    for temp in [
        &CachingAllocator::new() as &dyn TempAllocator,
        &BumpAllocator::new(),
    ] {
        let ctx = KernelContext::new(temp);
        let mut v = ScratchVec::<u64>::with_capacity_in(100, &ctx);
        v.extend(0..100);
        let at = v.as_ptr();
        v.truncate(10);
        v.shrink_to(10);
        assert_eq!((v.as_ptr(), v.capacity()), (at, 10));
        // Still the newest block, but no longer as long as it was handed
        // out (bumpalo's `grow` must be given that length): growing
        // copies, and the values survive.
        v.extend(10..200);
        // Another block after it: growing copies, and the values survive.
        let other = ctx.scratch::<u8>(8).unwrap();
        v.extend(200..1000);
        assert!(v.iter().copied().eq(0..1000));
        assert_eq!(other, &[0; 8]);
    }
}

#[test]
fn a_bump_allocator_scratch_vec_holds_its_capacity_once_a_reset_kept_the_chunk() {
    fn push(temp: &mut BumpAllocator) -> usize {
        let pushed = with_context(temp, |ctx| {
            let mut v = ScratchVec::new_in(ctx);
            push_all(&mut v);
            Ok::<_, Error>((v.len(), v.capacity()))
        });
        let (len, capacity) = pushed.unwrap();
        assert_eq!(len, N);
        capacity
    }
    let mut temp = BumpAllocator::new();
    // The first window takes bumpalo's chunks, each about twice the last:
    // the doubling vector outgrows each one and moves to the next, so the
    // blocks it leaves behind make about twice the data (2.1x).
    push(&mut temp);
    let first = temp.stats();
    // The reset kept the largest chunk; in it the vector takes the room
    // below it at every growth, and needs no other chunk. (Before
    // `BumpAllocator::grow`: 2.1x again, and a chunk of 16 MB.)
    let capacity = push(&mut temp);
    let second = temp.stats();
    assert_eq!(second.system_allocations, first.system_allocations);
    assert_eq!(second.bytes_held, first.bytes_held);
    let (high, held) = (second.window_high_water, capacity * size_of::<u32>());
    assert!(
        8 * high <= 9 * held,
        "window high water {high} for a capacity of {held} bytes"
    );
}

/// The `len` bytes at `p`.
///
/// # Safety
///
/// `p` is a live block of at least `len` bytes that nothing else uses
/// while the slice lives.
unsafe fn bytes<'a>(p: NonNull<[u8]>, len: usize) -> &'a mut [MaybeUninit<u8>] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(p.cast().as_ptr(), len) }
}

/// The `len` bytes at `p`, initialised.
///
/// # Safety
///
/// As [`bytes`], and the `len` bytes are initialised.
unsafe fn filled<'a>(p: NonNull<[u8]>, len: usize) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(p.cast().as_ptr(), len) }
}

/// Whether two blocks share a byte.
fn overlap(a: NonNull<[u8]>, b: NonNull<[u8]>) -> bool {
    let (a0, b0) = (
        a.cast::<u8>().as_ptr().addr(),
        b.cast::<u8>().as_ptr().addr(),
    );
    a0 < b0 + b.len() && b0 < a0 + a.len()
}

#[test]
fn a_grown_bump_allocator_block_keeps_its_bytes_on_every_path() {
    let limit = 512 << 10;
    let mut temp = BumpAllocator::with_limit(limit);
    // A window that takes a 64 KiB chunk, which the reset keeps: the
    // growths below have its room.
    temp.allocate(Layout::from_size_align(64 << 10, 8).unwrap())
        .unwrap();
    temp.reset();
    let held = temp.stats().bytes_held;
    let mut old = Layout::from_size_align(24, 8).unwrap();
    let mut a = temp.allocate(old).unwrap();
    // SAFETY: `a` is a live block of `old.size()` bytes (so is every block
    // the loop makes `a`), used through these slices only.
    fill(unsafe { bytes(a, old.size()) }, 0);
    let mut others = Vec::new();
    for step in 0..8 {
        // Every third growth comes after another block: `a` is then not
        // the newest, and bumpalo moves it to a new block.
        let newest = step % 3 != 1;
        if !newest {
            let b = temp
                .allocate(Layout::from_size_align(40, 8).unwrap())
                .unwrap();
            // SAFETY: as for `a`.
            fill(unsafe { bytes(b, 40) }, step + 1);
            others.push((b, step + 1));
        }
        let new = Layout::from_size_align(old.size() * 2 + 8, 8).unwrap();
        let before = temp.stats();
        // SAFETY: `a` is `temp`'s live block for `old`, not used again
        // after this call; `new` is larger.
        let to = unsafe { temp.grow(a.cast(), old, new) }.unwrap();
        let after = temp.stats();
        assert_eq!(to.len(), new.size());
        // SAFETY: as for `a`; `fill` initialised `a`'s bytes, which `grow`
        // kept.
        check(unsafe { filled(to, old.size()) }, 0);
        assert_eq!(overlap(a, to), newest, "step {step}: reused the room");
        let grew = if newest {
            assert_eq!(after.allocations, before.allocations, "step {step}");
            new.size() - old.size()
        } else {
            assert_eq!(after.allocations, before.allocations + 1, "step {step}");
            new.size()
        };
        assert_eq!(after.bytes_live, before.bytes_live + grew, "step {step}");
        // SAFETY: as for `a`.
        fill(unsafe { bytes(to, new.size()) }, 0);
        for &(b, tag) in &others {
            // SAFETY: as for `a`; `fill` initialised it.
            check(unsafe { filled(b, 40) }, tag);
        }
        (a, old) = (to, new);
    }
    assert_eq!(
        temp.stats().bytes_held,
        held,
        "every growth in the kept chunk"
    );

    // The newest block, past its chunk's room: a new chunk and a copy.
    let patterned = old.size();
    let new = Layout::from_size_align(128 << 10, 8).unwrap();
    let before = temp.stats();
    // SAFETY: as above.
    let to = unsafe { temp.grow(a.cast(), old, new) }.unwrap();
    let after = temp.stats();
    assert!(!overlap(a, to));
    assert_eq!(after.system_allocations, before.system_allocations + 1);
    assert_eq!(after.allocations, before.allocations + 1);
    assert_eq!(after.bytes_live, before.bytes_live + new.size());
    // SAFETY: as above.
    check(unsafe { filled(to, old.size()) }, 0);

    // Past the limit: the numbers, and the block and the counts as they were.
    let (a, old) = (to, new);
    let huge = Layout::from_size_align(1 << 20, 8).unwrap();
    let before = temp.stats();
    assert_eq!(
        // SAFETY: as above; on an error `a` stays ours.
        unsafe { temp.grow(a.cast(), old, huge) },
        Err(Error::BudgetExceeded {
            requested: huge.size(),
            held: before.bytes_held,
            limit
        })
    );
    assert_eq!(temp.stats(), before);
    // SAFETY: as above; its first `patterned` bytes are the pattern.
    check(unsafe { filled(a, patterned) }, 0);
    for &(b, tag) in &others {
        // SAFETY: as above.
        check(unsafe { filled(b, 40) }, tag);
    }
}

#[test]
fn wrappers_forward_grow_to_the_bump_allocator() {
    let mut bump = BumpAllocator::new();
    let borrowed = &mut bump;
    let any = AnyTemp::from(BumpAllocator::new());
    let custom = AnyTemp::custom(BumpAllocator::new());
    let boxed: Box<dyn TempAllocator> = Box::new(BumpAllocator::new());
    for (name, temp) in [
        ("&mut", &borrowed as &dyn TempAllocator),
        ("AnyTemp::Bump", &any),
        ("AnyTemp::Custom", &custom),
        ("Box", &boxed),
    ] {
        let old = Layout::from_size_align(64, 8).unwrap();
        let p = temp.allocate(old).unwrap();
        // SAFETY: `p` is a live block of 64 bytes, used only here.
        fill(unsafe { bytes(p, 64) }, 9);
        let new = Layout::from_size_align(256, 8).unwrap();
        // SAFETY: `p` is `temp`'s live block for `old`, not used again.
        let to = unsafe { temp.grow(p.cast(), old, new) }.unwrap();
        // SAFETY: its first 64 bytes are `p`'s, which `fill` initialised.
        check(unsafe { filled(to, 64) }, 9);
        // The room next to it, not a second block: 256 bytes live, not 320.
        assert_eq!(temp.stats().bytes_live, 256, "{name}");
        assert_eq!(temp.stats().allocations, 1, "{name}");
    }
}
