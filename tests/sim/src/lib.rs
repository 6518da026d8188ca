//! The whole control plane under a seeded simulator.
//!
//! One seed is one deterministic world ([`world::World`]): the five
//! functions' real routers, lifecycle commands and SQLite store, on ports
//! that are in-process fakes of Google's services (the queue, the
//! executor, Pub/Sub pushes, object storage, KMS), a virtual clock, and one
//! SplitMix64 generator for everything random: ids and nonces, delays,
//! delivery order, the workload and every fault. Requests are polled in
//! place, one at a time (two ticks interleave on purpose), so no thread,
//! timer or hash order can change what happens; the trace hash of a seed
//! is the same on every run.
//!
//! Each seed runs an hour of workload ([`work`]) under faults
//! ([`faults::Fault`]: duplicated, late and lost deliveries and pushes,
//! skipped and overlapping ticks, 429s, 503s and lost answers from every
//! port, aborted commits, processes killed after a write, clock jumps,
//! executions that OOM, die by signal 9, time out, vanish or start twice),
//! then the platform alone until everything is final. After every step
//! [`check`] checks the invariants by name.
//!
//! A failing seed prints the line that replays it; `mapi-sim --seeds N`
//! runs many.

pub mod check;
pub mod deliver;
pub mod executor;
pub mod faults;
pub mod objects;
pub mod queue;
pub mod rng;
pub mod seed;
pub mod signer;
pub mod store;
pub mod trace;
pub mod work;
pub mod worker;
pub mod world;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub use check::Violation;
pub use faults::Fault;
pub use world::{Report, Settings};

/// Runs one seed to its report.
pub fn run(settings: Settings) -> Report {
    world::World::new(settings).run()
}

/// What many seeds did.
#[derive(Debug, Default)]
pub struct Summary {
    pub seeds: u64,
    pub steps: u64,
    pub simulated: Duration,
    pub faults: BTreeMap<Fault, u64>,
    pub crashes: u64,
    pub runs: usize,
    pub jobs: usize,
    pub items: usize,
    /// The reports that broke an invariant.
    pub failed: Vec<Report>,
    pub least_faults: u64,
    /// The seed that injected `least_faults`.
    pub least_faults_seed: u64,
    pub wall: Duration,
}

impl Summary {
    fn add(&mut self, r: Report) {
        if self.seeds == 0 || r.fault_count() < self.least_faults {
            self.least_faults = r.fault_count();
            self.least_faults_seed = r.seed;
        }
        self.seeds += 1;
        self.steps += r.steps;
        self.simulated += r.simulated;
        self.crashes += r.crashes;
        self.runs += r.runs;
        self.jobs += r.jobs;
        self.items += r.items;
        for (f, n) in &r.faults {
            *self.faults.entry(*f).or_default() += n;
        }
        if !r.violations.is_empty() {
            self.failed.push(r);
        }
    }

    pub fn fault_count(&self) -> u64 {
        self.faults.values().sum()
    }
}

/// Runs seeds `first..first + n` on `threads` threads (each seed alone on one).
pub fn run_many(first: u64, n: u64, threads: usize, intensity: u32) -> Summary {
    let began = Instant::now();
    let next = std::sync::atomic::AtomicU64::new(first);
    let reports = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed >= first + n {
                        return;
                    }
                    let mut settings = Settings::seed(seed);
                    settings.intensity = intensity;
                    let report = run(settings);
                    reports.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(report);
                }
            });
        }
    });
    let mut reports = reports.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    reports.sort_by_key(|r| r.seed);
    let mut summary = Summary::default();
    for r in reports {
        summary.add(r);
    }
    summary.wall = began.elapsed();
    summary
}
