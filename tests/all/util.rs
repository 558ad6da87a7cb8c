//! Shared helpers: the allocators under test and byte patterns.

use std::alloc::Layout;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::NonNull;

#[cfg(feature = "std")]
use tempalloc::testing::{SystemCall, refuse_system_calls};
#[cfg(feature = "std")]
use tempalloc::{BumpAllocator, CachingAllocator, CachingConfig, MallocAllocator};
use tempalloc::{Error, FixedAllocator, Rewind, Stats, TempAllocator};

/// The page size the allocators round to: the system's, or
/// `TEMPALLOC_PAGE_SIZE` (CI runs the suite at 16 and 64 KiB pages too).
#[cfg(feature = "std")]
pub fn page() -> usize {
    tempalloc::testing::page_size()
}

/// Refuses this thread's system calls of one kind (`testing::refuse_system_calls`)
/// while it lives, and clears every refusal of the thread when dropped, so
/// that nothing the test set up outlives it, passed or not.
#[cfg(feature = "std")]
#[must_use = "the refusals end when this is dropped"]
pub struct Refusing;

#[cfg(feature = "std")]
impl Refusing {
    /// Refuses every one of this thread's `call`s until dropped.
    pub fn every(call: SystemCall) -> Refusing {
        Refusing::calls(call, 0, u32::MAX)
    }

    /// Lets the next `skip` of this thread's `call`s through, then refuses
    /// `times` of them (`refuse_system_calls`' arguments).
    pub fn calls(call: SystemCall, skip: u32, times: u32) -> Refusing {
        refuse_system_calls(call, skip, times);
        Refusing
    }
}

#[cfg(feature = "std")]
impl Drop for Refusing {
    fn drop(&mut self) {
        for call in [
            SystemCall::Reserve,
            SystemCall::Commit,
            SystemCall::Decommit,
        ] {
            refuse_system_calls(call, 0, 0);
        }
    }
}

/// Asserts that a request a random workload made under a limit (or with
/// failures injected) was served or refused as such a request may be
/// (`BudgetExceeded`, `OutOfMemory`), and nothing else; what must hold
/// either way (the books) is the caller's to check.
#[cfg(feature = "std")]
#[track_caller]
pub fn served_or_refused<T>(r: Result<T, Error>) {
    if let Err(e) = r {
        assert!(
            matches!(e, Error::BudgetExceeded { .. } | Error::OutOfMemory { .. }),
            "a refusal with another error: {e}"
        );
    }
}

/// A request no system can serve: a quarter of the address space (1 << 62
/// on 64-bit targets, 1 << 30 on 32-bit ones).
pub const HUGE: usize = 1 << (usize::BITS - 2);

/// Makes a fresh allocator under test.
pub type Make = fn() -> Box<dyn TempAllocator>;

/// Every allocator the generic tests run against. Adding an allocator is one
/// line here. Without `std` only `FixedAllocator` is built.
pub const ALLOCATORS: &[(&str, Make)] = &[
    #[cfg(feature = "std")]
    ("MallocAllocator", || Box::new(MallocAllocator::new())),
    #[cfg(feature = "std")]
    ("BumpAllocator", || Box::new(BumpAllocator::new())),
    // The default: the lock-free fast path, in every build.
    #[cfg(feature = "std")]
    ("CachingAllocator", || Box::new(CachingAllocator::new())),
    // Debug checks on: every request through the locked, checked path.
    #[cfg(feature = "std")]
    ("CachingAllocator (debug checks)", || {
        Box::new(CachingAllocator::with_config(
            CachingConfig::default().debug_checks(true),
        ))
    }),
    (FIXED, || Box::new(OwnedFixed::new(FIXED_CAPACITY))),
];

/// The name of the `FixedAllocator` entry: it holds its whole buffer from
/// the start and never asks the system for memory, which two generic tests
/// allow for.
pub const FIXED: &str = "FixedAllocator";

