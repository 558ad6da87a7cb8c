//! Naive references the kernels are checked against: the textbook formula,
//! written for clarity, not speed. The attention one also runs in the demo
//! itself, on the first step.

use crate::kernels::sdpa::AttentionShape;

/// `softmax(q k^T / sqrt(d) + causal mask) v` per head, one full softmax row
/// at a time. Same layouts as [`crate::kernels::sdpa::sdpa`].
pub fn sdpa(shape: AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let (width, dim) = (shape.row_width(), shape.head_dim);
    let row = |m: &[f32], position: usize, head: usize| -> Vec<f32> {
        m[position * width + head * dim..][..dim].to_vec()
    };
    let group = shape.heads / shape.kv_heads;
    let kv_row = |m: &[f32], position: usize, head: usize| -> Vec<f32> {
        m[position * shape.kv_width() + head / group * dim..][..dim].to_vec()
    };
    let mut out = vec![0.0; shape.q_len * width];
    for head in 0..shape.heads {
        for i in 0..shape.q_len {
            let visible = shape.kv_len - shape.q_len + i + 1;
            let qi = row(q, i, head);
            let scores: Vec<f32> = (0..visible)
                .map(|j| {
                    kv_row(k, j, head)
                        .iter()
                        .zip(&qi)
                        .map(|(a, b)| a * b)
                        .sum::<f32>()
                        / (dim as f32).sqrt()
                })
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = weights.iter().sum();
            for (j, w) in weights.iter().enumerate() {
                for (o, x) in out[i * width + head * dim..][..dim]
                    .iter_mut()
                    .zip(kv_row(v, j, head))
                {
                    *o += w / total * x;
                }
            }
        }
    }
    out
}

/// The largest difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// `x * w^T` in `f32`, `x` and `w` with rows `k` wide.
#[cfg(test)]
pub fn matmul_transposed(x: &[f32], w: &[f32], k: usize) -> Vec<f32> {
    x.chunks(k)
        .flat_map(|xr| {
            w.chunks(k)
                .map(move |wr| xr.iter().zip(wr).map(|(a, b)| a * b).sum())
        })
        .collect()
}

/// The `k` largest logits as (index, value) by sorting everything: value
/// descending, then index ascending; NaN dropped.
#[cfg(test)]
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut all: Vec<(u32, f32)> = (0u32..)
        .zip(logits.iter().copied())
        .filter(|(_, v)| !v.is_nan())
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}
