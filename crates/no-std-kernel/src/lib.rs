//! One kernel, two worlds.
//!
//! [`rms_norm_quantize`] is written once against [`KernelContext`]. A
//! microcontroller runtime ([`run_on_buffer`]) runs it over a
//! [`FixedAllocator`] carved from a buffer the firmware owns (a `static`,
//! through `static_cell` or `cortex_m::singleton!`), with no heap at all; CI
//! builds this crate for `thumbv7em-none-eabihf`. A host runtime runs the
//! very same function over a `CachingAllocator` (the tests below).
#![no_std]

use core::mem::MaybeUninit;

use tempalloc::{Error, FixedAllocator, Frame, KernelContext, Rewind};

/// Normalises each row of `x` (`cols` wide) by its root mean square, scales
/// it by `weight`, and quantizes it to `i8` with one scale per row:
/// `out[r][c] * scales[r]` is the normalised value. The normalised row is
/// kept in 64-byte aligned scratch, the layout a SIMD loop wants.
///
/// # Errors
///
/// What the context's allocator returns for the scratch row (a full buffer
/// is [`Error::BudgetExceeded`]).
pub fn rms_norm_quantize(
    ctx: &KernelContext,
    x: &[f32],
    weight: &[f32],
    out: &mut [i8],
    scales: &mut [f32],
) -> Result<(), Error> {
    let cols = weight.len();
    let row = ctx.scratch_aligned::<f32>(cols, 64)?;
    let rows = x.chunks_exact(cols).zip(out.chunks_exact_mut(cols));
    for ((x, out), scale) in rows.zip(scales.iter_mut()) {
        let mean_square = x.iter().map(|v| v * v).sum::<f32>() / cols as f32;
        let inv_rms = 1.0 / libm::sqrtf(mean_square + 1e-6);
        for ((r, v), w) in row.iter_mut().zip(x).zip(weight) {
            *r = v * inv_rms * w;
        }
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        *scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        for (o, r) in out.iter_mut().zip(row.iter()) {
            *o = libm::roundf(r / *scale) as i8;
        }
    }
    Ok(())
}

/// The smallest and largest value of a row, kept in scratch as one
/// zero-initialised element: a kernel's own type, derived `Zeroable` through
/// tempalloc's re-export (no `bytemuck` dependency here).
#[derive(Clone, Copy, Debug, PartialEq, tempalloc::Zeroable)]
#[bytemuck(crate = "tempalloc::bytemuck")]
pub struct RowRange {
    /// The smallest value (0 for an empty row).
    pub min: f32,
    /// The largest value (0 for an empty row).
    pub max: f32,
}

/// The range of each row of `x` (`cols` wide), in scratch.
///
/// # Errors
///
/// What the context's allocator returns for the ranges.
pub fn row_ranges<'a>(
    ctx: &KernelContext<'a>,
    x: &[f32],
    cols: usize,
) -> Result<&'a mut [RowRange], Error> {
    let ranges = ctx.scratch::<RowRange>(x.len() / cols.max(1))?;
    for (range, row) in ranges.iter_mut().zip(x.chunks_exact(cols.max(1))) {
        let first = row.first().copied().unwrap_or(0.0);
        *range = row.iter().fold(
            RowRange {
                min: first,
                max: first,
            },
            |r, &v| RowRange {
                min: r.min.min(v),
                max: r.max.max(v),
            },
        );
    }
    Ok(ranges)
}

/// A firmware's inference step: one frame over `buf`, the input copied into
/// frame scratch (it lives for the whole inference), then the kernel in a
/// kernel frame, whose scratch is recycled when it returns. Returns the
/// bytes the kernel had live at its peak, which is all the buffer must hold.
///
/// # Errors
///
/// [`Error::BudgetExceeded`] when `buf` is too small, with the numbers.
pub fn run_on_buffer(
    buf: &mut [MaybeUninit<u8>],
    x: &[f32],
    weight: &[f32],
    out: &mut [i8],
    scales: &mut [f32],
) -> Result<usize, Error> {
    let mut temp = FixedAllocator::new(buf);
    temp.frame(|inf| step(inf, x, weight, out, scales))
}

