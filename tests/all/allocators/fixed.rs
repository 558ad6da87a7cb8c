//! `FixedAllocator`: a caller's buffer, bumped; full is an error with the
//! numbers; reset and rewind start over; never the system allocator.

use std::alloc::Layout;
use std::mem::MaybeUninit;

use tempalloc::{Error, FixedAllocator, KernelContext, Rewind, TempAllocator, with_context};

use crate::util::{addr, check, fill, refuses_foreign_and_stale};

/// Storage whose start is 64-aligned; the tests take sub-slices of it that
/// are only 8- or 1-aligned.
#[repr(C, align(64))]
struct Buf<const N: usize>([MaybeUninit<u8>; N]);

impl<const N: usize> Buf<N> {
    fn new() -> Box<Self> {
        Box::new(Buf([MaybeUninit::uninit(); N]))
    }
}

/// A buffer that is 8-aligned and, for every alignment above 8, misaligned:
/// its address is 8 more than a multiple of 8192.
fn eight_aligned(storage: &mut Buf<{ 64 * 1024 }>) -> &mut [MaybeUninit<u8>] {
    let base = storage.0.as_ptr().addr();
    let skip = (8192 + 8 - base % 8192) % 8192;
    let buf = &mut storage.0[skip..];
    assert_eq!(buf.as_ptr().addr() % 8192, 8);
    buf
}

#[test]
fn aligns_the_address_up_to_4096_in_an_8_aligned_buffer() {
    let mut storage = Buf::<{ 64 * 1024 }>::new();
    let buf = eight_aligned(&mut storage);
    let (start, capacity) = (buf.as_ptr().addr(), buf.len());
    let temp = FixedAllocator::new(buf);
    let ctx = KernelContext::new(&temp);
    let mut live = Vec::new();
    for shift in 0..=12 {
        let align = 1 << shift;
        for size in [1, 3, align + 1] {
            let b = ctx.allocate_temp(size, align).unwrap();
            assert_eq!(addr(b) % align, 0, "{size} B at align {align}");
            assert_eq!(b.len(), size);
            assert!(addr(b) >= start && addr(b) + size <= start + capacity);
            let tag = live.len();
            live.push((fill(b, tag), tag));
        }
    }
    for (b, tag) in &live {
        check(b, *tag);
    }
    // The bytes used end exactly at the last buffer.
    let last = &live.last().unwrap().0;
    assert_eq!(temp.used(), addr(last) + last.len() - start);
}

#[test]
fn a_1_aligned_buffer_serves_aligned_requests() {
    let mut storage = Buf::<256>::new();
    let temp = FixedAllocator::new(&mut storage.0[1..]);
    let ctx = KernelContext::new(&temp);
    let a = ctx.allocate_temp(3, 1).unwrap();
    let b = ctx.allocate_temp(8, 8).unwrap();
    assert_eq!(addr(b) % 8, 0);
    // 1 byte of buffer offset + 3 bytes + 4 of padding: the offset is 7.
    assert_eq!(addr(b) - addr(a), 7);
    assert_eq!(temp.used(), 15);
}

#[test]
fn serves_the_exact_capacity_then_budget_exceeded_with_the_numbers() {
    let mut storage = Buf::<1000>::new();
    let temp = FixedAllocator::new(&mut storage.0);
    let ctx = KernelContext::new(&temp);
    let a = fill(ctx.allocate_temp(600, 8).unwrap(), 1);
    let b = fill(ctx.allocate_temp(400, 1).unwrap(), 2);
    assert_eq!(temp.used(), 1000);
    let before = temp.stats();
    for (size, align) in [(1, 1), (400, 8), (usize::MAX / 2, 1)] {
        assert_eq!(
            ctx.allocate_temp(size, align).unwrap_err(),
            Error::BudgetExceeded {
                requested: size,
                held: 1000,
                limit: 1000
            }
        );
    }
    assert_eq!(temp.stats(), before, "a refused request is not counted");
    check(a, 1);
    check(b, 2);
}

