//! `mapi-sim --seeds N [--first S] [--threads T] [--intensity P]`: runs
//! many seeds of the simulator and prints what they did; exits 1 when a
//! seed broke an invariant, naming the line that replays it.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seeds = 100u64;
    let mut first = 1u64;
    let mut threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut intensity = 100u32;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it.next().and_then(|v| v.parse::<u64>().ok());
        match (a.as_str(), value) {
            ("--seeds", Some(v)) => seeds = v,
            ("--first", Some(v)) => first = v,
            ("--threads", Some(v)) => threads = usize::try_from(v).unwrap_or(1),
            ("--intensity", Some(v)) => intensity = u32::try_from(v).unwrap_or(100),
            _ => {
                eprintln!("usage: mapi-sim [--seeds N] [--first S] [--threads T] [--intensity PERCENT]");
                return ExitCode::from(2);
            }
        }
    }
    let s = mapi_sim::run_many(first, seeds, threads, intensity);
    let minutes = s.wall.as_secs_f64() / 60.0;
    println!(
        "{} seeds ({first}..{}) in {:.1} s on {threads} threads: {:.0} seeds/min",
        s.seeds,
        first + seeds - 1,
        s.wall.as_secs_f64(),
        s.seeds as f64 / minutes.max(1e-9)
    );
    println!(
        "simulated {:.1} h; {} steps; {} runs, {} jobs ({} items); {} process crashes",
        s.simulated.as_secs_f64() / 3600.0,
        s.steps,
        s.runs,
        s.jobs,
        s.items,
        s.crashes
    );
    println!(
        "faults: {} in all, at least {} in every seed (seed {})",
        s.fault_count(),
        s.least_faults,
        s.least_faults_seed
    );
    for (f, n) in &s.faults {
        println!("  {f:?}: {n}");
    }
    println!("violations: {}", s.failed.iter().map(|r| r.violations.len()).sum::<usize>());
    for r in &s.failed {
        for v in &r.violations {
            println!("  seed {}: {v}", r.seed);
        }
        println!("  replay: {}", r.replay_line());
    }
    if s.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
