//! Where `ctx.random()` draws from: the operating system's randomness in
//! production, or a generator seeded by the caller
//! ([`EngineBuilder::random_seed`](crate::EngineBuilder::random_seed)), so
//! a simulated run draws the same numbers on every replay of its seed.

use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use crate::lock::lock;
use crate::seeded::SimRng;

/// The engine's source of random numbers.
#[derive(Debug, Default)]
pub(crate) enum Random {
    /// A fresh draw from the process's hash seeds each time.
    #[default]
    Os,
    /// A seeded generator: good enough for workflow code that asked for
    /// "a random number" (not for cryptography).
    Seeded(Mutex<SimRng>),
}

impl Random {
    pub(crate) fn seeded(seed: u64) -> Random {
        Random::Seeded(Mutex::new(SimRng::new(seed)))
    }

    pub(crate) fn next_u64(&self) -> u64 {
        match self {
            Random::Os => {
                let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
                hasher.write_u128(std::time::Instant::now().elapsed().as_nanos());
                hasher.finish()
            }
            Random::Seeded(generator) => lock(generator).next_u64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Random;

    #[test]
    fn a_seed_draws_the_same_numbers_again() {
        let draw = |seed| {
            let random = Random::seeded(seed);
            [random.next_u64(), random.next_u64(), random.next_u64()]
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
