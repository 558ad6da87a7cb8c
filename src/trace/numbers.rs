//! The generator and the median the workloads and [`compare`](super::compare())
//! use. Private to the crate (a random generator and a median are not what
//! this crate is for); the examples, benchmarks and demo include
//! this file with `#[path = ".../src/trace/numbers.rs"] mod numbers;`, so it
//! uses nothing from the crate.

/// SplitMix64 (Steele, Lea, Flood 2014): a small seeded generator, one add
/// and a few mixes per draw, the same numbers on every run.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `lo..=hi` (the bounds are swapped if `lo > hi`); the bias
    /// is below `span / 2^64`.
    pub fn inclusive(&mut self, lo: usize, hi: usize) -> usize {
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        let span = (hi - lo) as u128 + 1;
        lo + ((self.next_u64() as u128 * span) >> 64) as usize
    }
}

/// The median of `samples` (sorted in place): the mean of the two middle
/// values for an even count, NaN for none. The one median the examples,
/// benchmarks and `compare` share.
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    match samples.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => samples[n / 2],
        n => (samples[n / 2 - 1] + samples[n / 2]) / 2.0,
    }
}
