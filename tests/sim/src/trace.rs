//! The trace of a seed: every step's line, folded into one FNV-1a hash.
//! Two runs of one seed must give the same hash; a line that differs
//! names the first step where they parted (run with `MAPI_SIM_VERBOSE=1`).

/// FNV-1a, 64 bits.
#[derive(Debug, Clone)]
pub struct Trace {
    hash: u64,
    lines: u64,
}

impl Default for Trace {
    fn default() -> Trace {
        Trace { hash: 0xcbf2_9ce4_8422_2325, lines: 0 }
    }
}

impl Trace {
    pub fn add(&mut self, line: &str) {
        for b in line.bytes().chain([b'\n']) {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.lines += 1;
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    pub fn lines(&self) -> u64 {
        self.lines
    }
}
