//! The frame API a runtime author meets: a checkpoint that cannot be taken
//! fails the scope instead of aborting, kernels and frames return the
//! engine's own error type, a frame is a context, and collections over a
//! frame's allocator live across its kernels. Runs without `std` (over
//! `FixedAllocator`).

use core::alloc::Layout;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use tempalloc::{Error, FixedAllocator, FixedCheckpoint, Rewind, Stats, TempAllocator};

/// A `FixedAllocator` whose checkpoints fail while `refuse` is set, as one
/// whose books of open checkpoints cannot grow would.
struct NoBooks<'b> {
    inner: FixedAllocator<'b>,
    refuse: AtomicBool,
}

const NO_BOOKS: Error = Error::OutOfMemory { size: 64, align: 8 };

// SAFETY: every call goes to `inner`, which upholds the contract.
unsafe impl TempAllocator for NoBooks<'_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        self.inner.allocate(layout)
    }
    fn reset(&mut self) {
        self.inner.reset();
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

// SAFETY: as above; a refused checkpoint takes nothing.
unsafe impl Rewind for NoBooks<'_> {
    type Checkpoint = FixedCheckpoint;
    fn checkpoint(&self) -> Result<FixedCheckpoint, Error> {
        if self.refuse.load(Relaxed) {
            return Err(NO_BOOKS);
        }
        Rewind::checkpoint(&self.inner)
    }
    fn rewind(&mut self, cp: FixedCheckpoint) -> Result<(), Error> {
        self.inner.rewind(cp)
    }
}

#[test]
fn a_checkpoint_that_cannot_be_taken_fails_the_scope_and_runs_nothing() {
    let mut buf = [MaybeUninit::uninit(); 1024];
    let mut temp = NoBooks {
        inner: FixedAllocator::new(&mut buf),
        refuse: AtomicBool::new(false),
    };
    let r: Result<usize, Error> =
        temp.frame(|inf| inf.kernel(|ctx| Ok(ctx.scratch::<u8>(8)?.len())));
    assert_eq!(r, Ok(8));
    // The refusal: kernels and nested frames return it and never run.
    temp.refuse.store(true, Relaxed);
    let r: Result<(), Error> = temp.frame(|inf| {
        let act = inf.scratch_fill(16, 7u32)?;
        let mut ran = false;
        let kernel = inf.kernel(|_ctx| {
            ran = true;
            Ok(())
        });
        assert_eq!(kernel, Err(NO_BOOKS));
        let nested = inf.frame(|_inner| {
            ran = true;
            Ok(())
        });
        assert_eq!(nested, Err(NO_BOOKS));
        assert!(!ran);
        // What the frame took before is intact.
        assert!(act.iter().all(|&x| x == 7));
        Ok(())
    });
    assert_eq!(r, Ok(()));
    assert_eq!(temp.stats().bytes_live, 0);
}

/// An engine's own error type, as the kernels of a runtime return it.
#[derive(Debug, PartialEq)]
enum EngineError {
    Scratch(Error),
    BadShape { rows: usize },
}

impl From<Error> for EngineError {
    fn from(e: Error) -> Self {
        EngineError::Scratch(e)
    }
}

fn engine_kernel(ctx: &tempalloc::KernelContext, rows: usize) -> Result<usize, EngineError> {
    if rows == 0 {
        return Err(EngineError::BadShape { rows });
    }
    Ok(ctx.scratch::<f32>(rows)?.len())
}

