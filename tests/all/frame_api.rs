//! The frame API as issue 20 and issue 19 shaped it: a checkpoint that
//! cannot be taken fails the scope instead of aborting. Runs without `std`
//! (over `FixedAllocator`).

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
