//! The randomness port. Every identifier and nonce the platform makes (run,
//! dataset and job ids, an attempt's nonce and event key, a tick's holder
//! id, an audit entry's id) takes its bytes from an [`Entropy`] held in the
//! platform's state: [`OsEntropy`] in a deployment, [`SeededEntropy`] under
//! test, where the same seed gives the same ids in the same order.
//!
//! Architecture invariant: no handler calls the operating system's
//! randomness for an identifier; it asks its state's `Entropy`.

use std::sync::Mutex;

/// The operating system had no randomness to give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no randomness: {0}")]
pub struct EntropyError(pub String);

/// A source of random bytes.
pub trait Entropy: Send + Sync + std::fmt::Debug {
    /// Fills `buf`. Only the operating system's source can fail.
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError>;
}

/// `N` random bytes from `entropy`.
pub fn bytes<const N: usize>(entropy: &dyn Entropy) -> Result<[u8; N], EntropyError> {
    let mut b = [0u8; N];
    entropy.fill(&mut b)?;
    Ok(b)
}

/// The operating system's randomness (`getrandom`).
#[derive(Clone, Copy, Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError> {
        getrandom::fill(buf).map_err(|e| EntropyError(e.to_string()))
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): the workspace's one seeded
/// generator, for tests, simulations and [`SeededEntropy`]. A seed replays.
/// Not for secrets.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform (near enough for tests) in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

/// A deterministic source for tests and simulations: [`SplitMix64`] from a
/// seed. Not for secrets.
#[derive(Debug)]
pub struct SeededEntropy {
    state: Mutex<SplitMix64>,
}

impl SeededEntropy {
    pub fn new(seed: u64) -> SeededEntropy {
        SeededEntropy { state: Mutex::new(SplitMix64::new(seed)) }
    }

    fn next(&self) -> u64 {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next_u64()
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError> {
        for chunk in buf.chunks_mut(8) {
            let word = self.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_and_another_seed_differs() {
        let (a, b, c) = (SeededEntropy::new(7), SeededEntropy::new(7), SeededEntropy::new(8));
        let first: [u8; 20] = bytes(&a).expect("bytes");
        assert_eq!(first, bytes::<20>(&b).expect("bytes"), "same seed, same bytes");
        assert_ne!(first, bytes::<20>(&c).expect("bytes"), "another seed, other bytes");
        assert_ne!(first, bytes::<20>(&a).expect("bytes"), "the stream moves on");
        // SplitMix64's first output for seed 0, as its reference implementation gives it.
        let zero: [u8; 8] = bytes(&SeededEntropy::new(0)).expect("bytes");
        assert_eq!(u64::from_le_bytes(zero), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn the_os_source_fills_every_byte() {
        let a: [u8; 32] = bytes(&OsEntropy).expect("bytes");
        let b: [u8; 32] = bytes(&OsEntropy).expect("bytes");
        assert_ne!(a, b);
    }
}
