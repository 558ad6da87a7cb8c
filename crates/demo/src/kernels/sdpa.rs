//! Causal multi-head attention, flash style: queries and keys are split into
//! tiles, and each (head, query tile) pair streams over key tiles with an
//! online softmax, so scratch grows with the tile sizes rather than with
//! `q_len * kv_len`. Work is split in shares across the threads of a
//! persistent rayon pool; each share owns one tile of scratch.

use std::ops::Range;

use rayon::ThreadPool;
use rayon::prelude::*;
use tempalloc::{Error, KernelContext};

/// The sizes of one attention call. Queries are the last `q_len` of the
/// `kv_len` positions (a prefill has `q_len == kv_len`, a decode step 1), and
/// query `i` sees keys `0..=kv_len - q_len + i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads / kv_heads` query
    /// heads share one; `kv_heads` divides `heads`).
    pub kv_heads: usize,
    pub head_dim: usize,
    pub q_len: usize,
    pub kv_len: usize,
}

impl AttentionShape {
    /// Floats in one row of `q` or the output: all query heads side by side.
    pub fn row_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Floats in one row of `k` or `v`: all key/value heads side by side.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The key/value head query head `head` reads.
    fn kv_head(&self, head: usize) -> usize {
        head / (self.heads / self.kv_heads.max(1)).max(1)
    }

    /// Where causal attention starts masking: the position of query 0.
    fn first_query_position(&self) -> usize {
        self.kv_len - self.q_len
    }
}

/// How the kernel cuts the work: tile sizes and shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpaPlan {
    pub q_tile: usize,
    pub kv_tile: usize,
    /// Shares of work at most, one scratch tile each: the pool's thread
    /// count (the calling thread included) keeps every thread busy.
    pub workers: usize,
}

/// Floats per 64-byte cache line: each share's tile starts on its own line
/// (relative to the buffer) so workers do not write to a shared line.
const FLOATS_PER_LINE: usize = 16;

/// `out = softmax(q k^T / sqrt(head_dim) + causal mask) v`, per head, on
/// `pool`'s threads. `q` and `out` are `q_len` rows, `k` and `v` are `kv_len`
/// rows, each row `heads * head_dim` floats (head-major within the row).
///
/// Scratch: every share's tile (scores, running max and sum, accumulator),
/// taken once on the calling thread and split between the shares, and a
/// head-major staging copy of the output so each share writes one
/// contiguous range. Called from a thread of `pool` (the demo's runtime
/// thread is one, see `runtime::worker_pool`), a call makes no system
/// allocation of its own: the pool's threads exist already and rayon's
/// `par_chunks_mut` splits with `join`, whose jobs live on the stack.
pub fn sdpa(
    ctx: &KernelContext,
    pool: &ThreadPool,
    plan: SdpaPlan,
    inputs: Inputs,
    out: &mut [f32],
) -> Result<(), Error> {
    let shape = inputs.shape;
    let width = shape.row_width();
    debug_assert!(shape.q_len >= 1 && shape.q_len <= shape.kv_len, "{shape:?}");
    debug_assert_eq!(
        (inputs.q.len(), out.len()),
        (shape.q_len * width, shape.q_len * width)
    );
    debug_assert_eq!(
        (inputs.k.len(), inputs.v.len()),
        (
            shape.kv_len * shape.kv_width(),
            shape.kv_len * shape.kv_width()
        )
    );

    if shape.q_len == 0 || shape.heads == 0 || shape.head_dim == 0 {
        return Ok(()); // no output; also keeps the chunk sizes below non-zero
    }
    let tile = Tile::new(shape, plan);
    let items = shape.heads * tile.q_tiles;
    // Each share is `per_share` consecutive (head, query tile) items, in the
    // order the staged output stores them (the last share may be shorter).
    let per_share = items.div_ceil(plan.workers.max(1));
    let shares = items.div_ceil(per_share);
    let tiles = ctx.scratch::<f32>(shares * tile.floats)?;
    // `[head][query tile][row][dim]`: a whole tile of rows per item (a head's
    // last tile padded when `q_len` is not a multiple of it), so every share's
    // output is one `chunks_mut` chunk like its scratch.
    let staged = ctx.scratch::<f32>(items * tile.out_floats())?;

    pool.install(|| {
        staged
            .par_chunks_mut(per_share * tile.out_floats())
            .zip(tiles.par_chunks_mut(tile.floats))
            .enumerate()
            .for_each(|(share, (out, scratch))| {
                let first = share * per_share;
                let job = Job {
                    items: first..(first + per_share).min(items),
                    out,
                    scratch,
                };
                job.run(&inputs, &tile);
            });
    });

    // Back from head-major staging to the caller's `[row][head][dim]`.
    let dim = shape.head_dim;
    for (h, head) in staged
        .chunks_exact(tile.q_tiles * tile.out_floats())
        .enumerate()
    {
        for (row, src) in head.chunks_exact(dim).take(shape.q_len).enumerate() {
            out[row * width + h * dim..][..dim].copy_from_slice(src);
        }
    }
    Ok(())
}