/// The buffer the generic tests give `FixedAllocator`: enough for their
/// largest window (under Miri the tests ask for less).
pub const FIXED_CAPACITY: usize = if cfg!(miri) { 4 << 20 } else { 64 << 20 };

/// A `FixedAllocator` over a heap buffer it owns, so the generic tests can
/// box it as `dyn TempAllocator + 'static`.
pub struct OwnedFixed {
    temp: ManuallyDrop<FixedAllocator<'static>>,
    buf: NonNull<[MaybeUninit<u8>]>,
}

impl OwnedFixed {
    pub fn new(capacity: usize) -> Self {
        let buf = Box::<[u8]>::new_uninit_slice(capacity);
        let buf = NonNull::from(Box::leak(buf));
        // SAFETY: `buf` is the leaked box, valid and unaliased until `drop`
        // rebuilds the box, which happens after the allocator (its only
        // user) is dropped.
        let temp = FixedAllocator::new(unsafe { &mut *buf.as_ptr() });
        OwnedFixed {
            temp: ManuallyDrop::new(temp),
            buf,
        }
    }
}

// SAFETY: `buf` is only freed on drop (`&mut self`); through `&self` only the
// `FixedAllocator`, which is `Sync`, is used.
unsafe impl Sync for OwnedFixed {}

impl Drop for OwnedFixed {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, before the buffer it borrows.
        unsafe { ManuallyDrop::drop(&mut self.temp) };
        // SAFETY: `buf` came from `Box::leak` in `new` and its only borrower
        // is gone.
        drop(unsafe { Box::from_raw(self.buf.as_ptr()) });
    }
}

// SAFETY: forwards to `FixedAllocator`, whose buffer lives as long as `self`.
unsafe impl TempAllocator for OwnedFixed {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, Error> {
        self.temp.allocate(layout)
    }
    fn reset(&mut self) {
        self.temp.reset();
    }
    fn stats(&self) -> Stats {
        self.temp.stats()
    }
    unsafe fn resize_in_place(&self, ptr: NonNull<u8>, old: Layout, new_size: usize) -> bool {
        // SAFETY: the caller's contract, which is the inner allocator's.
        unsafe { self.temp.resize_in_place(ptr, old, new_size) }
    }
}

/// Runs `f` once per allocator under test, each time with a fresh allocator
/// and its name (for assertion messages).
pub fn for_each_allocator(mut f: impl FnMut(&str, &mut dyn TempAllocator)) {
    for (name, make) in ALLOCATORS {
        let mut temp = make();
        f(name, &mut *temp);
    }
}