/// Kernels, frames and `with_context` return the engine's
/// error type; a recorded failure still wins, converted with `From`.
#[test]
fn kernels_and_frames_return_the_engines_own_error_type() {
    let mut buf = [MaybeUninit::uninit(); 4096];
    let mut temp = FixedAllocator::new(&mut buf);
    let r = tempalloc::with_context(&mut temp, |ctx| engine_kernel(ctx, 4));
    assert_eq!(r, Ok(4));
    let r = temp.frame(|inf| {
        let n = inf.kernel(|ctx| engine_kernel(ctx, 8))?;
        let bad = inf.kernel(|ctx| engine_kernel(ctx, 0));
        assert_eq!(bad, Err(EngineError::BadShape { rows: 0 }));
        inf.frame(|layer| layer.kernel(|ctx| engine_kernel(ctx, n)))
    });
    assert_eq!(r, Ok(8));
    // A failure recorded on the context wins over the kernel's `Ok`...
    let r = temp.frame(|inf| {
        inf.kernel(|ctx| {
            ctx.fail(Error::InvalidAlignment { align: 3 });
            engine_kernel(ctx, 1)
        })
    });
    let recorded = EngineError::Scratch(Error::InvalidAlignment { align: 3 });
    assert_eq!(r, Err(recorded));
    // ...and the budget comes out as the engine's error too.
    let r = temp.frame(|inf| inf.kernel(|ctx| engine_kernel(ctx, 1 << 20)));
    assert!(
        matches!(
            r,
            Err(EngineError::Scratch(Error::BudgetExceeded {
                limit: 4096,
                ..
            }))
        ),
        "{r:?}"
    );
    assert_eq!(temp.stats().bytes_live, 0);
}

/// A frame is a `KernelContext` (one set of scratch
/// methods), so a kernel function runs on the frame itself and its scratch
/// lives for the frame; a failure recorded on the frame comes out of it.
#[test]
fn a_frame_is_a_context_whose_scratch_lives_for_the_frame() {
    fn kernel<'a>(ctx: &tempalloc::KernelContext<'a>, v: u32) -> Result<&'a mut [u32], Error> {
        ctx.scratch_fill(4, v)
    }
    let mut buf = [MaybeUninit::uninit(); 4096];
    let mut temp = FixedAllocator::new(&mut buf);
    let r = temp.frame(|inf| {
        let kept = kernel(inf, 7)?; // scratch of the frame, through the function
        let uninit = inf.scratch_uninit::<u8>(3)?;
        let with = inf.scratch_with(3, |i| i as u8)?;
        inf.kernel(|ctx| kernel(ctx, 1).map(|_| ()))?;
        assert_eq!(
            (kept, uninit.len(), &*with),
            (&mut [7; 4][..], 3, &[0, 1, 2][..])
        );
        Ok::<_, Error>(())
    });
    assert_eq!(r, Ok(()));
    let r = temp.frame(|inf| {
        inf.fail(Error::InvalidAlignment { align: 5 });
        Ok(())
    });
    assert_eq!(r, Err(Error::InvalidAlignment { align: 5 }));
    let r = temp.frame(|inf| {
        inf.frame(|layer| {
            layer.fail(Error::InvalidAlignment { align: 6 });
            Ok(1)
        })
    });
    assert_eq!(r, Err(Error::InvalidAlignment { align: 6 }));
}

/// A collection over the frame's allocator lives across
/// kernels, which read it, and grows between them.
#[cfg(feature = "alloc")]
#[test]
fn a_frame_vec_lives_across_kernels_and_grows_between_them() {
    use tempalloc::{FrameVec, ScratchVecExt};
    let mut buf = [MaybeUninit::uninit(); 8192];
    let mut temp = FixedAllocator::new(&mut buf);
    let r = temp.frame(|inf| {
        let mut tokens = FrameVec::new_in(inf.allocator());
        for step in 0..20u32 {
            let next = inf.kernel(|ctx| {
                let tmp = ctx.scratch_copy(&tokens)?;
                Ok::<_, Error>(tmp.iter().sum::<u32>() + step)
            })?;
            tokens.try_push(next)?;
        }
        // Every value was computed from the ones before: nothing recycled.
        let mut sum = 0;
        for (step, &t) in tokens.iter().enumerate() {
            assert_eq!(t, sum + step as u32);
            sum += t;
        }
        Ok::<_, Error>(tokens.len())
    });
    assert_eq!(r, Ok(20));
    assert_eq!(temp.used(), 0);
}

