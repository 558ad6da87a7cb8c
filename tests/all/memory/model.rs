//! Model-based property tests: random programs of allocate, checkpoint,
//! rewind (good and stale), reset, release and `BlockCache::evict_idle` over two
//! `CachingAllocator`s sharing one `Arc<BlockCache>`, run against a simple
//! model (lists of live buffers and counters).
//!
//! After every step: every live buffer is aligned, disjoint from every other
//! live buffer (of either allocator) and still holds its pattern; `Stats`
//! agree with the model (allocations, bytes requested, resets, high water,
//! no canary violations); the system counters of the cache and of the two
//! allocators add up and agree with the bytes held; after a release or a
//! trim, idle bytes are within the budget. A failing program shrinks.

use std::alloc::Layout;
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm};
use tempalloc::{BlockCache, CachingAllocator, CachingConfig, Checkpoint, Error, TempAllocator};

/// Programs tried per run: modest, and tiny under Miri.
const CASES: u32 = if cfg!(miri) { 3 } else { 96 };
/// Steps per program, at most.
const MAX_STEPS: usize = if cfg!(miri) { 16 } else { 48 };
/// The largest request, and the line between small and large ones.
const MAX_SIZE: usize = if cfg!(miri) { 600 } else { 70_000 };
const MID_SIZE: usize = if cfg!(miri) { 200 } else { 2048 };

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        who: usize,
        size: usize,
        align_log: u32,
    },
    Checkpoint {
        who: usize,
    },
    Rewind {
        who: usize,
    },
    /// Rewinds to a checkpoint a reset made stale (if any).
    RewindStale {
        who: usize,
    },
    /// Rewinds `who` to the other allocator's newest checkpoint.
    RewindForeign {
        who: usize,
    },
    Reset {
        who: usize,
    },
    Release {
        who: usize,
    },
    Trim {
        target: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..2usize;
    let size = prop_oneof![
        2 => 0..=64usize,
        5 => 1..=MID_SIZE,
        2 => MID_SIZE..=MAX_SIZE,
    ];
    prop_oneof![
        12 => (who.clone(), size, 0..=13u32)
            .prop_map(|(who, size, align_log)| Op::Alloc { who, size, align_log }),
        2 => who.clone().prop_map(|who| Op::Checkpoint { who }),
        2 => who.clone().prop_map(|who| Op::Rewind { who }),
        1 => who.clone().prop_map(|who| Op::RewindStale { who }),
        1 => who.clone().prop_map(|who| Op::RewindForeign { who }),
        2 => who.clone().prop_map(|who| Op::Reset { who }),
        1 => who.prop_map(|who| Op::Release { who }),
        1 => prop_oneof![Just(0usize), Just(64 << 10), Just(1 << 20)]
            .prop_map(|target| Op::Trim { target }),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    debug_checks: bool,
    min_block_size: usize,
    dedicated_threshold: Option<usize>,
    /// The shared cache's idle budget.
    budget: usize,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        any::<bool>(),
        prop_oneof![Just(4096usize), Just(16 << 10), Just(64 << 10)],
        prop_oneof![Just(None), Just(Some(8192usize)), Just(Some(40_000))],
        prop_oneof![Just(0usize), Just(64 << 10), Just(1 << 20)],
    )
        .prop_map(
            |(debug_checks, min_block_size, dedicated_threshold, budget)| Setup {
                debug_checks,
                min_block_size,
                dedicated_threshold,
                budget,
            },
        )
}

/// A live buffer: where, how large, and the tag of its pattern.
#[derive(Debug)]
struct Buf {
    ptr: *mut u8,
    size: usize,
    align: usize,
    tag: u64,
}

/// The byte after `i` that carries the pattern, in a buffer of `size`: every
/// byte, except under Miri (every byte costs microseconds there), where the
/// first and last 16 and every 251st do; the rest still gets written.
/// Walked in a plain loop, which costs Miri a quarter of what an iterator
/// chain does per byte.
fn next_patterned(i: usize, size: usize) -> usize {
    let step = if cfg!(miri) { 251 } else { 1 };
    let edge = if cfg!(miri) { 16.min(size) } else { size };
    let tail = size.saturating_sub(edge).max(edge);
    if i < edge || i >= tail {
        i + 1
    } else {
        (i + step).min(tail)
    }
}

