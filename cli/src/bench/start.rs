//! `mapi bench start`: start-to-first-event of a `describe` execution on
//! the local-process executor and on gvisor, on two platforms of this
//! process started side by side and sampled in turn (so both see the same
//! machine). A sample is the time from the executor's `submit` to the first
//! line the task printed (its `started` event) in the execution's logs,
//! polled every 2 ms; the first sample of each is a warm-up and not
//! counted. The attempts are prepared as the platform prepares a run's
//! (`PortsHarness`).

use std::path::Path;
use std::time::{Duration, Instant};

use mapi_executor::conformance::ports::PortsHarness;
use mapi_executor::conformance::{Behaviour, Harness, attempt, wait_done};
use serde::Serialize;

use super::{bench_platform, percentile};

/// The figures of `mapi bench start`.
#[derive(Debug, Serialize)]
pub struct StartReport {
    pub samples: usize,
    pub local_process_p50_ms: f64,
    pub local_process_p95_ms: f64,
    pub gvisor_p50_ms: f64,
    pub gvisor_p95_ms: f64,
    /// What gvisor adds at the median (the goal: at most 300 ms).
    pub gvisor_adds_p50_ms: f64,
}

async fn harness(
    dir: &Path,
    extra: &[(&str, String)],
) -> Result<(mapi_embedded::DevPlatform, PortsHarness), Box<dyn std::error::Error>> {
    let platform = bench_platform(dir, "normal", false, extra, None).await?;
    let s = &platform.state;
    let h = PortsHarness {
        executor: s.executor.clone(),
        data: s.objects.clone(),
        bootstrap: s.bootstrap.clone(),
        clock: s.clock.clone(),
        class_s_mib: 8 * 1024,
        ledger: None,
    };
    Ok((platform, h))
}

/// One sample: submit to the first line printed.
async fn sample(h: &PortsHarness, n: usize) -> Result<Duration, Box<dyn std::error::Error>> {
    let a = attempt(u8::try_from(n % 256).unwrap_or(0), Duration::from_secs(60), 1);
    h.prepare(&a, Behaviour::Succeed).await;
    let started = Instant::now();
    let handle = h.executor.submit(&a).await?;
    let deadline = started + Duration::from_secs(30);
    loop {
        if !h.executor.logs(&handle, None, 1).await?.lines.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("execution {handle} printed nothing in 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = started.elapsed();
    wait_done(h, &handle).await;
    Ok(took)
}

/// Samples both executors in turn, `samples` each after a warm-up.
///
/// # Errors
///
/// A platform that does not start (gvisor: no `runsc`, or not root), or an execution that
/// prints nothing.
pub async fn start(dir: &Path, samples: usize) -> Result<StartReport, Box<dyn std::error::Error>> {
    let (_local, local) = harness(&dir.join("local-process"), &[]).await?;
    let gvisor_extra = [("MAPI_EXECUTOR", "gvisor".to_owned())];
    let (_gvisor, gvisor) = harness(&dir.join("gvisor"), &gvisor_extra).await?;
    let (mut l, mut g) = (Vec::new(), Vec::new());
    for n in 0..=samples {
        let (a, b) = (sample(&local, n).await?, sample(&gvisor, n).await?);
        if n > 0 {
            l.push(a);
            g.push(b);
        }
    }
    l.sort();
    g.sort();
    let (lp50, gp50) = (percentile(&l, 0.5), percentile(&g, 0.5));
    Ok(StartReport {
        samples,
        local_process_p50_ms: lp50,
        local_process_p95_ms: percentile(&l, 0.95),
        gvisor_p50_ms: gp50,
        gvisor_p95_ms: percentile(&g, 0.95),
        gvisor_adds_p50_ms: gp50 - lp50,
    })
}