/// Growing a frame's collection inside a kernel or
/// a nested frame is refused (their rewind would recycle it), with the
/// numbers, and the collection is left as it was.
#[cfg(feature = "alloc")]
#[test]
fn a_frame_vec_grown_inside_an_inner_scope_is_refused_with_the_depths() {
    use tempalloc::{FrameVec, ScratchVecExt};
    let mut buf = [MaybeUninit::uninit(); 4096];
    let mut temp = FixedAllocator::new(&mut buf);
    let r = temp.frame(|inf| {
        let mut v = FrameVec::new_in(inf.allocator());
        v.try_push(1u64)?;
        inf.frame(|layer| {
            let e = v.try_extend_from_slice(&[2; 16]).unwrap_err();
            assert_eq!(e, Error::FrameSuspended { depth: 1, open: 2 });
            layer.kernel(|_ctx| {
                // Within capacity is fine: no allocation.
                v[0] = 5;
                Ok::<_, Error>(())
            })?;
            let mut inner = FrameVec::new_in(layer.allocator());
            inner.try_push(3u8)?;
            layer.kernel(|_| {
                let e = inner.try_extend_from_slice(&[4; 64]).unwrap_err();
                assert_eq!(e, Error::FrameSuspended { depth: 2, open: 3 });
                Ok::<_, Error>(())
            })
        })
        .expect("the refusals were handled");
        assert_eq!(&*v, &[5]);
        Ok::<_, Error>(())
    });
    // Each refusal was handled, so the frames stay `Ok`.
    assert_eq!(r, Ok(()));
}

/// `try_push` and `try_extend_from_slice` at the limit
/// return the recorded error and keep the vector; `push` would abort.
#[cfg(feature = "alloc")]
#[test]
fn try_push_at_the_limit_returns_the_budget_error_and_keeps_the_vec() {
    use tempalloc::{KernelContext, ScratchVec, ScratchVecExt};
    let mut buf = [MaybeUninit::uninit(); 256];
    let temp = FixedAllocator::new(&mut buf);
    let ctx = KernelContext::new(&temp);
    let mut v = ScratchVec::new_in(&ctx);
    let mut pushed = 0u32;
    let e = loop {
        match v.try_push(pushed) {
            Ok(()) => pushed += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::BudgetExceeded { limit: 256, .. }), "{e}");
    assert_eq!(v.len(), pushed as usize);
    assert!(v.iter().copied().eq(0..pushed));
    assert_eq!(ctx.failure(), Some(e));
}

/// A `hashbrown` map over the frame's allocator counts
/// across the frame's kernels.
#[cfg(feature = "alloc")]
#[test]
fn a_hash_map_over_the_frame_allocator_lives_across_kernels() {
    use hashbrown::{DefaultHashBuilder, HashMap};
    let mut buf = [MaybeUninit::uninit(); 16 * 1024];
    let mut temp = FixedAllocator::new(&mut buf);
    let r = temp.frame(|inf| {
        let mut seen = HashMap::with_hasher_in(DefaultHashBuilder::default(), inf.allocator());
        for step in 0..50u32 {
            let token = inf.kernel(|ctx| {
                let logits = ctx.scratch_with(16, |i| (i as u32 * 7 + step) % 16)?;
                Ok::<_, Error>(logits[0] + *seen.get(&(step % 5)).unwrap_or(&0))
            })?;
            *seen.entry(step % 5).or_insert(0) += token % 3;
        }
        Ok::<_, Error>(seen.values().sum::<u32>() + seen.len() as u32)
    });
    // The same computation without scratch.
    let mut seen = std::collections::HashMap::new();
    for step in 0..50u32 {
        let token = step % 16 + *seen.get(&(step % 5)).unwrap_or(&0);
        *seen.entry(step % 5).or_insert(0) += token % 3;
    }
    assert_eq!(r, Ok(seen.values().sum::<u32>() + seen.len() as u32));
}
