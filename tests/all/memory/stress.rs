//! Concurrency stress: 2 to 20 threads make many requests of random sizes through one `CachingAllocator`,
//! writing a pattern into every buffer and checking it, with a reset between
//! rounds. Bounded in iterations (and by a deadline, so a slow machine ends
//! the round early instead of hanging; nothing asserts on time).
//!
//! Requests per thread per round, so the file takes a few seconds in a debug
//! `cargo test`, about a million requests per round in release, and stays
//! tiny under Miri:
//!
//! | build   | per thread, per round     | rounds |
//! |---------|---------------------------|--------|
//! | release | 1 000 000 / threads       | 3      |
//! | debug   | 6 000                     | 3      |
//! | Miri    | 12                        | 2      |

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tempalloc::{CachingAllocator, CachingConfig, KernelContext, TempAllocator};

use crate::util::Lcg;

/// Requests each of `threads` threads makes in one round.
fn per_thread(threads: usize) -> usize {
    if cfg!(miri) {
        12
    } else if cfg!(debug_assertions) {
        6_000
    } else {
        1_000_000 / threads
    }
}

const ROUNDS: usize = if cfg!(miri) { 2 } else { 3 };

/// A round stops early past this, whatever the machine.
const DEADLINE: Duration = Duration::from_secs(30);

/// Buffers checked when they leave this window of the most recent ones.
const RECENT: usize = 64;

/// Every this many requests, a buffer is kept to be checked at the round's end.
const SAMPLE: u64 = 97;

/// What one worker did: requests served and bytes asked.
#[derive(Default, Clone, Copy)]
struct Done {
    requests: u64,
    bytes: u64,
    max_size: usize,
}

/// A buffer and what it must hold: its id in the first bytes, then `fill`.
struct Buf<'a> {
    bytes: &'a mut [u8],
    id: u64,
}

impl<'a> Buf<'a> {
    fn new(bytes: &'a mut [u8], id: u64) -> Self {
        let head = bytes.len().min(8);
        bytes[..head].copy_from_slice(&id.to_le_bytes()[..head]);
        if cfg!(miri) {
            // A block at a time: a copy Miri does in one step, not a byte
            // loop it interprets.
            for block in bytes[head..].chunks_mut(64) {
                block.copy_from_slice(&[id as u8; 64][..block.len()]);
            }
        } else {
            bytes[head..].fill(id as u8);
        }
        Buf { bytes, id }
    }

    fn check(&self) {
        let head = self.bytes.len().min(8);
        assert_eq!(
            self.bytes[..head],
            self.id.to_le_bytes()[..head],
            "buffer {:#x}: id overwritten",
            self.id
        );
        // Under Miri a block at a time first: `==` on bytes is a `memcmp`,
        // which Miri does in one step, not a loop it interprets per byte.
        // Every byte is compared all the same.
        let byte = self.id as u8;
        if cfg!(miri)
            && self.bytes[head..]
                .chunks(64)
                .all(|c| c == &[byte; 64][..c.len()])
        {
            return;
        }
        if let Some(i) = self.bytes[head..].iter().position(|&b| b != byte) {
            panic!(
                "buffer {:#x} ({} bytes) corrupted at byte {}",
                self.id,
                self.bytes.len(),
                head + i
            );
        }
    }
}

/// A size: mostly small tiles, sometimes a large one.
fn size(rng: &mut Lcg) -> usize {
    match rng.below(256) {
        0 => 1 + rng.below(if cfg!(miri) { 512 } else { 16 << 10 }) as usize,
        1..=8 => 0,
        _ => 1 + rng.below(128) as usize,
    }
}

const ALIGNS: [usize; 6] = [1, 8, 16, 64, 128, 4096];

/// One worker's requests through `ctx`; checks every buffer, some of them
/// only at the end, after all the others were written.
fn worker(ctx: &KernelContext<'_>, thread: u64, n: usize, deadline: Instant) -> Done {
    let mut rng = Lcg(0x5eed ^ thread.wrapping_mul(0x9E37_79B9));
    let mut recent = VecDeque::with_capacity(RECENT);
    let mut kept = Vec::new();
    let mut done = Done::default();
    for i in 0..n as u64 {
        if i % 1024 == 0 && Instant::now() > deadline {
            break;
        }
        let (size, align) = (size(&mut rng), ALIGNS[rng.below(6) as usize]);
        let id = thread << 40 | i;
        let raw = if rng.below(4) == 0 {
            // Typed scratch (zeroed) through the same context.
            let words = ctx.scratch::<u64>(size.div_ceil(8)).unwrap();
            assert!(words.iter().all(|&w| w == 0), "scratch not zeroed");
            assert_eq!(words.as_ptr() as usize % align_of::<u64>(), 0);
            bytemuck::cast_slice_mut::<u64, u8>(words)
        } else {
            let buf = ctx.allocate_temp(size, align).unwrap();
            assert_eq!(buf.as_ptr() as usize % align, 0, "misaligned");
            crate::util::fill(buf, 0)
        };
        done.requests += 1;
        done.bytes += raw.len() as u64;
        done.max_size = done.max_size.max(raw.len());
        let buf = Buf::new(raw, id);
        buf.check();
        if i % SAMPLE == 0 {
            kept.push(buf);
        } else {
            if recent.len() == RECENT {
                let old: Buf = recent.pop_front().unwrap();
                old.check();
            }
            recent.push_back(buf);
        }
    }
    recent.iter().chain(&kept).for_each(Buf::check);
    done
}

