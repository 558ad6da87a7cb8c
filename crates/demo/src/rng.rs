//! The demo's seeded generator: weights, prompt and sampling must be the same
//! on every run and for every allocator. The stream is the library's
//! SplitMix64 (`src/trace/numbers.rs`); this adds the draws the demo needs.

use crate::numbers::SplitMix64;

#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, 1)`: the top 24 bits, exactly representable in `f32`.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[-scale, scale)`.
    #[cfg(test)]
    pub fn symmetric(&mut self, scale: f32) -> f32 {
        (self.next_f32() * 2.0 - 1.0) * scale
    }

    /// Uniform in `0..n`; the modulo bias is irrelevant for a demo prompt.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % u64::from(n)) as u32
    }

    /// `len` values uniform in `[-scale, scale)`.
    #[cfg(test)]
    pub fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.symmetric(scale)).collect()
    }
}
