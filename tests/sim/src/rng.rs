//! The one source of randomness of a simulation: SplitMix64 from the seed.
//! Ids and nonces (through [`Entropy`]), delivery order, delays and faults
//! all draw from it, in the order the simulation asks, so a seed replays.

use std::sync::{Arc, Mutex, PoisonError};

use mapi_entropy::{Entropy, EntropyError, SplitMix64};

/// The workspace's SplitMix64, with the draws a simulation makes.
#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `per_mille` ‰.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        let i = usize::try_from(self.below(items.len() as u64)).unwrap_or(0);
        &items[i]
    }
}

/// The simulation's generator, shared by everything that draws from it.
#[derive(Debug, Clone)]
pub struct SharedRng(Arc<Mutex<Rng>>);

impl SharedRng {
    pub fn new(seed: u64) -> SharedRng {
        SharedRng(Arc::new(Mutex::new(Rng::new(seed))))
    }

    /// Runs `f` with the generator.
    pub fn with<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The platform's ids and nonces come from the simulation's generator.
impl Entropy for SharedRng {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError> {
        self.with(|r| {
            for chunk in buf.chunks_mut(8) {
                let bytes = r.next_u64().to_le_bytes();
                chunk.copy_from_slice(&bytes[..chunk.len()]);
            }
        });
        Ok(())
    }
}
