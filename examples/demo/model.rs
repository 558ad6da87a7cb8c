//! The model: a tiny decoder-only transformer (pre-norm, int8 linear layers,
//! causal multi-head attention, SiLU MLP) with random weights from a fixed
//! seed. The weights mean nothing; the shapes, the kernel calls and the
//! scratch they ask for are those of a real LLM decode loop, scaled down.
//!
//! Weights, the KV cache and the activations are owned `Vec`s sized once:
//! they outlive kernel calls, so they are not scratch, and sizing them up
//! front keeps the decode loop free of allocations of its own.

use rayon::ThreadPool;
use tempalloc::TempAllocator;

use crate::kernels::quantize::{QuantMatrix, qlinear};
use crate::kernels::sample::{Sampling, sample_top_k};
use crate::kernels::sdpa::{AttentionShape, Inputs, SdpaPlan, sdpa};
use crate::reference;
use crate::rng::Rng;
use crate::runtime::{StepError, run_kernel};

/// The model's sizes and the generation settings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub layers: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    /// Width of the MLP's hidden layer.
    pub ffn: usize,
    pub prompt_len: usize,
    pub seed: u64,
    pub sampling: Sampling,
    pub attention: SdpaPlan,
}

impl Config {
    pub fn d_model(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// How far the tiled attention of the first step may drift from the naive
/// reference: float sums in another order, nothing more.
const ATTENTION_TOLERANCE: f32 = 1e-4;

/// All weights, shared by every generation run.
pub struct Weights {
    embed: Vec<f32>,
    layers: Vec<Layer>,
    lm_head: QuantMatrix,
}

struct Layer {
    /// Query, key and value projections in one matrix: one kernel call.
    qkv: QuantMatrix,
    out: QuantMatrix,
    up: QuantMatrix,
    down: QuantMatrix,
}

impl Weights {
    pub fn random(config: &Config) -> Self {
        let mut rng = Rng::new(config.seed);
        let d = config.d_model();
        // Uniform with variance 1 / fan_in keeps activations near unit scale.
        let mut matrix = |rows: usize, cols: usize| {
            let values = rng.vec(rows * cols, (3.0 / cols as f32).sqrt());
            QuantMatrix::quantize(&values, rows, cols)
        };
        let layers = (0..config.layers)
            .map(|_| Layer {
                qkv: matrix(3 * d, d),
                out: matrix(d, d),
                up: matrix(config.ffn, d),
                down: matrix(d, config.ffn),
            })
            .collect();
        let lm_head = matrix(config.vocab, d);
        Weights {
            embed: rng.vec(config.vocab * d, 1.0),
            layers,
            lm_head,
        }
    }
}

/// One generation's mutable state: the KV cache and the activation buffers.
pub struct State {
    /// Per layer, `positions x d_model` keys and values.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    /// Positions in the cache.
    len: usize,
    act: Activations,
}

/// Activations for up to `prompt_len` rows (the largest step, the prefill).
struct Activations {
    x: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    q: Vec<f32>,
    attn: Vec<f32>,
    proj: Vec<f32>,
    hidden: Vec<f32>,
    logits: Vec<f32>,
}

impl State {
    /// Room for `positions` tokens in the cache, so appending never reallocates.
    pub fn new(config: &Config, positions: usize) -> Self {
        let d = config.d_model();
        let rows = config.prompt_len.max(1);
        let cache = || {
            (0..config.layers)
                .map(|_| Vec::with_capacity(positions * d))
                .collect()
        };
        State {
            keys: cache(),
            values: cache(),
            len: 0,
            act: Activations {
                x: vec![0.0; rows * d],
                normed: vec![0.0; rows * d],
                qkv: vec![0.0; rows * 3 * d],
                q: vec![0.0; rows * d],
                attn: vec![0.0; rows * d],
                proj: vec![0.0; rows * d],
                hidden: vec![0.0; rows * config.ffn],
                logits: vec![0.0; config.vocab],
            },
        }
    }
}

/// The model: configuration, weights and the worker threads its kernels use.
pub struct Model<'w> {
    pub config: Config,
    pub weights: &'w Weights,
    /// Made once per process (`runtime::worker_pool`), shared by every run.
    pub pool: &'w ThreadPool,
}

impl Model<'_> {
    /// Runs `tokens` (the prompt, then one token per step) through the model,
    /// appends them to the cache and samples the next token with `uniform`.
    /// `tokens` is not empty and fits in the activations (`prompt_len` rows).
    /// Every kernel call gets a fresh context over `temp`, which is reset
    /// after it. With `check`, the first layer's attention is compared with
    /// the naive reference.
    pub fn step(
        &self,
        state: &mut State,
        temp: &mut dyn TempAllocator,
        tokens: &[u32],
        uniform: f32,
        check: bool,
    ) -> Result<u32, StepError> {
        let (config, weights) = (&self.config, self.weights);
        let (d, rows) = (config.d_model(), tokens.len());
        let a = &mut state.act;
        let shape = AttentionShape {
            heads: config.heads,
            head_dim: config.head_dim,
            q_len: rows,
            kv_len: state.len + rows,
        };
        let x = &mut a.x[..rows * d];
        for (row, &token) in x.chunks_exact_mut(d).zip(tokens) {
            row.copy_from_slice(&weights.embed[token as usize * d..][..d]);
        }

        for (l, layer) in weights.layers.iter().enumerate() {
            rms_norm(&a.x[..rows * d], &mut a.normed[..rows * d], d);
            let qkv = &mut a.qkv[..rows * 3 * d];
            run_kernel(temp, "qkv", |ctx| {
                qlinear(ctx, &a.normed[..rows * d], &layer.qkv, qkv)
            })?;
            for (row, qkv) in a.q.chunks_exact_mut(d).zip(qkv.chunks_exact(3 * d)) {
                row.copy_from_slice(&qkv[..d]);
                state.keys[l].extend_from_slice(&qkv[d..2 * d]);
                state.values[l].extend_from_slice(&qkv[2 * d..]);
            }

            let (q, attn) = (&a.q[..rows * d], &mut a.attn[..rows * d]);
            let (keys, values) = (&state.keys[l][..], &state.values[l][..]);
            let inputs = Inputs {
                shape,
                q,
                k: keys,
                v: values,
            };
            run_kernel(temp, "sdpa", |ctx| {
                sdpa(ctx, self.pool, config.attention, inputs, attn)
            })?;
            if check && l == 0 {
                let max_diff =
                    reference::max_abs_diff(attn, &reference::sdpa(shape, q, keys, values));
                if max_diff > ATTENTION_TOLERANCE {
                    return Err(StepError::Mismatch { max_diff });
                }
            }

            let proj = &mut a.proj[..rows * d];
            run_kernel(temp, "attn_out", |ctx| qlinear(ctx, attn, &layer.out, proj))?;
            add(&mut a.x[..rows * d], proj);

            rms_norm(&a.x[..rows * d], &mut a.normed[..rows * d], d);
            let hidden = &mut a.hidden[..rows * config.ffn];
            run_kernel(temp, "ffn_up", |ctx| {
                qlinear(ctx, &a.normed[..rows * d], &layer.up, hidden)
            })?;
            hidden.iter_mut().for_each(|h| *h = silu(*h));
            run_kernel(temp, "ffn_down", |ctx| {
                qlinear(ctx, hidden, &layer.down, proj)
            })?;
            add(&mut a.x[..rows * d], proj);
        }
        state.len += rows;

        // Only the last position predicts the next token.
        rms_norm(&a.x[(rows - 1) * d..rows * d], &mut a.normed[..d], d);
        let logits = &mut a.logits;
        run_kernel(temp, "lm_head", |ctx| {
            qlinear(ctx, &a.normed[..d], &weights.lm_head, logits)
        })?;
        run_kernel(temp, "sample", |ctx| {
            sample_top_k(ctx, logits, config.sampling, uniform)
        })
    }
}

/// Scales each `width`-wide row of `x` to unit root mean square.
fn rms_norm(x: &[f32], out: &mut [f32], width: usize) {
    for (row, out) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let mean_square = row.iter().map(|v| v * v).sum::<f32>() / width as f32;
        let inv = 1.0 / (mean_square + 1e-6).sqrt();
        for (o, &v) in out.iter_mut().zip(row) {
            *o = v * inv;
        }
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}
