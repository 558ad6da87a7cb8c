//! Every power-of-two alignment, typed scratch and zero-sized requests.

use std::alloc::Layout;

use tempalloc::KernelContext;

use crate::util::{FIXED, FIXED_CAPACITY, addr, check, fill, for_each_allocator};

fn alignments() -> impl Iterator<Item = usize> {
    (0..=12).map(|s| 1usize << s).chain([65536])
}

#[test]
fn every_power_of_two_alignment_is_honoured() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        let mut live = Vec::new();
        for align in alignments() {
            for size in [1, 3, 64, 1000, align + 1] {
                // Under Miri, which interprets each byte of the patterns,
                // three sizes: smaller than, larger than and just past the
                // alignment.
                if cfg!(miri) && (size == 1 || size == 64) {
                    continue;
                }
                let buf = ctx.allocate_temp(size, align).unwrap();
                assert_eq!(addr(buf) % align, 0, "{name}: {size} B at align {align}");
                assert_eq!(buf.len(), size, "{name}: {size} B at align {align}");
                let tag = live.len();
                live.push((fill(buf, tag), tag));
            }
        }
        for (buf, tag) in &live {
            check(buf, *tag);
        }
    });
}

#[test]
fn layout_requests_are_aligned_and_long_enough() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for align in alignments() {
            let layout = Layout::from_size_align(100, align).unwrap();
            let p = ctx.allocate(layout).unwrap();
            assert_eq!(
                p.cast::<u8>().as_ptr() as usize % align,
                0,
                "{name}: align {align}"
            );
            assert!(
                p.len() >= 100,
                "{name}: align {align} gave {} bytes",
                p.len()
            );
        }
    });
}

#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; 4096]);

// SAFETY: an array of bytes is valid when all zero.
unsafe impl bytemuck::Zeroable for Page {}

#[test]
fn typed_scratch_is_aligned_for_its_type_and_zeroed() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        let _misalign = ctx.allocate_temp(1, 1).unwrap();
        let a = ctx.scratch::<u16>(7).unwrap();
        let b = ctx.scratch::<f64>(9).unwrap();
        let c = ctx.scratch::<u128>(3).unwrap();
        let d = ctx.scratch::<Page>(2).unwrap();
        assert_eq!((a.len(), addr(a) % align_of::<u16>()), (7, 0), "{name}");
        assert_eq!((b.len(), addr(b) % align_of::<f64>()), (9, 0), "{name}");
        assert_eq!((c.len(), addr(c) % align_of::<u128>()), (3, 0), "{name}");
        assert_eq!((d.len(), addr(d) % 4096), (2, 0), "{name}");
        assert!(
            a.iter().all(|&x| x == 0) && b.iter().all(|&x| x == 0.0),
            "{name}"
        );
        // Under Miri each page is compared whole (a `memcmp`, which Miri
        // does in one step), not interpreted byte by byte: every byte is
        // still checked.
        let zeroed = |p: &Page| {
            if cfg!(miri) {
                p.0 == [0; 4096]
            } else {
                p.0.iter().all(|&x| x == 0)
            }
        };
        assert!(c.iter().all(|&x| x == 0) && d.iter().all(zeroed), "{name}");
    });
}

#[repr(align(4096))]
#[derive(Clone, Copy)]
struct PageAlignedZst;

// SAFETY: a zero-sized type has no bytes, so "all zero" is trivially valid.
unsafe impl bytemuck::Zeroable for PageAlignedZst {}

#[test]
fn zero_sized_requests_succeed_aligned() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for align in alignments() {
            let buf = ctx.allocate_temp(0, align).unwrap();
            assert_eq!(
                (buf.len(), addr(buf) % align),
                (0, 0),
                "{name}: align {align}"
            );
        }
        let empty = ctx.scratch::<u32>(0).unwrap();
        assert_eq!((empty.len(), addr(empty) % 4), (0, 0), "{name}");
        let units = ctx.scratch::<()>(1000).unwrap();
        assert_eq!(units.len(), 1000, "{name}");
        let zsts = ctx.scratch::<PageAlignedZst>(usize::MAX).unwrap();
        assert_eq!((zsts.len(), addr(zsts) % 4096), (usize::MAX, 0), "{name}");
        let empty_arrays = ctx.scratch::<[u64; 0]>(5).unwrap();
        assert_eq!(
            (empty_arrays.len(), addr(empty_arrays) % 8),
            (5, 0),
            "{name}"
        );
        let uninit = ctx.scratch_uninit::<f32>(0).unwrap();
        assert_eq!((uninit.len(), addr(uninit) % 4), (0, 0), "{name}");
    });
}

#[test]
fn zero_sized_requests_take_no_memory() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        for align in alignments() {
            ctx.allocate_temp(0, align).unwrap();
        }
        ctx.scratch::<u32>(0).unwrap();
        ctx.scratch::<()>(10).unwrap();
        let s = temp.stats();
        let requests = alignments().count() as u64 + 2;
        assert_eq!(
            s.allocations, requests,
            "{name}: zero-sized requests are counted"
        );
        assert_eq!((s.bytes_requested, s.high_water), (0, 0), "{name}");
        // A fixed allocator holds its whole buffer from the start.
        let held = if name == FIXED { FIXED_CAPACITY } else { 0 };
        assert_eq!((s.system_allocations, s.bytes_held), (0, held), "{name}");
    });
}
