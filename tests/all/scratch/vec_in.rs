//! `allocator_api2` collections in scratch through `&KernelContext`.

use allocator_api2::vec::Vec;
use tempalloc::KernelContext;

use crate::util::for_each_allocator;

#[test]
fn a_vec_grows_through_many_reallocations_intact() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        let mut v = Vec::new_in(&ctx);
        let mut growths = 0u64;
        let mut capacity = v.capacity();
        // Fewer under Miri, which interprets every push: 400 still take
        // eight growths.
        for i in 0..if cfg!(miri) { 400 } else { 100_000u64 } {
            v.push(i * 3 + 1);
            if v.capacity() != capacity {
                growths += 1;
                capacity = v.capacity();
            }
        }
        assert!(growths >= 5, "{name}: only {growths} growths");
        assert!(
            v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3 + 1),
            "{name}"
        );
        let allocations = temp.stats().allocations;
        if name.starts_with("Caching") || name == crate::util::FIXED || name == "BumpAllocator" {
            // The vector is the newest block: it grows in place,
            // or, in bumpalo, into the room below it while its chunk has
            // that room.
            assert!(allocations < growths, "{name}: {allocations} requests");
        } else {
            assert_eq!(allocations, growths, "{name}: one request per growth");
        }
    });
}

#[test]
fn interleaved_vecs_do_not_clobber_each_other() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        let mut a = Vec::new_in(&ctx);
        let mut b = Vec::new_in(&ctx);
        let mut c: Vec<[u8; 3], _> = Vec::new_in(&ctx);
        // Under Miri 200, still several growths of each vector, each
        // moving past the other two.
        for i in 0..if cfg!(miri) { 200 } else { 20_000u32 } {
            a.push(i);
            b.push(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            c.push([i as u8, (i >> 8) as u8, 0xA5]);
        }
        assert!(a.iter().enumerate().all(|(i, &x)| x == i as u32), "{name}");
        assert!(
            b.iter()
                .enumerate()
                .all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            "{name}"
        );
        assert!(
            c.iter()
                .enumerate()
                .all(|(i, x)| *x == [i as u8, (i >> 8) as u8, 0xA5]),
            "{name}"
        );
        a.truncate(10);
        a.shrink_to_fit();
        assert_eq!(
            &a[..],
            &(0..10).collect::<std::vec::Vec<u32>>()[..],
            "{name}"
        );
    });
}

#[repr(align(4096))]
#[derive(Clone, Copy, PartialEq, Debug)]
struct PageTile(u32);

#[test]
fn over_aligned_elements_stay_aligned_as_the_vec_grows() {
    for_each_allocator(|name, temp| {
        let ctx = KernelContext::new(temp);
        let mut v = Vec::new_in(&ctx);
        for i in 0..40 {
            v.push(PageTile(i));
            assert_eq!(v.as_ptr() as usize % 4096, 0, "{name}");
        }
        assert!(v.iter().enumerate().all(|(i, t)| t.0 == i as u32), "{name}");
    });
}

#[test]
fn a_scratch_vec_over_budget_records_the_real_error() {
    use tempalloc::{
        BumpAllocator, CachingAllocator, CachingConfig, Error, ScratchVec, TempAllocator,
        with_context,
    };
    let limit = 64 * 1024;
    let mut allocators: [(&str, Box<dyn TempAllocator>); 2] = [
        ("BumpAllocator", Box::new(BumpAllocator::with_limit(limit))),
        (
            "CachingAllocator",
            Box::new(CachingAllocator::with_config(
                CachingConfig::default()
                    .min_block_size(16 * 1024)
                    .max_bytes(Some(limit)),
            )),
        ),
    ];
    for (name, temp) in &mut allocators {
        let r = with_context(temp, |ctx| {
            let mut v: ScratchVec<'_, u64> = ScratchVec::new_in(ctx);
            v.try_reserve(100).expect("within budget");
            v.extend(0..100);
            let mut big: ScratchVec<'_, u64> = ScratchVec::new_in(ctx);
            assert!(big.try_reserve(10_000).is_err(), "{name}");
            assert!(
                matches!(
                    ctx.failure(),
                    Some(Error::BudgetExceeded {
                        requested: 80_000,
                        ..
                    })
                ),
                "{name}: {:?}",
                ctx.failure()
            );
            // The context saw the real error; the first vector is intact.
            assert!(v.iter().copied().eq(0..100), "{name}");
            Ok::<_, Error>(v.len())
        });
        // The kernel handled the refusal: its `Ok` stands.
        assert_eq!(r, Ok(100), "{name}");
        // A kernel that gives up returns an `Err` with the refusal's
        // numbers, which the context kept.
        let r = with_context(temp, |ctx| {
            let mut big: ScratchVec<'_, u64> = ScratchVec::new_in(ctx);
            big.try_reserve(10_000)
                .map_err(|_| ctx.failure().unwrap_or(Error::NoTempAllocator))?;
            Ok(big.len())
        });
        match r {
            Err(Error::BudgetExceeded {
                requested,
                limit: l,
                ..
            }) => {
                assert_eq!((requested, l), (80_000, limit), "{name}");
            }
            other => panic!("{name}: expected BudgetExceeded, got {other:?}"),
        }
    }
}