/// Runs `threads` workers for `ROUNDS` rounds over `temp`, each through a
/// context of its own, and checks the counters after every round.
fn stress(temp: &mut CachingAllocator, threads: usize) -> Done {
    let mut total = Done::default();
    for round in 0..ROUNDS {
        let before = temp.stats();
        let deadline = Instant::now() + DEADLINE;
        let n = per_thread(threads);
        let shared = &*temp;
        let done: Vec<Done> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads as u64)
                .map(|t| s.spawn(move || worker(&KernelContext::new(shared), t + 1, n, deadline)))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let requests: u64 = done.iter().map(|d| d.requests).sum();
        let bytes: u64 = done.iter().map(|d| d.bytes).sum();
        let after = temp.stats();
        assert_eq!(
            after.allocations - before.allocations,
            requests,
            "round {round}"
        );
        assert_eq!(
            after.bytes_requested - before.bytes_requested,
            bytes,
            "round {round}"
        );
        assert!(after.high_water >= bytes as usize, "round {round}");
        assert_eq!(after.canary_violations, 0, "round {round}");
        temp.check().unwrap();
        temp.reset();
        assert_eq!(temp.stats().resets, before.resets + 1);
        total.requests += requests;
        total.bytes += bytes;
    }
    total
}

fn configs() -> [(&'static str, CachingConfig); 3] {
    let base = CachingConfig::default().min_block_size(16 << 10);
    [
        ("checks off", base.debug_checks(false)),
        ("checks on", base.debug_checks(true)),
        (
            "dedicated",
            base.debug_checks(false).dedicated_threshold(Some(4 << 10)),
        ),
    ]
}

#[test]
fn threads_share_one_caching_allocator() {
    // Two threads under Miri: requests racing through one allocator, as
    // `twenty_fresh_threads_every_round` has three.
    let counts: &[usize] = if cfg!(miri) { &[2] } else { &[2, 3, 8] };
    for (name, config) in configs() {
        for &threads in counts {
            let mut temp = CachingAllocator::with_config(config);
            let done = stress(&mut temp, threads);
            assert!(done.requests > 0, "{name}, {threads} threads");
            temp.release();
            let s = temp.stats();
            assert_eq!(s.bytes_held, 0, "{name}, {threads} threads: {s}");
            assert!(s.system_frees > 0, "{name}: {s}");
        }
    }
}

#[test]
fn twenty_fresh_threads_every_round() {
    // New threads every round: some get the thread ids (and regions) of the
    // last round's, the others take over the regions those left parked.
    let threads = if cfg!(miri) { 3 } else { 20 };
    let mut temp = CachingAllocator::with_config(CachingConfig::default().debug_checks(false));
    for round in 0..ROUNDS {
        let n = per_thread(threads).min(2_000);
        let before = temp.stats().allocations;
        let shared = &temp;
        let done: u64 = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads as u64)
                .map(|t| {
                    s.spawn(move || {
                        let ctx = KernelContext::new(shared);
                        worker(&ctx, t + 100, n, Instant::now() + DEADLINE).requests
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        assert_eq!(temp.stats().allocations - before, done, "round {round}");
        temp.reset();
    }
}

#[test]
fn worker_threads_share_one_sync_kernel_context() {
    for (name, config) in configs() {
        let threads = if cfg!(miri) { 2 } else { 4 };
        let mut temp = CachingAllocator::with_config(config);
        for round in 0..ROUNDS {
            let before = temp.stats().allocations;
            let n = per_thread(threads);
            let ctx = KernelContext::new(&temp);
            let done: u64 = std::thread::scope(|s| {
                let ctx = &ctx;
                let workers: Vec<_> = (0..threads as u64)
                    .map(|t| s.spawn(move || worker(ctx, t + 1, n, Instant::now() + DEADLINE)))
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().unwrap().requests)
                    .sum()
            });
            assert_eq!(ctx.failure(), None);
            assert_eq!(
                temp.stats().allocations - before,
                done,
                "{name}, round {round}"
            );
            temp.reset();
        }
    }
}