/// The operands of one call, read-only and shared by every worker.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub shape: AttentionShape,
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
}

impl Inputs<'_> {
    fn q_row(&self, position: usize, head: usize) -> &[f32] {
        let s = self.shape;
        &self.q[position * s.row_width() + head * s.head_dim..][..s.head_dim]
    }

    /// Row `position` of `m` (`k` or `v`) for query head `head`.
    fn kv_row<'s>(&self, m: &'s [f32], position: usize, head: usize) -> &'s [f32] {
        let s = self.shape;
        &m[position * s.kv_width() + s.kv_head(head) * s.head_dim..][..s.head_dim]
    }
}

/// One layer's int8 key or value cache: per position, `kv_heads` rows of
/// `head_dim` codes, one `f32` scale per (position, head).
#[derive(Debug, Clone, Copy)]
pub struct QuantRows<'a> {
    pub codes: &'a [i8],
    pub scales: &'a [f32],
}

/// The operands of [`sdpa_int8`]: `q` in `f32`, keys and values int8.
#[derive(Debug, Clone, Copy)]
pub struct CacheInputs<'a> {
    pub shape: AttentionShape,
    pub q: &'a [f32],
    pub k: QuantRows<'a>,
    pub v: QuantRows<'a>,
}

/// Attention over an int8 KV cache, as ExecuTorch's quantized SDPA does it:
/// the visible keys and values are dequantized into scratch first, so this
/// kernel's scratch grows with the KV length (`2 * kv_len * kv_width` floats,
/// 4 MiB at 1024 positions of Llama-3.2-1B), on top of [`sdpa`]'s tiles.
pub fn sdpa_int8(
    ctx: &KernelContext,
    pool: &ThreadPool,
    plan: SdpaPlan,
    inputs: CacheInputs,
    out: &mut [f32],
) -> Result<(), Error> {
    let shape = inputs.shape;
    let n = shape.kv_len * shape.kv_width();
    let k = ctx.scratch::<f32>(n)?;
    let v = ctx.scratch::<f32>(n)?;
    pool.install(|| {
        dequantize(inputs.k, shape.head_dim, k);
        dequantize(inputs.v, shape.head_dim, v);
    });
    let inputs = Inputs {
        shape,
        q: inputs.q,
        k,
        v,
    };
    sdpa(ctx, pool, plan, inputs, out)
}

/// `out = codes * scale`, one scale per `dim` codes, in parallel blocks.
fn dequantize(rows: QuantRows, dim: usize, out: &mut [f32]) {
    const ROWS_PER_JOB: usize = 256;
    out.par_chunks_mut(dim * ROWS_PER_JOB)
        .zip(rows.codes.par_chunks(dim * ROWS_PER_JOB))
        .zip(rows.scales.par_chunks(ROWS_PER_JOB))
        .for_each(|((out, codes), scales)| {
            for ((o, c), &s) in out
                .chunks_exact_mut(dim)
                .zip(codes.chunks_exact(dim))
                .zip(scales)
            {
                for (o, &c) in o.iter_mut().zip(c) {
                    *o = f32::from(c) * s;
                }
            }
        });
}

/// The tile geometry of one call.
struct Tile {
    shape: AttentionShape,
    /// Query rows per tile (at most `q_len`).
    q: usize,
    /// Key rows per tile (at most `kv_len`).
    kv: usize,
    q_tiles: usize,
    /// Floats of scratch per worker, rounded up to whole cache lines.
    floats: usize,
}

impl Tile {
    fn new(shape: AttentionShape, plan: SdpaPlan) -> Self {
        let q = plan.q_tile.min(shape.q_len).max(1);
        let kv = plan.kv_tile.min(shape.kv_len).max(1);
        let floats = q * kv + 2 * q + q * shape.head_dim;
        Tile {
            shape,
            q,
            kv,
            q_tiles: shape.q_len.div_ceil(q),
            floats: floats.next_multiple_of(FLOATS_PER_LINE),
        }
    }

    /// Head and query rows of work item `item`.
    fn item(&self, item: usize) -> (usize, Range<usize>) {
        let (head, t) = (item / self.q_tiles, item % self.q_tiles);
        (head, t * self.q..((t + 1) * self.q).min(self.shape.q_len))
    }