fn byte(tag: u64, i: usize) -> u8 {
    (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ i as u8 ^ (i >> 8) as u8
}

impl Buf {
    fn write(&self) {
        // SAFETY: the allocator handed out `size` bytes at `ptr`, live until
        // the reset or rewind that drops this `Buf` from the model.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size) };
        bytes.fill(0x5A);
        let mut i = 0;
        while i < self.size {
            bytes[i] = byte(self.tag, i);
            i = next_patterned(i, self.size);
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.ptr.addr() % self.align, 0, "misaligned {:?}", self);
        // SAFETY: as in `write`; the model still lists the buffer as live.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr, self.size) };
        let mut i = 0;
        while i < self.size {
            prop_assert!(
                bytes[i] == byte(self.tag, i),
                "buffer {:?} corrupted at byte {}",
                self,
                i
            );
            i = next_patterned(i, self.size);
        }
        Ok(())
    }
}

/// What one allocator should have done.
#[derive(Default)]
struct Model {
    live: Vec<Buf>,
    /// Checkpoints taken, with the number of live buffers at the time.
    checkpoints: Vec<(Checkpoint, usize)>,
    /// Checkpoints a reset made stale.
    stale: Vec<Checkpoint>,
    allocations: u64,
    bytes_requested: u64,
    resets: u64,
    high_water: usize,
}

impl Model {
    fn live_bytes(&self) -> usize {
        self.live.iter().map(|b| b.size).sum()
    }

    fn reset(&mut self) {
        self.high_water = self.high_water.max(self.live_bytes());
        self.live.clear();
        self.stale
            .extend(self.checkpoints.drain(..).map(|(c, _)| c));
        self.resets += 1;
    }
}

/// Runs `ops` and checks everything after every step.
fn run(setup: Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let cache = Arc::new(BlockCache::with_idle_budget(setup.budget));
    let config = CachingConfig::default()
        .debug_checks(setup.debug_checks)
        .min_block_size(setup.min_block_size)
        .dedicated_threshold(setup.dedicated_threshold);
    let mut temps = [
        CachingAllocator::with_cache(Arc::clone(&cache), config),
        CachingAllocator::with_cache(Arc::clone(&cache), config),
    ];
    let mut models = [Model::default(), Model::default()];
    // System frees `trim` caused: counted by the cache, not the allocators.
    let mut trim_frees = 0;
    let mut next_tag = 0;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Alloc {
                who,
                size,
                align_log,
            } => {
                let align = 1 << align_log;
                let layout = Layout::from_size_align(size, align).unwrap();
                let ptr = temps[who]
                    .allocate(layout)
                    .map_err(|e| TestCaseError::fail(format!("step {step}: {op:?} failed: {e}")))?;
                prop_assert!(ptr.len() >= size);
                let buf = Buf {
                    ptr: ptr.cast::<u8>().as_ptr(),
                    size,
                    align,
                    tag: next_tag,
                };
                next_tag += 1;
                buf.write();
                let m = &mut models[who];
                m.live.push(buf);
                m.allocations += 1;
                m.bytes_requested += size as u64;
            }
            Op::Checkpoint { who } => {
                let cp = temps[who].checkpoint().unwrap();
                let m = &mut models[who];
                m.checkpoints.push((cp, m.live.len()));
            }
            Op::Rewind { who } => {
                let m = &mut models[who];
                if let Some((cp, live)) = m.checkpoints.pop() {
                    m.high_water = m.high_water.max(m.live_bytes());
                    temps[who].rewind(cp).map_err(|e| {
                        TestCaseError::fail(format!("step {step}: {op:?} failed: {e}"))
                    })?;
                    m.live.truncate(live);
                }
            }
            Op::RewindStale { who } => {
                if let Some(cp) = models[who].stale.pop() {
                    let err = temps[who].rewind(cp).unwrap_err();
                    prop_assert!(
                        matches!(err, Error::StaleCheckpoint { .. }),
                        "step {}: {:?}",
                        step,
                        err
                    );
                }
            }
            Op::RewindForeign { who } => {
                if let Some((cp, _)) = models[1 - who].checkpoints.pop() {
                    let err = temps[who].rewind(cp).unwrap_err();
                    prop_assert!(
                        matches!(err, Error::ForeignCheckpoint),
                        "step {}: {:?}",
                        step,
                        err
                    );
                }
            }
            Op::Reset { who } => {
                temps[who].reset();
                models[who].reset();
            }
            Op::Release { who } => {
                temps[who].release();
                models[who].reset();
                prop_assert_eq!(temps[who].stats().bytes_held, 0, "step {}", step);
                prop_assert!(cache.idle_bytes() <= setup.budget, "step {}", step);
            }
            Op::Trim { target } => {
                let frees = cache.stats().system_frees;
                cache.evict_idle(target);
                trim_frees += cache.stats().system_frees - frees;
                prop_assert!(cache.idle_bytes() <= target, "step {}", step);
            }
        }
        check_all(&temps, &models, &cache, trim_frees)
            .map_err(|e| TestCaseError::fail(format!("after step {step} ({op:?}): {e}")))?;
    }
    let [a, b] = temps;
    drop((a, b));
    prop_assert!(cache.idle_bytes() <= setup.budget);
    prop_assert_eq!(cache.stats().bytes_held, cache.idle_bytes());
    cache.evict_idle(0);
    let s = cache.stats();
    prop_assert_eq!((s.bytes_held, s.idle_bytes), (0, 0));
    Ok(())
}