/// One inference step in a frame the caller runs: a library names the
/// frame's allocator (`Frame` has no default type), so this signature means
/// the same whether or not anything in the build turns on `tempalloc/std`
/// (CI builds this crate both ways).
///
/// # Errors
///
/// As [`run_on_buffer`].
pub fn step(
    inf: &mut Frame<'_, FixedAllocator<'_>>,
    x: &[f32],
    weight: &[f32],
    out: &mut [i8],
    scales: &mut [f32],
) -> Result<usize, Error> {
    let input = inf.scratch_copy(x)?;
    inf.kernel(|ctx| rms_norm_quantize(ctx, input, weight, out, scales))?;
    Ok(inf.stats().high_water)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec;
    use std::vec::Vec;

    use tempalloc::{CachingAllocator, TempAllocator, with_context};

    use super::*;

    const ROWS: usize = 4;
    const COLS: usize = 96;

    fn input() -> (Vec<f32>, Vec<f32>) {
        let x = (0..ROWS * COLS)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let weight = (0..COLS).map(|c| 0.5 + (c % 5) as f32 / 4.0).collect();
        (x, weight)
    }

    /// The kernel without scratch, in `std` arithmetic.
    fn reference(x: &[f32], weight: &[f32]) -> (Vec<i8>, Vec<f32>) {
        let mut out = Vec::new();
        let mut scales = Vec::new();
        for x in x.chunks_exact(weight.len()) {
            let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32 + 1e-6).sqrt();
            let row: Vec<f32> = x.iter().zip(weight).map(|(v, w)| v / rms * w).collect();
            let scale = row.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
            out.extend(row.iter().map(|r| (r / scale).round() as i8));
            scales.push(scale);
        }
        (out, scales)
    }

    #[test]
    fn the_host_and_the_firmware_runtime_agree_with_the_reference() {
        let (x, weight) = input();
        let want = reference(&x, &weight);

        // Host: a CachingAllocator, one context per call, reset after it.
        let mut temp = CachingAllocator::new();
        let (mut out, mut scales) = (vec![0i8; ROWS * COLS], vec![0f32; ROWS]);
        with_context(&mut temp, |ctx| {
            rms_norm_quantize(ctx, &x, &weight, &mut out, &mut scales)
        })
        .unwrap();
        assert_eq!((&out, &scales), (&want.0, &want.1));
        assert_eq!(temp.stats().bytes_live, 0);

        // Firmware: the same kernel over a fixed buffer.
        let mut buf = [MaybeUninit::uninit(); 2048];
        let (mut out, mut scales) = (vec![0i8; ROWS * COLS], vec![0f32; ROWS]);
        let peak = run_on_buffer(&mut buf, &x, &weight, &mut out, &mut scales).unwrap();
        assert_eq!((&out, &scales), (&want.0, &want.1));
        // The input for the frame and one scratch row for the kernel.
        assert_eq!(peak, (ROWS * COLS + COLS) * 4);
    }

    #[test]
    fn a_derived_element_type_is_zeroed_scratch() {
        let (x, _) = input();
        let mut temp = CachingAllocator::new();
        let ranges = with_context(&mut temp, |ctx| {
            Ok::<_, Error>(row_ranges(ctx, &x, COLS)?.to_vec())
        })
        .unwrap();
        for (range, row) in ranges.iter().zip(x.chunks_exact(COLS)) {
            let min = row.iter().copied().fold(f32::MAX, f32::min);
            let max = row.iter().copied().fold(f32::MIN, f32::max);
            assert_eq!(*range, RowRange { min, max });
        }
        assert_eq!(ranges.len(), ROWS);
    }

    #[test]
    fn a_buffer_too_small_is_an_error_with_the_numbers() {
        let (x, weight) = input();
        let (mut out, mut scales) = ([0i8; ROWS * COLS], [0f32; ROWS]);
        // Room for the input, not for the kernel's aligned scratch row.
        let mut buf = [MaybeUninit::uninit(); ROWS * COLS * 4 + 64];
        let e = run_on_buffer(&mut buf, &x, &weight, &mut out, &mut scales).unwrap_err();
        assert!(
            matches!(e, Error::BudgetExceeded { requested: 384, limit, .. } if limit == buf.len()),
            "{e:?}"
        );
    }
}
