//! Seeded generators: the one source of every choice a simulated run
//! makes (`testing::sim` re-exports them), and of `ctx.random()` with
//! `EngineBuilder::random_seed`.

/// A seeded generator (SplitMix64): the same seed, the same numbers, on
/// every machine and release. Small and fast; not for cryptography.
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator that starts from `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng { state: seed }
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// `true` with a chance of `per_mille` in 1,000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// One of `items`, or `None` when there is none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        let n = u64::try_from(items.len()).unwrap_or(u64::MAX);
        items.get(usize::try_from(self.below(n)).unwrap_or(0))
    }

    /// A generator of its own for a part of the run (an engine's
    /// `ctx.random()`, the store's faults), drawn from this one: a part
    /// that draws more or less does not shift the others' numbers.
    pub fn fork(&mut self) -> SimRng {
        SimRng::new(self.next_u64())
    }
}

/// FNV-1a, 64 bits: a hash of a run's trace that is the same on every
/// machine and release (std's hashers promise neither).
#[derive(Clone, Copy, Debug)]
pub struct TraceHash(u64);

impl Default for TraceHash {
    fn default() -> Self {
        TraceHash(0xcbf2_9ce4_8422_2325)
    }
}

impl TraceHash {
    /// Adds `bytes` to the hash.
    pub fn add(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn value(&self) -> u64 {
        self.0
    }
}
