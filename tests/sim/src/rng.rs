//! The one source of randomness of a simulation: SplitMix64 from the seed.
//! Ids and nonces (through [`Entropy`]), delivery order, delays and faults
//! all draw from it, in the order the simulation asks, so a seed replays.

use std::sync::{Arc, Mutex, PoisonError};

use mapi_entropy::{Entropy, EntropyError};

/// SplitMix64 (Steele, Lea and Flood, 2014).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
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
