//! Per-row symmetric int8 quantization and the quantized linear layer built on
//! it: activations are quantized on the fly into scratch (int8 rows plus one
//! `f32` scale per row) and multiplied with int8 weights in `i32`, the way
//! CPU LLM runtimes run their linear layers.

use rayon::ThreadPool;
use rayon::prelude::*;
use tempalloc::{Error, KernelContext};

use crate::rng::Rng;

/// A `rows x cols` matrix as int8 rows with one scale per row. Weights are
/// owned, never scratch: they outlive every reset.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    rows: usize,
    cols: usize,
    values: Vec<i8>,
    scales: Vec<f32>,
}

impl QuantMatrix {
    /// Quantizes a row-major `rows x cols` matrix.
    #[cfg(test)]
    pub fn quantize(values: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(values.len(), rows * cols, "matrix is not {rows} x {cols}");
        let mut q = QuantMatrix {
            rows,
            cols,
            values: vec![0; values.len()],
            scales: vec![0.0; rows],
        };
        quantize_rows(values, cols, &mut q.values, &mut q.scales);
        q
    }

    /// A random `rows x cols` matrix, uniform in `[-scale, scale]`, drawn as
    /// int8 codes directly (no `f32` copy of a 1B-model-sized layer).
    pub fn random(rng: &mut Rng, rows: usize, cols: usize, scale: f32) -> Self {
        let values = (0..rows * cols)
            .map(|_| (rng.below(255) as i32 - 127) as i8)
            .collect();
        QuantMatrix {
            rows,
            cols,
            values,
            scales: vec![scale / 127.0; rows],
        }
    }

    /// Row `row` as `f32` (an embedding lookup).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let codes = &self.values[row * self.cols..][..self.cols];
        for (o, &c) in out.iter_mut().zip(codes) {
            *o = f32::from(c) * self.scales[row];
        }
    }
}

/// Quantizes each `cols`-wide row of `x` so that `row ≈ scale * q` with
/// `|error| <= scale / 2`: the scale maps the row's largest magnitude to 127.
pub fn quantize_rows(x: &[f32], cols: usize, q: &mut [i8], scales: &mut [f32]) {
    let rows = x.chunks_exact(cols).zip(q.chunks_exact_mut(cols));
    for ((row, q_row), scale) in rows.zip(scales) {
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        *scale = max / 127.0;
        // An all-zero row keeps scale 0 and zero codes instead of dividing by 0.
        let inv = if max > 0.0 { 127.0 / max } else { 0.0 };
        for (code, &v) in q_row.iter_mut().zip(row) {
            // `|v * inv| <= 127`, so the cast cannot saturate.
            *code = (v * inv).round() as i8;
        }
    }
}

/// The inverse of [`quantize_rows`], up to rounding.
#[cfg(test)]
pub fn dequantize_rows(q: &[i8], scales: &[f32], cols: usize, out: &mut [f32]) {
    let rows = q.chunks_exact(cols).zip(out.chunks_exact_mut(cols));
    for ((q_row, out_row), &scale) in rows.zip(scales) {
        for (o, &code) in out_row.iter_mut().zip(q_row) {
            *o = f32::from(code) * scale;
        }
    }
}

/// Weight rows per packed panel: a GEMM copies a block of weights into a
/// contiguous panel sized for the cache before multiplying, one per thread.
pub const PANEL_ROWS: usize = 64;

