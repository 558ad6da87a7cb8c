//! The three reference workloads (`steady`, `decode`, `mixed`), with the
//! shapes of `traces/gen_traces.py`.

use super::numbers::SplitMix64;
use super::{Event, Trace};

/// The same scratch every inference, reset after every kernel.
///
/// Per layer: `a 4096 64`, `a 65536 64`, `r`, `a 262144 64`, `a 1024 16`,
/// `a 512 128`, `r`; one `i` after the layers of each inference. The default
/// is the reference shape: 32 layers, 200 inferences.
///
/// ```
/// use tempalloc::trace::Steady;
///
/// let trace = Steady { layers: 2, inferences: 3 }.generate();
/// assert_eq!((trace.requests(), trace.inferences()), (2 * 3 * 5, 3));
/// assert_eq!(Steady::default(), Steady { layers: 32, inferences: 200 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Steady {
    /// Layers per inference (two kernels each).
    pub layers: usize,
    /// Inferences in the trace.
    pub inferences: usize,
}

impl Default for Steady {
    fn default() -> Self {
        Steady {
            layers: 32,
            inferences: 200,
        }
    }
}

impl Steady {
    /// The trace of this shape.
    ///
    /// ```
    /// use tempalloc::trace::Steady;
    ///
    /// assert_eq!(Steady { layers: 1, inferences: 1 }.generate().peak_live_bytes(), 262144 + 1024 + 512);
    /// ```
    pub fn generate(&self) -> Trace {
        let a = |size, align| Event::Alloc { size, align };
        let mut events = Vec::with_capacity(
            self.inferences
                .saturating_mul(self.layers.saturating_mul(7) + 1)
                .min(1 << 24),
        );
        for _ in 0..self.inferences {
            for _ in 0..self.layers {
                events.extend([a(4096, 64), a(65536, 64), Event::Reset]);
                events.extend([a(262144, 64), a(1024, 16), a(512, 128), Event::Reset]);
            }
            events.push(Event::EndInference);
        }
        Trace { events }
    }
}

/// The reference `steady` trace: [`Steady::default`] generated.
///
/// ```
/// let trace = tempalloc::trace::steady();
/// assert_eq!((trace.requests(), trace.inferences()), (32_000, 200));
/// ```
pub fn steady() -> Trace {
    Steady::default().generate()
}

/// LLM decoding: a prefill of `prompt` tokens, then `steps` one-token steps.
///
/// Per step and layer: a quantize kernel (`4·q` and `8·q` bytes, then `r`),
/// then an SDPA kernel with per-thread tiles of
/// `(qs·kvs + 2·qs + qs·head)·4·threads` bytes and a dequant buffer of
/// `kvs·head·4·threads` bytes (then `r`), where `qs = min(q_split, q)`
/// (`q_split` is 256 from 768 query tokens, 64 from 192, else 32),
/// `kvs = min(kv_split, kv)`, `q` = tokens this step and `kv` = tokens so far.
/// Each step ends with one sampler buffer of `vocab·8` bytes, `r`, `i`. Every
/// request is aligned to 64. The default is the reference shape.
///
/// ```
/// use tempalloc::trace::Decode;
///
/// let small = Decode { layers: 2, steps: 3, ..Decode::default() }.generate();
/// // 4 steps (prefill + 3), 2 layers of 4 requests, 1 sampler request each.
/// assert_eq!((small.requests(), small.inferences()), (4 * (2 * 4 + 1), 4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decode {
    /// Transformer layers (32).
    pub layers: usize,
    /// Prompt tokens processed by the prefill step (128).
    pub prompt: usize,
    /// One-token decode steps after the prefill (1024).
    pub steps: usize,
    /// Worker threads, each with its own tiles (4).
    pub threads: usize,
    /// Head size (128).
    pub head: usize,
    /// KV block length of the SDPA kernel (512).
    pub kv_split: usize,
    /// Vocabulary size; the sampler takes `vocab·8` bytes (32000).
    pub vocab: usize,
    /// Generations (prompt + steps), one after the other (1).
    pub generations: usize,
}