    /// Floats of staged output per item: a whole query tile of rows.
    fn out_floats(&self) -> usize {
        self.q * self.shape.head_dim
    }
}

/// One share: consecutive work items, their staged output (one query tile of
/// rows per item) and its scratch.
struct Job<'a> {
    items: Range<usize>,
    out: &'a mut [f32],
    scratch: &'a mut [f32],
}

impl Job<'_> {
    fn run(self, inputs: &Inputs, tile: &Tile) {
        let dim = tile.shape.head_dim;
        let (scores, rest) = self.scratch.split_at_mut(tile.q * tile.kv);
        let (max, rest) = rest.split_at_mut(tile.q);
        let (sum, rest) = rest.split_at_mut(tile.q);
        let acc = &mut rest[..tile.q * dim];
        for (item, out) in self.items.zip(self.out.chunks_mut(tile.out_floats())) {
            let (head, rows) = tile.item(item);
            let n = rows.len();
            let state = Online {
                scores: &mut scores[..n * tile.kv],
                max: &mut max[..n],
                sum: &mut sum[..n],
                acc: &mut acc[..n * dim],
            };
            state.attend(inputs, tile, head, rows, &mut out[..n * dim]);
        }
    }
}

/// The online-softmax state of one query tile (Milakov & Gimelshein 2018):
/// a running max and sum per row let key tiles be folded in one at a time.
struct Online<'a> {
    scores: &'a mut [f32],
    max: &'a mut [f32],
    sum: &'a mut [f32],
    acc: &'a mut [f32],
}