/// `out = x * w^T`: `x` is `rows x w.cols()`, `out` is `rows x w.rows()`, on
/// `pool`'s threads. Scratch: the int8 copy of `x` and its per-row scales,
/// and one packed-weights panel (`PANEL_ROWS x w.cols()` int8) per thread.
/// A single row (a decode step) splits the weight rows between the threads;
/// more rows split the input rows, and every thread packs every panel.
pub fn qlinear(
    ctx: &KernelContext,
    pool: &ThreadPool,
    x: &[f32],
    w: &QuantMatrix,
    out: &mut [f32],
) -> Result<(), Error> {
    let rows = x.len() / w.cols;
    debug_assert_eq!(x.len(), rows * w.cols, "input rows are not {} wide", w.cols);
    debug_assert_eq!(
        out.len(),
        rows * w.rows,
        "output is not {rows} x {}",
        w.rows
    );
    if rows == 0 || w.rows == 0 {
        return Ok(());
    }
    let codes = ctx.scratch::<i8>(x.len())?;
    let scales = ctx.scratch::<f32>(rows)?;
    quantize_rows(x, w.cols, codes, scales);
    let (codes, scales) = (&*codes, &*scales);

    let workers = pool.current_num_threads().max(1);
    let panel = PANEL_ROWS.min(w.rows) * w.cols;
    if rows == 1 {
        // Shares of whole panels of weight rows; `out` is one row, so each
        // share's outputs are one contiguous chunk.
        let per_share = w
            .rows
            .div_ceil(workers)
            .next_multiple_of(PANEL_ROWS.min(w.rows));
        let shares = w.rows.div_ceil(per_share);
        let panels = ctx.scratch::<i8>(shares * panel)?;
        pool.install(|| {
            out.par_chunks_mut(per_share)
                .zip(panels.par_chunks_mut(panel))
                .enumerate()
                .for_each(|(share, (out, panel))| {
                    let first = share * per_share;
                    multiply(codes, scales, w, first, out, out.len(), panel);
                });
        });
    } else {
        let per_share = rows.div_ceil(workers);
        let shares = rows.div_ceil(per_share);
        let panels = ctx.scratch::<i8>(shares * panel)?;
        pool.install(|| {
            out.par_chunks_mut(per_share * w.rows)
                .zip(codes.par_chunks(per_share * w.cols))
                .zip(scales.par_chunks(per_share))
                .zip(panels.par_chunks_mut(panel))
                .for_each(|(((out, codes), scales), panel)| {
                    multiply(codes, scales, w, 0, out, w.rows, panel);
                });
        });
    }
    Ok(())
}

/// `out[r][j] = x[r] . w[first + j]` for `j < n`, one packed panel of weight
/// rows at a time; `out` rows are `stride` wide.
fn multiply(
    codes: &[i8],
    scales: &[f32],
    w: &QuantMatrix,
    first: usize,
    out: &mut [f32],
    stride: usize,
    panel: &mut [i8],
) {
    let n = stride.min(w.rows - first);
    for start in (0..n).step_by(PANEL_ROWS) {
        let len = PANEL_ROWS.min(n - start);
        let rows = first + start..first + start + len;
        let packed = &mut panel[..len * w.cols];
        packed.copy_from_slice(&w.values[rows.start * w.cols..rows.end * w.cols]);
        let w_scales = &w.scales[rows];
        let x_rows = codes.chunks_exact(w.cols).zip(scales);
        for ((x_row, &x_scale), out_row) in x_rows.zip(out.chunks_mut(stride)) {
            let out_row = &mut out_row[start..start + len];
            let w_rows = packed.chunks_exact(w.cols).zip(w_scales);
            for (o, (w_row, &w_scale)) in out_row.iter_mut().zip(w_rows) {
                *o = dot_i8(x_row, w_row) as f32 * x_scale * w_scale;
            }
        }
    }
}

/// Exact int8 dot product; `i32` cannot overflow below 2^17 elements.
/// With AVX2 (checked at run time), 16 products per `vpmaddwd`.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { dot_i8_avx2(a, b) };
    }
    dot_i8_scalar(a, b)
}

