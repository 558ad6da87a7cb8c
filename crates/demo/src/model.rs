//! The model: a decoder-only transformer at Llama-3.2-1B's geometry by
//! default (pre-norm, int8 linear layers, grouped-query causal attention
//! over an int8 KV cache, SwiGLU MLP, tied embeddings) with random int8
//! weights from a fixed seed. The weights mean nothing; the shapes, the
//! kernel calls and the scratch they ask for are those of a real LLM.
//!
//! Each step runs in a frame of the temp allocator: its activations are
//! frame scratch, sized for the step's rows and recycled when the step ends.
//! Weights and the KV cache outlive every step, so they are owned `Vec`s,
//! sized once up front so that the decode loop makes no allocation of its
//! own.

use rayon::ThreadPool;
use tempalloc::{Error, Frame, Rewind};

use crate::kernels::quantize::{QuantMatrix, qlinear, quantize_rows};
use crate::kernels::sample::{Sampling, sample_top_k};
use crate::kernels::sdpa::{AttentionShape, CacheInputs, QuantRows, SdpaPlan, sdpa_int8};
use crate::rng::Rng;
use crate::runtime::{StepError, run_kernel};
use crate::{process, reference};

/// The model's sizes and the generation settings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    /// Width of the MLP's hidden layer (gate and up projections each).
    pub ffn: usize,
    /// Prompt tokens, prefilled in chunks of `chunk` tokens.
    pub prompt_len: usize,
    pub chunk: usize,
    pub seed: u64,
    pub sampling: Sampling,
    pub attention: SdpaPlan,
}

impl Config {
    pub fn d_model(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Floats of one position's keys (or values).
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Rows of the fused query/key/value projection.
    fn qkv_rows(&self) -> usize {
        self.d_model() + 2 * self.kv_width()
    }
}

/// How far the tiled attention of the first step may drift from the naive
/// reference: float sums in another order, nothing more.
const ATTENTION_TOLERANCE: f32 = 1e-4;

/// All weights, shared by every generation run: int8 with one scale per row.
pub struct Weights {
    /// The embedding table, also the output projection (tied, as in Llama 3.2 1B).
    embed: QuantMatrix,
    layers: Vec<Layer>,
}

struct Layer {
    /// Query, key and value projections in one matrix: one kernel call.
    qkv: QuantMatrix,
    out: QuantMatrix,
    /// Gate and up projections in one matrix: `2 * ffn` rows.
    gate_up: QuantMatrix,
    down: QuantMatrix,
}

impl Weights {
    pub fn random(config: &Config) -> Self {
        let mut rng = Rng::new(config.seed);
        let d = config.d_model();
        // Uniform with variance 1 / fan_in keeps activations near unit scale.
        let mut matrix = |rows: usize, cols: usize| {
            QuantMatrix::random(&mut rng, rows, cols, (3.0 / cols as f32).sqrt())
        };
        let layers = (0..config.layers)
            .map(|_| Layer {
                qkv: matrix(config.qkv_rows(), d),
                out: matrix(d, d),
                gate_up: matrix(2 * config.ffn, d),
                down: matrix(d, config.ffn),
            })
            .collect();
        let embed = QuantMatrix::random(&mut rng, config.vocab, d, 1.0);
        Weights { embed, layers }
    }
}

/// One layer's int8 KV cache: per position, `kv_heads` rows of `head_dim`
/// codes with one scale each.
struct LayerCache {
    k: Vec<i8>,
    k_scales: Vec<f32>,
    v: Vec<i8>,
    v_scales: Vec<f32>,
}

impl LayerCache {
    fn new(config: &Config, positions: usize) -> Self {
        let (codes, heads) = (positions * config.kv_width(), positions * config.kv_heads);
        LayerCache {
            k: Vec::with_capacity(codes),
            k_scales: Vec::with_capacity(heads),
            v: Vec::with_capacity(codes),
            v_scales: Vec::with_capacity(heads),
        }
    }