#[test]
fn padding_counts_against_the_capacity() {
    let mut storage = Buf::<128>::new();
    let temp = FixedAllocator::new(&mut storage.0);
    let ctx = KernelContext::new(&temp);
    ctx.allocate_temp(1, 1).unwrap();
    // 127 bytes are left, but at 64 alignment only 64 fit after the padding.
    assert_eq!(
        ctx.allocate_temp(65, 64).unwrap_err(),
        Error::BudgetExceeded {
            requested: 65,
            held: 1,
            limit: 128
        }
    );
    assert_eq!(temp.used(), 1, "a refused request moves nothing");
    let b = ctx.allocate_temp(64, 64).unwrap();
    assert_eq!(addr(b) % 64, 0);
    assert_eq!(temp.used(), 128);
}

#[test]
fn reset_reuses_the_buffer_from_its_start() {
    let mut storage = Buf::<512>::new();
    let start = storage.0.as_ptr().addr();
    let mut temp = FixedAllocator::new(&mut storage.0);
    for window in 0..3 {
        {
            let ctx = KernelContext::new(&temp);
            let a = fill(ctx.allocate_temp(300, 8).unwrap(), window);
            assert_eq!(addr(a), start, "window {window}");
            let b = fill(ctx.allocate_temp(212, 4).unwrap(), window + 10);
            assert_eq!(addr(b), start + 300);
            assert!(ctx.allocate_temp(1, 1).is_err());
            check(a, window);
            check(b, window + 10);
        }
        temp.reset();
        assert_eq!(temp.used(), 0);
    }
    assert_eq!(temp.stats().resets, 3);
}

#[test]
fn zero_sized_requests_are_aligned_counted_and_take_nothing() {
    let mut storage = Buf::<16>::new();
    let temp = FixedAllocator::new(&mut storage.0);
    let ctx = KernelContext::new(&temp);
    ctx.allocate_temp(16, 1).unwrap();
    // Full, yet zero-sized requests are still served, at any alignment.
    for align in [1, 8, 4096, 1 << 20] {
        let b = ctx.allocate_temp(0, align).unwrap();
        assert_eq!((b.len(), addr(b) % align), (0, 0));
    }
    let s = temp.stats();
    assert_eq!((s.allocations, s.bytes_requested, temp.used()), (5, 16, 16));
}

#[test]
fn an_empty_buffer_serves_only_zero_sized_requests() {
    let mut temp = FixedAllocator::new(&mut []);
    assert_eq!(temp.capacity(), 0);
    let ctx = KernelContext::new(&temp);
    assert_eq!(ctx.scratch::<u64>(0).unwrap().len(), 0);
    assert_eq!(
        ctx.allocate_temp(1, 1).unwrap_err(),
        Error::BudgetExceeded {
            requested: 1,
            held: 0,
            limit: 0
        }
    );
    let cp = temp.checkpoint();
    temp.reset();
    assert!(temp.rewind(cp).is_err());
    assert_eq!(temp.stats().bytes_held, 0);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut storage = Buf::<64>::new();
    let temp = FixedAllocator::new(&mut storage.0);
    let ctx = KernelContext::new(&temp);
    assert_eq!(
        ctx.allocate_temp(8, 3).unwrap_err(),
        Error::InvalidAlignment { align: 3 }
    );
    assert_eq!(
        ctx.allocate_temp(usize::MAX, 8).unwrap_err(),
        Error::SizeOverflow {
            size: usize::MAX,
            align: 8
        }
    );
    assert_eq!(temp.stats().allocations, 0);
}

#[test]
fn checkpoints_nest_and_rewind_in_order() {
    let mut storage = Buf::<1024>::new();
    let start = storage.0.as_ptr().addr();
    let mut temp = FixedAllocator::new(&mut storage.0);
    KernelContext::new(&temp).allocate_temp(100, 1).unwrap();
    let outer = temp.checkpoint();
    KernelContext::new(&temp).allocate_temp(200, 1).unwrap();
    let inner = temp.checkpoint();
    KernelContext::new(&temp).allocate_temp(300, 1).unwrap();
    assert_eq!(temp.used(), 600);

    temp.rewind(inner).unwrap();
    assert_eq!((temp.used(), temp.stats().bytes_live), (300, 300));
    // Rewinding to the same checkpoint twice is fine.
    temp.rewind(inner).unwrap();
    temp.rewind(outer).unwrap();
    assert_eq!((temp.used(), temp.stats().bytes_live), (100, 100));
    // The inner checkpoint is past the cursor now: stale.
    assert_eq!(
        temp.rewind(inner),
        Err(Error::StaleCheckpoint {
            taken_at: 0,
            now: 0
        })
    );
    assert_eq!(temp.used(), 100, "a refused rewind changes nothing");
    // Memory after the checkpoint is handed out again.
    let b = KernelContext::new(&temp).allocate_temp(8, 1).unwrap();
    assert_eq!(addr(b), start + 100);
    // The high water keeps what was live before the rewinds.
    assert_eq!(temp.stats().window_high_water, 600);
}

