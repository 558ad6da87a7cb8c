//! The sampler: keep the `k` largest logits, softmax them at a temperature and
//! draw one. The uniform draw comes from the caller, so sampling is as
//! deterministic as the caller's seeded generator.

use tempalloc::{Error, KernelContext};

/// What [`sample_top_k`] draws from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub k: usize,
    pub temperature: f32,
}

/// Fills `idx` and `val` with the `idx.len()` largest logits, largest first;
/// equal logits keep the lower index first. Returns how many were filled
/// (fewer when there are fewer logits). NaN logits are never selected.
pub fn select_top_k(logits: &[f32], idx: &mut [u32], val: &mut [f32]) -> usize {
    let k = idx.len().min(val.len());
    let mut filled = 0;
    for (i, &x) in (0u32..).zip(logits) {
        // Once the list is full, most logits fail this test and cost one compare.
        let beats_last = filled < k || (k > 0 && x > val[k - 1]);
        if x.is_nan() || !beats_last {
            continue;
        }
        // Insertion into a short sorted list: k is tiny next to the vocabulary.
        // Equal values go after the ones already there: lower index first.
        let at = val[..filled].iter().position(|&v| v < x).unwrap_or(filled);
        filled = (filled + 1).min(k);
        idx.copy_within(at..filled - 1, at + 1);
        val.copy_within(at..filled - 1, at + 1);
        idx[at] = i;
        val[at] = x;
    }
    filled
}

/// Draws a token from the top `sampling.k` logits, softmaxed at
/// `sampling.temperature`, using `uniform` in `[0, 1)`.
/// Scratch: candidate indices and values.
pub fn sample_top_k(
    ctx: &KernelContext,
    logits: &[f32],
    sampling: Sampling,
    uniform: f32,
) -> Result<u32, Error> {
    let k = sampling.k.clamp(1, logits.len().max(1));
    let idx = ctx.scratch::<u32>(k)?;
    let val = ctx.scratch::<f32>(k)?;
    let n = select_top_k(logits, idx, val);
    let (idx, weights) = (&idx[..n], &mut val[..n]);
    let Some(&top) = weights.first() else {
        return Ok(0); // no finite logits: nothing to prefer
    };
    // Subtracting the top logit keeps exp() in range.
    for w in weights.iter_mut() {
        *w = ((*w - top) / sampling.temperature).exp();
    }
    let mut target = uniform * weights.iter().sum::<f32>();
    for (&token, &w) in idx.iter().zip(weights.iter()) {
        if target < w {
            return Ok(token);
        }
        target -= w;
    }
    // Rounding can leave `target` a hair above the last weight.
    Ok(idx[n - 1])
}

#[cfg(test)]
mod tests {
    use tempalloc::{KernelContext, MallocAllocator};

    use super::*;
    use crate::reference;
    use crate::rng::Rng;

    #[test]
    fn top_k_matches_sorting() {
        let mut rng = Rng::new(3);
        let mut logits = rng.vec(200, 4.0);
        // Ties, to pin the order of equal logits.
        logits[10] = 9.0;
        logits[20] = 9.0;
        logits[150] = 9.0;
        for k in [0, 1, 2, 5, 17, 200, 250] {
            let (mut idx, mut val) = (vec![0; k], vec![0.0; k]);
            let n = select_top_k(&logits, &mut idx, &mut val);
            let expected = reference::top_k(&logits, k);
            let got: Vec<(u32, f32)> = idx[..n]
                .iter()
                .copied()
                .zip(val[..n].iter().copied())
                .collect();
            assert_eq!(got, expected, "k = {k}");
        }
    }

    #[test]
    fn sampling_is_deterministic_and_stays_in_the_top_k() -> Result<(), Error> {
        let logits = Rng::new(4).vec(64, 2.0);
        let top: Vec<u32> = reference::top_k(&logits, 5)
            .iter()
            .map(|&(i, _)| i)
            .collect();
        let temp = MallocAllocator::new();
        let ctx = KernelContext::new(&temp);
        let sampling = Sampling {
            k: 5,
            temperature: 0.8,
        };
        let mut rng = Rng::new(5);
        for _ in 0..50 {
            let u = rng.next_f32();
            let token = sample_top_k(&ctx, &logits, sampling, u)?;
            assert!(top.contains(&token), "{token} is not in the top 5 {top:?}");
            assert_eq!(token, sample_top_k(&ctx, &logits, sampling, u)?);
        }
        Ok(())
    }

    #[test]
    fn a_cold_temperature_picks_the_largest_logit() {
        let logits = Rng::new(6).vec(64, 2.0);
        let temp = MallocAllocator::new();
        let ctx = KernelContext::new(&temp);
        let token = sample_top_k(
            &ctx,
            &logits,
            Sampling {
                k: 8,
                temperature: 1e-3,
            },
            0.99,
        );
        assert_eq!(token, Ok(reference::top_k(&logits, 1)[0].0));
    }
}