impl Default for Decode {
    fn default() -> Self {
        Decode {
            layers: 32,
            prompt: 128,
            steps: 1024,
            threads: 4,
            head: 128,
            kv_split: 512,
            vocab: 32000,
            generations: 1,
        }
    }
}

impl Decode {
    /// The two SDPA scratch sizes for `q` query tokens over `kv` tokens.
    ///
    /// ```
    /// use tempalloc::trace::Decode;
    ///
    /// // Prefill of the reference shape: qs = 32, kvs = 128.
    /// assert_eq!(Decode::default().sdpa_scratch(128, 128), [(32 * 128 + 64 + 32 * 128) * 16, 128 * 128 * 16]);
    /// ```
    pub fn sdpa_scratch(&self, q: usize, kv: usize) -> [usize; 2] {
        let q_split = if q >= 768 {
            256
        } else if q >= 192 {
            64
        } else {
            32
        };
        let (qs, kvs) = (q_split.min(q), self.kv_split.min(kv));
        let per_thread = qs
            .saturating_mul(kvs)
            .saturating_add(qs.saturating_mul(2))
            .saturating_add(qs.saturating_mul(self.head));
        [
            per_thread.saturating_mul(self.threads).saturating_mul(4),
            kvs.saturating_mul(self.head)
                .saturating_mul(4)
                .saturating_mul(self.threads),
        ]
    }

    /// The trace of this shape.
    ///
    /// ```
    /// use tempalloc::trace::{Decode, Event};
    ///
    /// let trace = Decode { layers: 1, steps: 0, ..Decode::default() }.generate();
    /// assert_eq!(trace.events()[..3], [
    ///     Event::Alloc { size: 128 * 4, align: 64 },
    ///     Event::Alloc { size: 128 * 8, align: 64 },
    ///     Event::Reset,
    /// ]);
    /// ```
    pub fn generate(&self) -> Trace {
        let a = |size| Event::Alloc { size, align: 64 };
        let mut events = Vec::new();
        for _ in 0..self.generations {
            for step in 0..=self.steps {
                let q = if step == 0 { self.prompt } else { 1 };
                let kv = self.prompt.saturating_add(step);
                let [tiles, dequant] = self.sdpa_scratch(q, kv);
                for _ in 0..self.layers {
                    events.extend([a(q.saturating_mul(4)), a(q.saturating_mul(8)), Event::Reset]);
                    events.extend([a(tiles), a(dequant), Event::Reset]);
                }
                events.extend([
                    a(self.vocab.saturating_mul(8)),
                    Event::Reset,
                    Event::EndInference,
                ]);
            }
        }
        Trace { events }
    }
}

/// The reference `decode` trace: [`Decode::default`] generated.
///
/// ```
/// let trace = tempalloc::trace::decode();
/// assert_eq!(trace.inferences(), 1025);
/// ```
pub fn decode() -> Trace {
    Decode::default().generate()
}

/// Many differently sized kernels: each inference runs
/// `min_kernels..=max_kernels` kernels, each asking for
/// `min_buffers..=max_buffers` buffers of log-uniform size in
/// `min_size..max_size` bytes, alignment drawn uniformly from `aligns`
/// (64 is listed twice, as in the reference), then `r`; `i` after each
/// inference. Seeded, so the same parameters give the same trace. The
/// generator is this crate's own (it does not reproduce Python's `random`),
/// with the same distributions.
///
/// Degenerate parameters do not panic: reversed ranges are swapped and an
/// empty `aligns` means alignment 1.
///
/// ```
/// use tempalloc::trace::Mixed;
///
/// let trace = Mixed { inferences: 5, ..Mixed::default() }.generate();
/// assert_eq!(trace.inferences(), 5);
/// assert!(trace.request_sizes().all(|s| (16..4 << 20).contains(&s)));
/// assert_eq!(trace, Mixed { inferences: 5, ..Mixed::default() }.generate());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mixed {
    /// Inferences in the trace (200).
    pub inferences: usize,
    /// Seed of the random generator (7).
    pub seed: u64,
    /// Fewest kernels per inference (20).
    pub min_kernels: usize,
    /// Most kernels per inference (60).
    pub max_kernels: usize,
    /// Fewest buffers per kernel (1).
    pub min_buffers: usize,
    /// Most buffers per kernel (4).
    pub max_buffers: usize,
    /// Smallest size, in bytes (16).
    pub min_size: usize,
    /// Sizes stay below this, in bytes (4 MiB).
    pub max_size: usize,
    /// Alignments drawn from, uniformly ({8, 16, 64, 64, 128, 4096}).
    pub aligns: &'static [usize],
}