#[test]
fn checkpoints_from_before_a_reset_are_stale() {
    let mut storage = Buf::<64>::new();
    let mut temp = FixedAllocator::new(&mut storage.0);
    KernelContext::new(&temp).allocate_temp(8, 1).unwrap();
    let cp = temp.checkpoint();
    temp.reset();
    temp.reset();
    KernelContext::new(&temp).allocate_temp(32, 1).unwrap();
    assert_eq!(
        temp.rewind(cp),
        Err(Error::StaleCheckpoint {
            taken_at: 0,
            now: 2
        })
    );
    assert_eq!(temp.used(), 32);
}

#[test]
fn checkpoints_of_another_allocator_are_refused() {
    let mut a_buf = Buf::<64>::new();
    let mut b_buf = Buf::<64>::new();
    let a = FixedAllocator::new(&mut a_buf.0);
    let mut b = FixedAllocator::new(&mut b_buf.0);
    KernelContext::new(&b).allocate_temp(16, 1).unwrap();
    refuses_foreign_and_stale(&mut b, &a);
    assert_eq!(b.rewind(b.checkpoint()), Ok(()));
}

#[test]
fn stats_fill_every_counter_that_applies() {
    let mut storage = Buf::<4096>::new();
    let mut temp = FixedAllocator::new(&mut storage.0);
    let s = temp.stats();
    assert_eq!((s.bytes_held, s.allocations, s.high_water), (4096, 0, 0));
    {
        let ctx = KernelContext::new(&temp);
        ctx.allocate_temp(1000, 64).unwrap();
        ctx.allocate_temp(24, 8).unwrap();
        ctx.allocate_temp(0, 8).unwrap();
    }
    let s = temp.stats();
    assert_eq!(
        (s.allocations, s.bytes_requested, s.bytes_live),
        (3, 1024, 1024)
    );
    assert_eq!((s.high_water, s.window_high_water), (1024, 1024));
    temp.reset();
    KernelContext::new(&temp).allocate_temp(300, 8).unwrap();
    let s = temp.stats();
    assert_eq!(
        (s.allocations, s.bytes_requested, s.bytes_live, s.resets),
        (4, 1324, 300, 1)
    );
    // The window that ended at the reset is still the largest.
    assert_eq!((s.high_water, s.window_high_water), (1024, 1024));
    temp.reset();
    let s = temp.stats();
    assert_eq!(
        (s.bytes_live, s.window_high_water, s.high_water),
        (0, 300, 1024)
    );
    assert_eq!(
        (s.system_allocations, s.system_frees, s.bytes_held),
        (0, 0, 4096)
    );
}

