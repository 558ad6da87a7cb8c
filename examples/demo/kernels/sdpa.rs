//! Causal multi-head attention, flash style: queries and keys are split into
//! tiles, and each (head, query tile) pair streams over key tiles with an
//! online softmax, so scratch grows with the tile sizes rather than with
//! `q_len * kv_len`. Work is split across scoped worker threads; each worker
//! owns one tile of scratch.

use std::ops::Range;

use tempalloc::{Error, KernelContext};

use super::report;

/// The sizes of one attention call. Queries are the last `q_len` of the
/// `kv_len` positions (a prefill has `q_len == kv_len`, a decode step 1), and
/// query `i` sees keys `0..=kv_len - q_len + i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub heads: usize,
    pub head_dim: usize,
    pub q_len: usize,
    pub kv_len: usize,
}

impl AttentionShape {
    /// Floats in one row of `q`, `k`, `v` or the output: all heads side by side.
    pub fn row_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Where causal attention starts masking: the position of query 0.
    fn first_query_position(&self) -> usize {
        self.kv_len - self.q_len
    }
}

/// How the kernel cuts the work: tile sizes and worker threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpaPlan {
    pub q_tile: usize,
    pub kv_tile: usize,
    /// Threads at most, the calling thread included.
    pub workers: usize,
}

/// Floats per 64-byte cache line: each worker's tile starts on its own line
/// (relative to the buffer) so workers do not write to a shared line.
const FLOATS_PER_LINE: usize = 16;

/// `out = softmax(q k^T / sqrt(head_dim) + causal mask) v`, per head.
/// `q` and `out` are `q_len` rows, `k` and `v` are `kv_len` rows, each row
/// `heads * head_dim` floats (head-major within the row).
///
/// Scratch: every worker's tile (scores, running max and sum, accumulator),
/// taken on the calling thread because `KernelContext` is not `Sync`, and a
/// head-major staging copy of the output so each worker writes one
/// contiguous range.
pub fn sdpa(
    ctx: &KernelContext,
    shape: AttentionShape,
    plan: SdpaPlan,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) {
    let result = sdpa_in(ctx, shape, plan, q, k, v, out);
    report(ctx, result);
}

fn sdpa_in(
    ctx: &KernelContext,
    shape: AttentionShape,
    plan: SdpaPlan,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) -> Result<(), Error> {
    let width = shape.row_width();
    debug_assert!(shape.q_len >= 1 && shape.q_len <= shape.kv_len, "{shape:?}");
    debug_assert_eq!(
        (q.len(), out.len()),
        (shape.q_len * width, shape.q_len * width)
    );
    debug_assert_eq!(
        (k.len(), v.len()),
        (shape.kv_len * width, shape.kv_len * width)
    );

    if shape.q_len == 0 || shape.heads == 0 || shape.head_dim == 0 {
        return Ok(()); // no output; also keeps the chunk sizes below non-zero
    }
    let tile = Tile::new(shape, plan);
    let items = shape.heads * tile.q_tiles;
    let workers = plan.workers.min(items).max(1);
    let tiles = ctx.scratch::<f32>(workers * tile.floats)?;
    let staged = ctx.scratch::<f32>(shape.heads * shape.q_len * shape.head_dim)?;
    let inputs = Inputs { shape, q, k, v };

    std::thread::scope(|scope| {
        let mut rest = &mut staged[..];
        let mut first = 0;
        for (w, scratch) in tiles.chunks_mut(tile.floats).enumerate() {
            // Contiguous shares of the (head, query tile) items, in the order
            // the staged output stores them, so each share is one slice.
            let end = items * (w + 1) / workers;
            let (mine, tail) = rest.split_at_mut(tile.offset(end) - tile.offset(first));
            rest = tail;
            let job = Job {
                items: first..end,
                out: mine,
                scratch,
            };
            first = end;
            if w + 1 == workers {
                // The calling thread takes the last share instead of idling.
                job.run(&inputs, &tile);
            } else {
                let (inputs, tile) = (&inputs, &tile);
                scope.spawn(move || job.run(inputs, tile));
            }
        }
    });

    // Back from head-major `[head][row][dim]` to the caller's `[row][head][dim]`.
    for (h, head) in staged
        .chunks_exact(shape.q_len * shape.head_dim)
        .enumerate()
    {
        for (row, src) in head.chunks_exact(shape.head_dim).enumerate() {
            out[row * width + h * shape.head_dim..][..shape.head_dim].copy_from_slice(src);
        }
    }
    Ok(())
}