    /// Appends one position; within capacity, so no reallocation.
    fn append(&mut self, k: &[f32], v: &[f32], dim: usize) {
        append_rows(&mut self.k, &mut self.k_scales, k, dim);
        append_rows(&mut self.v, &mut self.v_scales, v, dim);
    }
}

fn append_rows(codes: &mut Vec<i8>, scales: &mut Vec<f32>, row: &[f32], dim: usize) {
    let (c, s) = (codes.len(), scales.len());
    codes.resize(c + row.len(), 0);
    scales.resize(s + row.len() / dim, 0.0);
    quantize_rows(row, dim, &mut codes[c..], &mut scales[s..]);
}

/// `codes * scale`, one scale per `dim` codes: the reference's view of the cache.
fn dequantized(codes: &[i8], scales: &[f32], dim: usize) -> Vec<f32> {
    codes
        .chunks_exact(dim)
        .zip(scales)
        .flat_map(|(c, &s)| c.iter().map(move |&c| f32::from(c) * s))
        .collect()
}

/// One generation's state across steps: the KV cache.
pub struct State {
    cache: Vec<LayerCache>,
    /// Positions in the cache.
    len: usize,
    /// Minor page faults the process took in the checks against the naive
    /// reference (the demo's, not a runtime's: its buffers are `Vec`s).
    pub check_faults: Option<u64>,
}

impl State {
    /// Room for `positions` tokens in the cache, so appending never reallocates.
    pub fn new(config: &Config, positions: usize) -> Self {
        State {
            cache: (0..config.layers)
                .map(|_| LayerCache::new(config, positions))
                .collect(),
            len: 0,
            check_faults: Some(0),
        }
    }

    /// Positions in the KV cache.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Pages of the KV cache's buffers (their whole capacity) not resident
    /// yet: what appending positions will fault in. `None` where unknown.
    pub fn cold_pages(&self) -> Option<u64> {
        fn cold<T>(v: &Vec<T>) -> Option<u64> {
            let bytes = v.capacity() * size_of::<T>();
            process::cold_pages(v.as_ptr().cast(), bytes)
        }
        self.cache
            .iter()
            .map(|c| Some(cold(&c.k)? + cold(&c.k_scales)? + cold(&c.v)? + cold(&c.v_scales)?))
            .sum()
    }
}

/// One step's activations for its `rows` positions, from the step's frame:
/// they live across the step's kernel calls, not beyond the step.
struct Activations<'f> {
    x: &'f mut [f32],
    normed: &'f mut [f32],
    qkv: &'f mut [f32],
    q: &'f mut [f32],
    attn: &'f mut [f32],
    proj: &'f mut [f32],
    gate_up: &'f mut [f32],
    hidden: &'f mut [f32],
    logits: &'f mut [f32],
}