#[test]
fn fixed_makes_no_system_allocation() {
    // A static buffer, as on a microcontroller; the allocator and contexts
    // live on the stack.
    // Byte-aligned: big enough for the requests below wherever it lands.
    static mut BUF: [MaybeUninit<u8>; 16384] = [MaybeUninit::uninit(); 16384];
    let before = crate::counting::counts();
    {
        // SAFETY: this test is the only user of `BUF`.
        let buf = unsafe { &mut *std::ptr::addr_of_mut!(BUF) };
        let mut temp = FixedAllocator::new(buf);
        for _ in 0..3 {
            {
                let ctx = KernelContext::new(&temp);
                ctx.scratch::<f32>(100).unwrap();
                ctx.allocate_temp(4000, 4096).unwrap();
                ctx.allocate(Layout::new::<[u64; 8]>()).unwrap();
                assert!(ctx.allocate_temp(1 << 20, 8).is_err());
            }
            let cp = temp.checkpoint();
            temp.rewind(cp).unwrap();
            temp.reset();
            // The README's pattern: a frame per inference, a kernel frame
            // per kernel, and a failure the kernel records.
            let r = temp.frame(|inf| {
                let x = inf.scratch_fill(64, 1.0f32)?;
                let sum = inf.kernel(|ctx| Ok(ctx.scratch_copy(x)?.iter().sum::<f32>()))?;
                inf.kernel(|ctx| {
                    if let Err(e) = ctx.allocate_temp(8, 3) {
                        ctx.fail(e);
                    }
                    Ok(sum)
                })
            });
            assert_eq!(r, Err(Error::InvalidAlignment { align: 3 }));
            assert_eq!(
                with_context(&mut temp, |ctx| Ok::<_, Error>(ctx.scratch::<u8>(9)?.len())),
                Ok(9)
            );
        }
        assert_eq!(temp.stats().system_allocations, 0);
    }
    let after = crate::counting::counts();
    assert_eq!(
        (after.allocs - before.allocs, after.frees - before.frees),
        (0, 0)
    );
}

#[test]
fn fixed_moves_to_another_thread() {
    let mut storage = Buf::<256>::new();
    let mut temp = FixedAllocator::new(&mut storage.0);
    KernelContext::new(&temp).allocate_temp(10, 1).unwrap();
    // `Send`: a runtime may hand the allocator to a worker thread.
    let used = std::thread::scope(|s| {
        s.spawn(move || {
            KernelContext::new(&temp).allocate_temp(6, 2).unwrap();
            temp.reset();
            KernelContext::new(&temp).allocate_temp(5, 1).unwrap();
            (temp.used(), temp.stats().resets)
        })
        .join()
        .unwrap()
    });
    assert_eq!(used, (5, 1));
}

#[test]
fn checkpoints_of_an_earlier_allocator_over_the_same_buffer_are_refused() {
    let mut storage = Buf::<64>::new();
    let earlier = {
        let temp = FixedAllocator::new(&mut storage.0);
        KernelContext::new(&temp).allocate_temp(8, 1).unwrap();
        temp.checkpoint()
    };
    let mut temp = FixedAllocator::new(&mut storage.0);
    KernelContext::new(&temp).allocate_temp(32, 1).unwrap();
    assert_eq!(temp.rewind(earlier), Err(Error::ForeignCheckpoint));
    assert_eq!(temp.used(), 32);
}

/// Worker threads sharing one context: disjoint buffers, and counters (the
/// live bytes come from the cursor less the padding) exact once joined.
#[test]
fn threads_sharing_a_context_get_disjoint_buffers_and_exact_counts() {
    let (threads, per_thread) = if cfg!(miri) { (3, 8) } else { (4, 500) };
    let size = |t: usize, i: usize| 1 + (t * 131 + i * 17) % 300;
    let mut buf = Box::<[u8]>::new_uninit_slice(1 << 20);
    let mut temp = FixedAllocator::new(&mut buf);
    let ctx = KernelContext::new(&temp);
    std::thread::scope(|s| {
        for t in 0..threads {
            let ctx = &ctx;
            s.spawn(move || {
                let bufs: Vec<_> = (0..per_thread)
                    .map(|i| {
                        // Alignments from 1 to 64, so most requests pad.
                        let b = ctx.allocate_temp(size(t, i), 1 << (i % 7)).unwrap();
                        fill(b, t * per_thread + i)
                    })
                    .collect();
                for (i, b) in bufs.iter().enumerate() {
                    check(b, t * per_thread + i);
                }
            });
        }
    });
    let want: usize = (0..threads)
        .flat_map(|t| (0..per_thread).map(move |i| size(t, i)))
        .sum();
    let s = temp.stats();
    assert_eq!(s.allocations as usize, threads * per_thread);
    assert_eq!((s.bytes_live, s.window_high_water), (want, want));
    assert!(temp.used() >= want);
    temp.reset();
    assert_eq!(temp.stats().bytes_requested as usize, want);
}
