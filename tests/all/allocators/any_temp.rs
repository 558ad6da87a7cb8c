//! `AnyTemp`: an allocator chosen at run time that still
//! runs frames, without making the runtime generic.

use tempalloc::{
    AnyCheckpoint, AnyTemp, BumpAllocator, CachingAllocator, CachingConfig, Error, KernelContext,
    MallocAllocator, Rewind, TempAllocator,
};

/// A runtime's own allocator (here one of the crate's, boxed as any other
/// `Rewind` allocator would be).
fn custom() -> AnyTemp {
    AnyTemp::custom(MallocAllocator::new())
}

/// A runtime that is not generic: it takes whatever allocator was chosen.
fn runtime(temp: &mut AnyTemp, tokens: usize) -> Result<u64, Error> {
    fn kernel(ctx: &KernelContext, act: &[u64]) -> Result<u64, Error> {
        let tmp = ctx.scratch_copy(act)?;
        tmp.iter_mut().for_each(|x| *x *= 2);
        Ok(tmp.iter().sum())
    }
    temp.frame(|inf| {
        let act = inf.scratch_with(256, |i| i as u64)?;
        let mut total = 0;
        for _ in 0..tokens {
            total += inf.kernel(|ctx| kernel(ctx, act))?;
        }
        Ok(total)
    })
}

#[test]
fn every_variant_runs_the_same_frames_and_gets_the_same_answer() {
    let want = 3 * 2 * (0..256u64).sum::<u64>();
    for (name, mut temp) in [
        ("caching", AnyTemp::from(CachingAllocator::new())),
        ("malloc", AnyTemp::from(MallocAllocator::new())),
        ("bump", AnyTemp::from(BumpAllocator::new())),
        ("custom", custom()),
    ] {
        assert_eq!(runtime(&mut temp, 3), Ok(want), "{name}");
        assert_eq!(runtime(&mut temp, 3), Ok(want), "{name}");
        let stats = temp.stats();
        assert_eq!((stats.bytes_live, stats.resets), (0, 2), "{name}");
        assert_eq!(stats.allocations, 2 * 4, "{name}");
    }
}

#[test]
fn a_checkpoint_of_another_variant_or_allocator_is_refused_and_changes_nothing() {
    let mut caching = AnyTemp::from(CachingAllocator::new());
    let malloc = AnyTemp::from(MallocAllocator::new());
    let theirs = malloc.checkpoint().unwrap();
    KernelContext::new(&caching).scratch::<u8>(64).unwrap();
    assert_eq!(caching.rewind(theirs), Err(Error::ForeignCheckpoint));
    assert_eq!(caching.stats().bytes_live, 64);
    let other = AnyTemp::from(CachingAllocator::new());
    assert_eq!(
        caching.rewind(other.checkpoint().unwrap()),
        Err(Error::ForeignCheckpoint)
    );
    let ours = caching.checkpoint().unwrap();
    KernelContext::new(&caching).scratch::<u8>(100).unwrap();
    assert_eq!(caching.rewind(ours), Ok(()));
    assert_eq!(caching.stats().bytes_live, 64);
}

#[test]
fn a_failure_in_any_variant_comes_out_with_its_numbers() {
    let mut temp = AnyTemp::from(BumpAllocator::with_limit(64 * 1024));
    let r = temp.frame(|inf| inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch::<u8>(1 << 20)?.len())));
    assert!(
        matches!(
            r,
            Err(Error::BudgetExceeded {
                requested: 1048576,
                ..
            })
        ),
        "{r:?}"
    );
}

/// A runtime's own allocator joins `AnyTemp`, and the
/// calls the allocators share need no `match`.
#[test]
fn a_custom_allocator_runs_frames_and_refuses_other_checkpoints() {
    let mut custom = custom();
    let cp = custom.checkpoint().unwrap();
    assert!(matches!(cp, AnyCheckpoint::Custom(_)));
    KernelContext::new(&custom).scratch::<u8>(100).unwrap();
    assert_eq!(custom.rewind(cp), Ok(()));
    assert_eq!(custom.stats().bytes_live, 0);
    // Another variant's checkpoint, and another custom type's.
    let caching = AnyTemp::from(CachingAllocator::new());
    assert_eq!(
        custom.rewind(caching.checkpoint().unwrap()),
        Err(Error::ForeignCheckpoint)
    );
    let mut bump = AnyTemp::custom(BumpAllocator::with_limit(64 * 1024));
    assert_eq!(
        custom.rewind(bump.checkpoint().unwrap()),
        Err(Error::ForeignCheckpoint)
    );
    // A failure comes out with its numbers.
    let r = bump.frame(|inf| inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch::<u8>(1 << 20)?.len())));
    assert!(
        matches!(
            r,
            Err(Error::BudgetExceeded {
                requested: 1048576,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(format!("{custom:?}").starts_with("Custom("));
}

#[test]
fn trim_release_check_and_max_bytes_work_on_every_variant() {
    let config = CachingConfig::default().max_bytes(Some(64 << 20));
    for (name, mut temp, limit) in [
        (
            "caching",
            AnyTemp::from(CachingAllocator::with_config(config)),
            Some(64 << 20),
        ),
        ("malloc", AnyTemp::from(MallocAllocator::new()), None),
        (
            "bump",
            AnyTemp::from(BumpAllocator::with_limit(1 << 20)),
            Some(1 << 20),
        ),
        ("custom", custom(), None),
    ] {
        assert_eq!(temp.max_bytes(), limit, "{name}");
        KernelContext::new(&temp).scratch::<u8>(32 * 1024).unwrap();
        temp.reset();
        temp.trim();
        assert_eq!(temp.check(), Ok(()), "{name}");
        temp.release();
        let stats = temp.stats();
        assert_eq!(stats.bytes_live, 0, "{name}");
        assert_eq!(stats.bytes_held, 0, "{name}");
        // Still serves after all of it.
        assert_eq!(runtime(&mut temp, 1).map(|_| ()), Ok(()), "{name}");
    }
}