/// The read-only operands, shared by every worker.
struct Inputs<'a> {
    shape: AttentionShape,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
}

impl Inputs<'_> {
    fn row<'s>(&self, m: &'s [f32], position: usize, head: usize) -> &'s [f32] {
        &m[position * self.shape.row_width() + head * self.shape.head_dim..][..self.shape.head_dim]
    }
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

    /// Where item `item` starts in the head-major staged output; `offset(items)` is its end.
    fn offset(&self, item: usize) -> usize {
        let (head, t) = (item / self.q_tiles, item % self.q_tiles);
        (head * self.shape.q_len + t * self.q) * self.shape.head_dim
    }
}

/// One worker's share: consecutive work items, their output and its scratch.
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
        let mut out = self.out;
        for item in self.items {
            let (head, rows) = tile.item(item);
            let (item_out, tail) = out.split_at_mut(rows.len() * dim);
            out = tail;
            let n = rows.len();
            let state = Online {
                scores: &mut scores[..n * tile.kv],
                max: &mut max[..n],
                sum: &mut sum[..n],
                acc: &mut acc[..n * dim],
            };
            state.attend(inputs, tile, head, rows, item_out);
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
                let q_row = inputs.row(inputs.q, position, head);
                let scores = &mut self.scores[i * tile.kv..][..end - kv_start];
                let mut tile_max = f32::NEG_INFINITY;
                for (s, key) in scores.iter_mut().zip(kv_start..end) {
                    *s = dot(q_row, inputs.row(inputs.k, key, head)) * scale;
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
                    for (a, &x) in acc.iter_mut().zip(inputs.row(inputs.v, key, head)) {
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
    use tempalloc::{Error, KernelContext, MallocAllocator};

    use super::*;
    use crate::reference;
    use crate::rng::Rng;

    /// Small tiles, so short sequences already cross several tile edges.
    const PLAN: SdpaPlan = SdpaPlan {
        q_tile: 4,
        kv_tile: 8,
        workers: 3,
    };

    fn check(q_len: usize, kv_len: usize, plan: SdpaPlan) {
        let shape = AttentionShape {
            heads: 2,
            head_dim: 8,
            q_len,
            kv_len,
        };
        let mut rng = Rng::new((q_len * 1000 + kv_len) as u64);
        let width = shape.row_width();
        let (q, k, v) = (
            rng.vec(q_len * width, 1.0),
            rng.vec(kv_len * width, 1.0),
            rng.vec(kv_len * width, 1.0),
        );
        let temp = MallocAllocator::new();
        let ctx = KernelContext::new(&temp);
        let mut out = vec![f32::NAN; q_len * width];
        sdpa(&ctx, shape, plan, &q, &k, &v, &mut out);
        assert_eq!(ctx.failure(), None);
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
    fn without_temp_records_the_failure_and_does_not_panic() {
        let shape = AttentionShape {
            heads: 2,
            head_dim: 8,
            q_len: 3,
            kv_len: 5,
        };
        let width = shape.row_width();
        let ctx = KernelContext::without_temp();
        let mut out = vec![0.0; 3 * width];
        let (q, kv) = (vec![0.5; 3 * width], vec![0.5; 5 * width]);
        sdpa(&ctx, shape, PLAN, &q, &kv, &kv, &mut out);
        assert_eq!(ctx.failure(), Some(Error::NoTempAllocator));
        assert!(
            out.iter().all(|&o| o == 0.0),
            "a failed kernel must leave its output alone"
        );
    }
}