impl<'f> Activations<'f> {
    fn new<A: Rewind>(inf: &Frame<'f, A>, config: &Config, rows: usize) -> Result<Self, Error> {
        let d = rows * config.d_model();
        Ok(Activations {
            x: inf.scratch(d)?,
            normed: inf.scratch(d)?,
            qkv: inf.scratch(rows * config.qkv_rows())?,
            q: inf.scratch(d)?,
            attn: inf.scratch(d)?,
            proj: inf.scratch(d)?,
            gate_up: inf.scratch(rows * 2 * config.ffn)?,
            hidden: inf.scratch(rows * config.ffn)?,
            logits: inf.scratch(config.vocab)?,
        })
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
    /// Runs `tokens` (a prompt chunk, or one token per decode step) through
    /// the model in a frame of `temp`, appends them to the cache and samples
    /// the next token with `uniform`. `tokens` is not empty and at most
    /// `chunk` long. With `check`, the first layer's attention is compared
    /// with the naive reference.
    pub fn step<A: Rewind>(
        &self,
        state: &mut State,
        temp: &mut A,
        tokens: &[u32],
        uniform: f32,
        check: bool,
    ) -> Result<u32, StepError> {
        temp.frame(|inf| {
            let act = Activations::new(inf, &self.config, tokens.len())?;
            Ok(self.forward(inf, act, state, tokens, uniform, check))
        })
        .unwrap_or_else(|error| Err(StepError::Activations(error)))
    }

    /// The step's work inside its frame `inf`: every kernel call goes
    /// through `run_kernel`, in a kernel frame of its own.
    fn forward<A: Rewind>(
        &self,
        inf: &mut Frame<'_, A>,
        a: Activations<'_>,
        state: &mut State,
        tokens: &[u32],
        uniform: f32,
        check: bool,
    ) -> Result<u32, StepError> {
        let (config, weights, pool) = (&self.config, self.weights, self.pool);
        let (d, kvd, rows) = (config.d_model(), config.kv_width(), tokens.len());
        let shape = AttentionShape {
            heads: config.heads,
            kv_heads: config.kv_heads,
            head_dim: config.head_dim,
            q_len: rows,
            kv_len: state.len + rows,
        };
        for (row, &token) in a.x.chunks_exact_mut(d).zip(tokens) {
            weights.embed.dequantize_row(token as usize, row);
        }

        for (l, layer) in weights.layers.iter().enumerate() {
            rms_norm(a.x, a.normed, d);
            run_kernel(inf, "qkv", |ctx| {
                qlinear(ctx, pool, a.normed, &layer.qkv, a.qkv)
            })?;
            let cache = &mut state.cache[l];
            for (row, qkv) in
                a.q.chunks_exact_mut(d)
                    .zip(a.qkv.chunks_exact(config.qkv_rows()))
            {
                row.copy_from_slice(&qkv[..d]);
                cache.append(&qkv[d..d + kvd], &qkv[d + kvd..], config.head_dim);
            }

            let inputs = CacheInputs {
                shape,
                q: a.q,
                k: QuantRows {
                    codes: &cache.k,
                    scales: &cache.k_scales,
                },
                v: QuantRows {
                    codes: &cache.v,
                    scales: &cache.v_scales,
                },
            };
            run_kernel(inf, "sdpa", |ctx| {
                sdpa_int8(ctx, pool, config.attention, inputs, a.attn)
            })?;
            if check && l == 0 {
                let faults = process::minor_faults();
                let dim = config.head_dim;
                let keys = dequantized(&cache.k, &cache.k_scales, dim);
                let values = dequantized(&cache.v, &cache.v_scales, dim);
                let max_diff =
                    reference::max_abs_diff(a.attn, &reference::sdpa(shape, a.q, &keys, &values));
                if max_diff > ATTENTION_TOLERANCE {
                    return Err(StepError::Mismatch { max_diff });
                }
                let taken = process::minor_faults().zip(faults).map(|(a, b)| a - b);
                state.check_faults = state.check_faults.zip(taken).map(|(a, b)| a + b);
            }

            run_kernel(inf, "attn_out", |ctx| {
                qlinear(ctx, pool, a.attn, &layer.out, a.proj)
            })?;
            add(a.x, a.proj);

            rms_norm(a.x, a.normed, d);
            run_kernel(inf, "gate_up", |ctx| {
                qlinear(ctx, pool, a.normed, &layer.gate_up, a.gate_up)
            })?;
            let ffn = config.ffn;
            for (h, gu) in a
                .hidden
                .chunks_exact_mut(ffn)
                .zip(a.gate_up.chunks_exact(2 * ffn))
            {
                let (gate, up) = gu.split_at(ffn);
                for ((h, &g), &u) in h.iter_mut().zip(gate).zip(up) {
                    *h = silu(g) * u;
                }
            }
            run_kernel(inf, "down", |ctx| {
                qlinear(ctx, pool, a.hidden, &layer.down, a.proj)
            })?;
            add(a.x, a.proj);
        }
        state.len += rows;

        // Only the last position predicts the next token.
        let normed = &mut a.normed[..d];
        rms_norm(&a.x[(rows - 1) * d..], normed, d);
        run_kernel(inf, "lm_head", |ctx| {
            qlinear(ctx, pool, normed, &weights.embed, a.logits)
        })?;
        run_kernel(inf, "sample", |ctx| {
            sample_top_k(ctx, a.logits, config.sampling, uniform)
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
