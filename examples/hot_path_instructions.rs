//! The hot path in instructions, for `scripts/instructions.sh`: requests
//! through `KernelContext::allocate_temp` on a warm `CachingAllocator` (or,
//! with the argument `fixed`, on a `FixedAllocator`), and the same requests
//! through `bumpalo::Bump::alloc_layout`, each loop in a function of its own
//! so that callgrind counts them apart. Run it alone and it only says how
//! many requests each loop makes.

use std::alloc::Layout;
use std::hint::black_box;
use std::mem::MaybeUninit;

use tempalloc::{CachingAllocator, CachingConfig, FixedAllocator, KernelContext, TempAllocator};

/// Requests per loop: enough to make the call and loop overhead vanish.
const N: usize = 100_000;
const SIZE: usize = 256;
const ALIGN: usize = 64;

#[inline(never)]
fn through_kernel_context(ctx: &KernelContext) {
    for _ in 0..N {
        black_box(
            ctx.allocate_temp(black_box(SIZE), black_box(ALIGN))
                .unwrap(),
        );
    }
}

#[inline(never)]
fn through_bumpalo(bump: &bumpalo::Bump) {
    let layout = Layout::from_size_align(SIZE, ALIGN).unwrap();
    for _ in 0..N {
        black_box(bump.alloc_layout(black_box(layout)));
    }
}

#[inline(never)]
fn resets(temp: &mut CachingAllocator) {
    for _ in 0..N {
        black_box(temp.allocate(Layout::new::<u64>()).unwrap());
        reset(temp);
    }
}

/// One reset, out of line so that callgrind counts it alone (a runtime
/// calls it through a `dyn` or across the C API, also out of line).
#[inline(never)]
fn reset(temp: &mut CachingAllocator) {
    temp.reset();
}

/// A context over `temp` whose allocator the compiler cannot see, as a
/// context a runtime in another crate hands a kernel: it learns which
/// allocator it has through `dyn`, once, when it is made, and the kernel's
/// requests then inline that allocator's fast path.
fn opaque_context(temp: &dyn TempAllocator) -> KernelContext<'_> {
    KernelContext::new(black_box(temp))
}

fn main() {
    let mut temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false));
    if std::env::args().nth(1).as_deref() == Some("fixed") {
        let mut buf = vec![MaybeUninit::uninit(); N * (SIZE + ALIGN)];
        let mut fixed = FixedAllocator::new(&mut buf);
        for _ in 0..3 {
            through_kernel_context(&opaque_context(&fixed));
            fixed.reset();
        }
        println!("{N} requests per loop");
        return;
    }
    let mut bump = bumpalo::Bump::with_capacity(N * (SIZE + ALIGN));
    // Warm: the region has committed what a loop needs, bumpalo its chunk.
    for _ in 0..2 {
        through_kernel_context(&opaque_context(&temp));
        temp.reset();
        through_bumpalo(&bump);
        bump.reset();
    }
    through_kernel_context(&opaque_context(&temp));
    through_bumpalo(&bump);
    resets(&mut temp);
    println!("{N} requests per loop");
}