fn check_all(
    temps: &[CachingAllocator; 2],
    models: &[Model; 2],
    cache: &BlockCache,
    trim_frees: u64,
) -> Result<(), TestCaseError> {
    // Live buffers: aligned, intact, pairwise disjoint.
    let mut ranges = Vec::new();
    for m in models {
        for buf in &m.live {
            buf.check()?;
            if buf.size > 0 {
                ranges.push((buf.ptr.addr(), buf.size));
            }
        }
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {:?}", w);
    }
    // Counters.
    let mut held = 0;
    let (mut allocs, mut frees) = (0, 0);
    for (who, (temp, m)) in temps.iter().zip(models).enumerate() {
        let s = temp.stats();
        prop_assert_eq!(s.allocations, m.allocations, "allocator {}", who);
        prop_assert_eq!(s.bytes_requested, m.bytes_requested, "allocator {}", who);
        prop_assert_eq!(s.resets, m.resets, "allocator {}", who);
        let high_water = m.high_water.max(m.live_bytes());
        prop_assert_eq!(s.high_water, high_water, "allocator {}", who);
        prop_assert_eq!(s.canary_violations, 0, "allocator {}", who);
        prop_assert!(temp.check().is_ok());
        held += s.bytes_held;
        allocs += s.system_allocations;
        frees += s.system_frees;
    }
    let c = cache.stats();
    prop_assert_eq!(c.bytes_held, held + cache.idle_bytes(), "bytes held");
    prop_assert_eq!(c.system_allocations, allocs, "system allocations");
    prop_assert_eq!(c.system_frees, frees + trim_frees, "system frees");
    prop_assert_eq!(c.bytes_held % 4096, 0, "whole pages: {}", c);
    Ok(())
}

proptest! {
    #![proptest_config(Config {
        cases: CASES,
        // Regressions are committed as plain tests below, not as files
        // (which Miri's isolation could not read anyway).
        failure_persistence: None,
        max_shrink_iters: if cfg!(miri) { 0 } else { 4096 },
        // Under Miri a cheaper generator: ChaCha's rounds, interpreted, cost
        // more than the programs it draws.
        rng_algorithm: if cfg!(miri) { RngAlgorithm::XorShift } else { Config::default().rng_algorithm },
        ..Config::default()
    })]

    #[test]
    fn caching_allocators_agree_with_the_model(
        setup in setup(),
        ops in vec(op(), 1..MAX_STEPS),
    ) {
        run(setup, &ops)?;
    }
}

/// A fixed program that touches every operation, so the model's checks run
/// even with `PROPTEST_CASES=0`, and under Miri on a known program.
#[test]
fn a_fixed_program_agrees_with_the_model() {
    use Op::*;
    let ops = [
        Alloc {
            who: 0,
            size: 100,
            align_log: 6,
        },
        Checkpoint { who: 0 },
        Alloc {
            who: 0,
            size: 5000,
            align_log: 12,
        },
        Alloc {
            who: 1,
            size: 0,
            align_log: 13,
        },
        Checkpoint { who: 1 },
        Alloc {
            who: 1,
            size: 9000,
            align_log: 3,
        },
        RewindForeign { who: 0 },
        Rewind { who: 0 },
        Alloc {
            who: 0,
            size: 300,
            align_log: 0,
        },
        Reset { who: 1 },
        RewindStale { who: 1 },
        Release { who: 0 },
        Trim { target: 0 },
        Alloc {
            who: 1,
            size: 50_000,
            align_log: 7,
        },
    ];
    for debug_checks in [false, true] {
        let setup = Setup {
            debug_checks,
            min_block_size: 4096,
            dedicated_threshold: Some(40_000),
            budget: 64 << 10,
        };
        run(setup, &ops).unwrap();
    }
}
