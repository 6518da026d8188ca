//! `mapi bench soak` itself, briefly: three samples of four seconds of the
//! mixed load against its own `mapi dev`, then the report. What is checked
//! is that the instrument works (a line and a sample per period, every
//! request answered, runs and items followed to their end, the process and
//! its home measured), not the figures: BENCHMARKS.md holds those, from the
//! hour-long run.

use mapi_tests::binary;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_soak_samples_the_platform_under_mixed_load_and_reports_slopes() {
    let out = tokio::process::Command::new(binary("mapi"))
        .args(["--json", "bench", "soak", "--minutes", "3", "--sample-s", "4", "--idle-s", "1"])
        .args(["--runs-per-s", "1", "--job-items", "20", "--job-every-s", "3"])
        .output()
        .await
        .expect("mapi bench soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let (lines, report) = stdout.split_at(stdout.find('{').expect("a JSON report"));
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 3, "a line per sample: {lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("rss") && l.contains("probe p50") && l.contains("p99")),
        "{lines:?}"
    );
    let r: Value = serde_json::from_str(report).expect("the report");
    let samples = r["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 3);
    for s in samples {
        assert!(s["rss_mib"].as_f64().is_some_and(|m| m > 5.0), "{s}");
        let anon = s["rss_anon_mib"].as_f64().expect("anonymous memory");
        assert!(anon > 1.0 && anon < s["rss_mib"].as_f64().unwrap_or(0.0), "{s}");
        assert!(s["threads"].as_u64().is_some_and(|t| t > 1), "{s}");
        assert!(s["fds"].as_u64().is_some_and(|f| f > 3), "{s}");
        assert!(s["disk_allocated_mib"].as_f64() >= s["disk_data_mib"].as_f64().map(|d| d * 0.5), "{s}");
        assert!(s["probes"].as_u64().is_some_and(|n| n >= 10), "the probe ran: {s}");
    }
    assert_eq!((r["errors"].as_u64(), r["log_errors"].as_u64()), (Some(0), Some(0)), "{report}");
    assert!(r["runs_submitted"].as_u64().is_some_and(|n| n >= 8), "{report}");
    assert!(r["runs_ended"].as_u64().is_some_and(|n| n >= 1), "runs were followed to their end: {report}");
    assert!(r["items_ended"].as_u64().is_some_and(|n| n >= 20), "a job was followed to its end: {report}");
    assert!(r["disk"]["store_bytes"].as_u64().is_some_and(|b| b > 0), "{report}");
    for slope in [
        "rss_mib_per_sample",
        "rss_anon_mib_per_1000_runs",
        "threads_per_sample",
        "disk_allocated_mib_per_sample",
        "probe_p99_ratio",
    ] {
        assert!(r[slope].is_f64(), "{slope} is reported: {report}");
    }
}