impl Online<'_> {
    fn attend(
        self,
        inputs: &Inputs,
        tile: &Tile,
        head: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        let shape = inputs.shape;
        let dim = shape.head_dim;
        let scale = 1.0 / (dim as f32).sqrt();
        self.max.fill(f32::NEG_INFINITY);
        self.sum.fill(0.0);
        self.acc.fill(0.0);
        // Keys a row of this tile may see end at the last row's position.
        let visible = shape.first_query_position() + rows.end;
        for kv_start in (0..visible).step_by(tile.kv) {
            let kv_end = (kv_start + tile.kv).min(visible);
            for (i, position) in rows.clone().enumerate() {
                // Row `i` sees keys up to its own position (causal mask).
                let end = kv_end.min(shape.first_query_position() + position + 1);
                if end <= kv_start {
                    continue;
                }
                let q_row = inputs.q_row(position, head);
                let scores = &mut self.scores[i * tile.kv..][..end - kv_start];
                let mut tile_max = f32::NEG_INFINITY;
                for (s, key) in scores.iter_mut().zip(kv_start..end) {
                    *s = dot(q_row, inputs.kv_row(inputs.k, key, head)) * scale;
                    tile_max = tile_max.max(*s);
                }
                let new_max = self.max[i].max(tile_max);
                // Rescale what was summed under the old max (exp(-inf) = 0 on the first tile).
                let correction = (self.max[i] - new_max).exp();
                self.max[i] = new_max;
                let acc = &mut self.acc[i * dim..][..dim];
                acc.iter_mut().for_each(|a| *a *= correction);
                let mut sum = self.sum[i] * correction;
                for (&s, key) in scores.iter().zip(kv_start..end) {
                    let p = (s - new_max).exp();
                    sum += p;
                    for (a, &x) in acc.iter_mut().zip(inputs.kv_row(inputs.v, key, head)) {
                        *a += p * x;
                    }
                }
                self.sum[i] = sum;
            }
        }
        // Every row saw at least key 0, so every sum is positive.
        for ((o, acc), &sum) in out
            .chunks_exact_mut(dim)
            .zip(self.acc.chunks_exact(dim))
            .zip(self.sum.iter())
        {
            for (o, &a) in o.iter_mut().zip(acc) {
                *o = a / sum;
            }
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use rayon::ThreadPoolBuilder;
    use tempalloc::{CachingAllocator, Error, KernelContext, MallocAllocator};

    use super::*;
    use crate::counting::{watch_this_thread, watched_allocations};
    use crate::reference;
    use crate::rng::Rng;
    use crate::runtime::worker_pool;

    /// Small tiles, so short sequences already cross several tile edges.
    const PLAN: SdpaPlan = SdpaPlan {
        q_tile: 4,
        kv_tile: 8,
        workers: 3,
    };

    /// Random operands for 2 heads of 8.
    fn operands(q_len: usize, kv_len: usize) -> (AttentionShape, [Vec<f32>; 3]) {
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            q_len,
            kv_len,
        };
        let mut rng = Rng::new((q_len * 1000 + kv_len) as u64);
        let (width, kv_width) = (shape.row_width(), shape.kv_width());
        let qkv = [
            rng.vec(q_len * width, 1.0),
            rng.vec(kv_len * kv_width, 1.0),
            rng.vec(kv_len * kv_width, 1.0),
        ];
        (shape, qkv)
    }

    /// A pool the test thread is not part of: `install` sends the work to it.
    fn pool(threads: usize) -> ThreadPool {
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("threads start")
    }

    fn check(q_len: usize, kv_len: usize, plan: SdpaPlan) {
        let (shape, [q, k, v]) = operands(q_len, kv_len);
        let temp = MallocAllocator::new();
        let ctx = KernelContext::new(&temp);
        let mut out = vec![f32::NAN; q_len * shape.row_width()];
        let inputs = Inputs {
            shape,
            q: &q,
            k: &k,
            v: &v,
        };
        assert_eq!(
            sdpa(&ctx, &pool(plan.workers), plan, inputs, &mut out),
            Ok(())
        );
        let expected = reference::sdpa(shape, &q, &k, &v);
        let diff = reference::max_abs_diff(&out, &expected);
        assert!(
            diff < 1e-5,
            "q_len {q_len}, kv_len {kv_len}, {plan:?}: off by {diff}"
        );
    }

    #[test]
    fn matches_naive_softmax_attention() {
        // Prefills and decodes; lengths on, below and above tile multiples.
        for (q_len, kv_len) in [
            (1, 1),
            (1, 7),
            (1, 8),
            (1, 9),
            (1, 30),
            (5, 5),
            (4, 16),
            (7, 20),
            (13, 13),
            (17, 33),
        ] {
            check(q_len, kv_len, PLAN);
        }
    }

    #[test]
    fn any_tiling_and_worker_count_gives_the_same_answer() {
        for plan in [
            SdpaPlan {
                q_tile: 1,
                kv_tile: 1,
                workers: 1,
            },
            SdpaPlan {
                q_tile: 3,
                kv_tile: 5,
                workers: 2,
            },
            SdpaPlan {
                q_tile: 64,
                kv_tile: 64,
                workers: 8,
            },
        ] {
            check(11, 19, plan);
        }
    }

    #[test]
    fn without_temp_returns_the_failure_and_does_not_panic() {
        let shape = AttentionShape {
            heads: 2,
            kv_heads: 2,
            head_dim: 8,
            q_len: 3,
            kv_len: 5,
        };
        let width = shape.row_width();
        let ctx = KernelContext::without_temp();
        let mut out = vec![0.0; 3 * width];
        let (q, kv) = (vec![0.5; 3 * width], vec![0.5; 5 * width]);
        let inputs = Inputs {
            shape,
            q: &q,
            k: &kv,
            v: &kv,
        };
        let result = sdpa(&ctx, &pool(2), PLAN, inputs, &mut out);
        assert_eq!(result, Err(Error::NoTempAllocator));
        assert!(
            out.iter().all(|&o| o == 0.0),
            "a failed kernel must leave its output alone"
        );
    }

    #[test]
    fn a_second_frame_with_a_warm_caching_allocator_makes_no_system_allocation() {
        // A thread of its own: `worker_pool` makes its caller thread 0 of the
        // pool, and a thread can join only one pool.
        std::thread::spawn(|| {
            let plan = SdpaPlan { workers: 2, ..PLAN };
            let pool = worker_pool(plan.workers).expect("threads start");
            // Count this thread and the pool's other thread, whatever they allocate.
            pool.broadcast(|_| watch_this_thread());
            let (shape, [q, k, v]) = operands(13, 29);
            let inputs = Inputs {
                shape,
                q: &q,
                k: &k,
                v: &v,
            };
            let expected = reference::sdpa(shape, &q, &k, &v);
            let mut temp = CachingAllocator::new();
            // As the demo runs a step: the output from the step's frame, the
            // kernel in a kernel frame.
            let mut step = || {
                temp.frame(|inf| {
                    let out = inf.scratch::<f32>(q.len())?;
                    inf.kernel(|ctx| sdpa(ctx, &pool, plan, inputs, out))?;
                    Ok::<_, Error>(reference::max_abs_diff(out, &expected))
                })
            };
            assert!(step().is_ok(), "warm-up");
            let before = watched_allocations();
            let diff = step().expect("scratch");
            assert_eq!(watched_allocations() - before, 0);
            assert!(diff < 1e-5, "off by {diff}");
        })
        .join()
        .expect("the test thread passes");
    }
}