fn dot_i8_scalar(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// [`dot_i8`] in AVX2: sign-extend 16 codes to 16 bits, multiply and add
/// pairs into 8 lanes of `i32`.
///
/// # Safety
///
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let blocks = n / 16;
    let mut lanes = [0i32; 8];
    // SAFETY: the caller promises AVX2; every load reads 16 bytes at
    // `16 * i`, and `16 * i + 16 <= n <= len` of both slices, so in bounds
    // (unaligned loads need no alignment); the store writes the 32 bytes of
    // `lanes`.
    unsafe {
        let mut acc = _mm256_setzero_si256();
        for i in 0..blocks {
            let x = _mm_loadu_si128(a.as_ptr().add(16 * i).cast());
            let y = _mm_loadu_si128(b.as_ptr().add(16 * i).cast());
            let products = _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
            acc = _mm256_add_epi32(acc, products);
        }
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc);
    }
    lanes.iter().sum::<i32>() + dot_i8_scalar(&a[16 * blocks..n], &b[16 * blocks..n])
}

#[cfg(test)]
mod tests {
    use tempalloc::{KernelContext, MallocAllocator};

    use super::*;
    use crate::reference;
    use crate::rng::Rng;

    #[test]
    fn dot_products_agree_with_the_scalar_loop() {
        let mut rng = Rng::new(4);
        for len in [0, 1, 15, 16, 17, 100, 2048] {
            let a: Vec<i8> = (0..len)
                .map(|_| (rng.below(256) as i32 - 128) as i8)
                .collect();
            let b: Vec<i8> = (0..len)
                .map(|_| (rng.below(256) as i32 - 128) as i8)
                .collect();
            assert_eq!(dot_i8(&a, &b), dot_i8_scalar(&a, &b), "length {len}");
        }
    }

    #[test]
    fn round_trip_error_is_at_most_half_a_step() {
        let (rows, cols) = (7, 33);
        let mut x = Rng::new(1).vec(rows * cols, 3.0);
        x[cols..2 * cols].fill(0.0); // an all-zero row must not divide by zero
        let (mut q, mut scales, mut back) = (vec![0; x.len()], vec![0.0; rows], vec![0.0; x.len()]);
        quantize_rows(&x, cols, &mut q, &mut scales);
        dequantize_rows(&q, &scales, cols, &mut back);
        for (r, ((row, back_row), &scale)) in x
            .chunks(cols)
            .zip(back.chunks(cols))
            .zip(&scales)
            .enumerate()
        {
            for (&v, &b) in row.iter().zip(back_row) {
                assert!(
                    (v - b).abs() <= scale / 2.0 + 1e-6,
                    "row {r}: {v} came back as {b}"
                );
            }
        }
        assert_eq!(scales[1], 0.0);
        assert!(back[cols..2 * cols].iter().all(|&b| b == 0.0));
    }

    #[test]
    fn qlinear_matches_f32_matmul() {
        // More weight rows than one panel, so panels and shares both split.
        let (rows, k, n) = (3, 40, PANEL_ROWS * 2 + 9);
        let mut rng = Rng::new(2);
        let (x, w) = (rng.vec(rows * k, 1.0), rng.vec(n * k, 1.0));
        let temp = MallocAllocator::new();
        let ctx = KernelContext::new(&temp);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("threads start");
        let expected = reference::matmul_transposed(&x, &w, k);
        let w = QuantMatrix::quantize(&w, n, k);
        // Several input rows (split by rows) and one (split by weight rows).
        for rows in [rows, 1] {
            let mut out = vec![0.0; rows * n];
            assert_eq!(qlinear(&ctx, &pool, &x[..rows * k], &w, &mut out), Ok(()));
            for (got, want) in out.iter().zip(&expected) {
                // Two 8-bit quantizations: about 1% of the dot product's scale.
                assert!(
                    (got - want).abs() < 0.05 * (k as f32).sqrt(),
                    "{got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn qlinear_without_temp_returns_the_failure() {
        let ctx = KernelContext::without_temp();
        let mut out = [0.0; 2];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("threads start");
        let w = QuantMatrix::quantize(&[1.0; 8], 2, 4);
        let result = qlinear(&ctx, &pool, &[1.0; 4], &w, &mut out);
        assert_eq!(result, Err(tempalloc::Error::NoTempAllocator));
    }
}
