//! Many live buffers of varied sizes and alignments never overlap: a pattern
//! written into each survives until the reset.

use tempalloc::KernelContext;

use crate::util::{Lcg, check, fill, for_each_allocator};

const ALIGNS: [usize; 7] = [1, 8, 16, 64, 128, 4096, 65536];

#[test]
fn live_buffers_are_disjoint_and_keep_their_bytes() {
    for_each_allocator(|name, temp| {
        let mut rng = Lcg(42);
        // Under Miri two windows: the second is the one served from memory
        // the reset recycled.
        for window in 0..if cfg!(miri) { 2 } else { 3 } {
            {
                let ctx = KernelContext::new(temp);
                let mut live = Vec::new();
                let mut ranges = Vec::new();
                // Fewer under Miri, which interprets every byte written: 12
                // still draw empty, small, large and page-aligned requests.
                for tag in 0..if cfg!(miri) { 12 } else { 300 } {
                    let size = match rng.below(10) {
                        0 => 0,
                        1..=6 => 1 + rng.below(512) as usize,
                        _ => 1 + rng.below(100_000) as usize,
                    };
                    let align = ALIGNS[rng.below(ALIGNS.len() as u64) as usize];
                    let buf = ctx.allocate_temp(size, align).unwrap();
                    assert_eq!(buf.as_ptr() as usize % align, 0, "{name}");
                    if size > 0 {
                        ranges.push((buf.as_ptr() as usize, size));
                    }
                    live.push((fill(buf, tag), tag));
                    // Typed scratch in between, checked to be zeroed.
                    // Under Miri fewer elements, each checked and written
                    // one by one: zeroing is one path whatever the length.
                    let most = if cfg!(miri) { 40 } else { 300 };
                    let typed = ctx.scratch::<u32>(rng.below(most) as usize).unwrap();
                    assert!(typed.iter().all(|&v| v == 0), "{name}: scratch not zeroed");
                    typed.fill(u32::MAX);
                }
                for (buf, tag) in &live {
                    check(buf, *tag);
                }
                ranges.sort_unstable();
                for pair in ranges.windows(2) {
                    let ((a, a_len), (b, _)) = (pair[0], pair[1]);
                    assert!(
                        a + a_len <= b,
                        "{name}: window {window}: [{a:#x}; {a_len}] overlaps {b:#x}"
                    );
                }
            }
            temp.reset();
        }
    });
}