/// The byte a buffer tagged `tag` holds at `index`: differs between tags at
/// almost every index, so an overlap between two live buffers shows up.
pub fn pattern(tag: usize, index: usize) -> u8 {
    let x = (tag as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (index as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 56) as u8 ^ (x >> 17) as u8
}

/// Under Miri, where every byte costs microseconds, patterns are written and
/// checked at every `STRIDE`th byte (and the first and last 16); the rest is
/// filled with one `write_bytes`. Elsewhere, at every byte.
const STRIDE: usize = if cfg!(miri) { 509 } else { 1 };

/// Where the pattern goes in a buffer of `len`: at every byte below `edge`
/// and from `tail` on, and at every `STRIDE`th byte in between (so, off
/// Miri, at every byte).
fn patterned(len: usize) -> (usize, usize) {
    let edge = if cfg!(miri) && len > 16 { 16 } else { len };
    let tail = if len - edge > edge { len - edge } else { edge };
    (edge, tail)
}

/// The patterned byte after `i`, in a buffer whose `patterned` bounds are
/// `(edge, tail)`. A plain loop over it, with plain comparisons, costs
/// Miri a fraction of what an iterator chain (or `min` and `max` calls)
/// does per byte.
fn next_patterned(i: usize, (edge, tail): (usize, usize)) -> usize {
    if i < edge || i >= tail {
        i + 1
    } else if i + STRIDE < tail {
        i + STRIDE
    } else {
        tail
    }
}

/// Writes the pattern for `tag` into `buf` and returns it initialised.
pub fn fill(buf: &mut [MaybeUninit<u8>], tag: usize) -> &mut [u8] {
    if STRIDE > 1 {
        // SAFETY: `buf` is valid for `buf.len()` writes of one byte.
        unsafe { buf.as_mut_ptr().write_bytes(0xA5, buf.len()) };
    }
    let bounds = patterned(buf.len());
    let mut i = 0;
    while i < buf.len() {
        buf[i].write(pattern(tag, i));
        i = next_patterned(i, bounds);
    }
    // SAFETY: every element was written just above, so all of `buf` is
    // initialised, and `MaybeUninit<u8>` has the layout of `u8`.
    unsafe { &mut *(buf as *mut [MaybeUninit<u8>] as *mut [u8]) }
}

/// Panics with a useful message unless `buf` still holds the pattern for `tag`.
pub fn check(buf: &[u8], tag: usize) {
    let bounds = patterned(buf.len());
    let mut i = 0;
    while i < buf.len() {
        if buf[i] != pattern(tag, i) {
            panic!("buffer {tag} ({} bytes) corrupted at byte {i}", buf.len());
        }
        i = next_patterned(i, bounds);
    }
}

/// The address of a slice's first element.
pub fn addr<T>(s: &[T]) -> usize {
    s.as_ptr() as usize
}

/// A small deterministic generator, so runs are repeatable.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Allocates a few patterned buffers, runs `bad` (a request that must fail)
/// against `temp`, checks the buffers, then serves one more request and
/// checks again: a failure leaves what was handed out intact and the
/// allocator serving. Returns what `bad` returned; `name` is for messages.
#[cfg(feature = "std")]
pub fn with_live_buffers<R>(
    name: &str,
    temp: &dyn TempAllocator,
    bad: impl FnOnce(&tempalloc::KernelContext) -> R,
) -> R {
    with_live_buffers_in(name, &tempalloc::KernelContext::new(temp), bad)
}

/// [`with_live_buffers`] in the context `ctx` (a kernel frame's, say).
#[cfg(feature = "std")]
pub fn with_live_buffers_in<R>(
    name: &str,
    ctx: &tempalloc::KernelContext,
    bad: impl FnOnce(&tempalloc::KernelContext) -> R,
) -> R {
    let temp = ctx.temp().unwrap();
    let sizes = if cfg!(miri) {
        [(10, 8), (300, 64), (5000, 4096)]
    } else {
        [(100, 8), (5000, 64), (70_000, 4096)]
    };
    let before: Vec<&mut [u8]> = sizes
        .iter()
        .enumerate()
        .map(|(tag, &(s, a))| fill(ctx.allocate_temp(s, a).unwrap(), tag))
        .collect();
    let served = temp.stats().allocations;
    let result = bad(ctx);
    for (tag, buf) in before.iter().enumerate() {
        check(buf, tag);
    }
    let after = fill(ctx.allocate_temp(256, 64).unwrap(), 99);
    check(after, 99);
    for (tag, buf) in before.iter().enumerate() {
        check(buf, tag);
    }
    assert!(temp.stats().allocations > served, "{name}: still serving");
    result
}

/// Checks that `temp` (never reset yet) refuses `other`'s checkpoint and one
/// that a reset made stale; the caller checks that nothing changed.
pub fn refuses_foreign_and_stale<A: Rewind>(temp: &mut A, other: &A) {
    assert_eq!(
        temp.rewind(other.checkpoint().unwrap()),
        Err(Error::ForeignCheckpoint)
    );
    let stale = temp.checkpoint().unwrap();
    temp.reset();
    assert_eq!(
        temp.rewind(stale),
        Err(Error::StaleCheckpoint {
            taken_at: 0,
            now: 1
        })
    );
}