impl Default for Mixed {
    fn default() -> Self {
        Mixed {
            inferences: 200,
            seed: 7,
            min_kernels: 20,
            max_kernels: 60,
            min_buffers: 1,
            max_buffers: 4,
            min_size: 16,
            max_size: 4 << 20,
            aligns: &[8, 16, 64, 64, 128, 4096],
        }
    }
}

impl Mixed {
    /// The trace of this shape.
    ///
    /// ```
    /// use tempalloc::trace::Mixed;
    ///
    /// let trace = Mixed { inferences: 3, aligns: &[4096], ..Mixed::default() }.generate();
    /// assert!(trace.events().iter().all(|e| match e {
    ///     tempalloc::trace::Event::Alloc { align, .. } => *align == 4096,
    ///     _ => true,
    /// }));
    /// ```
    pub fn generate(&self) -> Trace {
        let mut rng = SplitMix64::new(self.seed);
        let ordered = |a: usize, b: usize| (a.min(b), a.max(b));
        let kernels = ordered(self.min_kernels, self.max_kernels);
        let buffers = ordered(self.min_buffers, self.max_buffers);
        let (lo, hi) = ordered(self.min_size.max(1), self.max_size.max(1));
        let (log_lo, log_hi) = ((lo as f64).log2(), (hi as f64).log2());
        let mut events = Vec::new();
        for _ in 0..self.inferences {
            for _ in 0..rng.inclusive(kernels.0, kernels.1) {
                for _ in 0..rng.inclusive(buffers.0, buffers.1) {
                    let exponent = log_lo + (log_hi - log_lo) * rng.unit();
                    // `as` saturates; the clamp keeps float rounding inside the range.
                    let size = (exponent.exp2() as usize).clamp(lo, hi.saturating_sub(1).max(lo));
                    let align = match self.aligns.len() {
                        0 => 1,
                        n => self.aligns[rng.inclusive(0, n - 1)],
                    };
                    events.push(Event::Alloc { size, align });
                }
                events.push(Event::Reset);
            }
            events.push(Event::EndInference);
        }
        Trace { events }
    }
}

/// The reference `mixed` trace: [`Mixed::default`] generated.
///
/// ```
/// let trace = tempalloc::trace::mixed();
/// assert_eq!(trace.inferences(), 200);
/// ```
pub fn mixed() -> Trace {
    Mixed::default().generate()
}

/// The built-in workload called `name` (`"steady"`, `"decode"` or
/// `"mixed"`), as [`steady`], [`decode`] and [`mixed`] generate it; `None`
/// for any other name (a trace file, say).
///
/// ```
/// use tempalloc::trace;
///
/// assert_eq!(trace::workload("steady"), Some(trace::steady()));
/// assert_eq!(trace::workload("my.trace"), None);
/// ```
pub fn workload(name: &str) -> Option<Trace> {
    match name {
        "steady" => Some(steady()),
        "decode" => Some(decode()),
        "mixed" => Some(mixed()),
        _ => None,
    }
}

// The generator and the median (`numbers.rs`, which the examples include
// as source, so its tests live here).
#[cfg(test)]
mod tests {
    use super::super::numbers::{SplitMix64, median};

    #[test]
    fn splitmix64_is_the_published_stream_and_its_draws_stay_in_range() {
        // The first output for seed 0 in the reference implementation.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        assert_eq!(a.next_u64(), b.next_u64());
        let mut rng = SplitMix64::new(2);
        for _ in 0..1000 {
            assert!((0.0..1.0).contains(&rng.unit()));
            assert!((1..=6).contains(&rng.inclusive(6, 1)));
        }
        assert_eq!(rng.inclusive(4, 4), 4);
    }

    #[test]
    fn median_of_odd_even_and_no_samples() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
