//! The `diag.*` methods the platform's end-to-end tests use to exercise
//! timeouts, cancellation, checkpoints, failures and out-of-memory kills.
//! They ignore the dataset. Waiting happens in ticks of at most 50 ms, with
//! `stop_requested` checked every tick.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::registry::Params;
use crate::{Context, MethodError, Output, json_output, required};

pub(crate) const RESULT: &str = "result.json";

const TICK: Duration = Duration::from_millis(50);
const MIB: usize = 1 << 20;
const PAGE: usize = 4096;

/// `diag.sleep`: sleeps `seconds` in total across attempts, resuming from the
/// `elapsed_s` of an earlier attempt's checkpoint.
pub(crate) fn sleep(params: &Params, ctx: &mut dyn Context) -> Result<Vec<Output>, MethodError> {
    let seconds = required(params.get_f64("seconds"), "seconds")?;
    let checkpoint_every = params.get_f64("checkpoint_every_s");
    let progress_every = params.get_f64("progress_every_s").unwrap_or(0.5);
    let resumed = ctx
        .resume_from()
        .and_then(|state| state.get("elapsed_s").and_then(Value::as_f64))
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map_or(0.0, |x| x.min(seconds));
    let start = Instant::now();
    let mut next_progress = resumed;
    let mut next_checkpoint = resumed + checkpoint_every.unwrap_or(f64::INFINITY);
    loop {
        let now = resumed + start.elapsed().as_secs_f64();
        if now >= seconds {
            break;
        }
        let fraction = now / seconds;
        if ctx.stop_requested() {
            let checkpointed = checkpoint_every.is_some() && save(ctx, now, fraction);
            return Err(MethodError::Stopped { checkpointed });
        }
        if now >= next_progress {
            ctx.progress(fraction, &format!("slept {now:.2} of {seconds} s"));
            next_progress = now + progress_every;
        }
        if let Some(every) = checkpoint_every
            && now >= next_checkpoint
        {
            save(ctx, now, fraction);
            next_checkpoint = now + every;
        }
        std::thread::sleep(TICK.min(Duration::from_secs_f64(seconds - now)));
    }
    ctx.progress(1.0, &format!("slept {seconds} s"));
    let result = json!({
        "slept_s": seconds,
        "resumed_from_s": resumed,
        "this_attempt_s": start.elapsed().as_secs_f64(),
    });
    Ok(vec![json_output(RESULT, &result)])
}

/// Checkpoints the elapsed time; a failure is reported as progress and the sleep goes on.
fn save(ctx: &mut dyn Context, elapsed_s: f64, fraction: f64) -> bool {
    match ctx.checkpoint(&json!({ "elapsed_s": elapsed_s })) {
        Ok(()) => true,
        Err(e) => {
            ctx.progress(fraction, &format!("checkpoint at {elapsed_s:.2} s failed: {e}"));
            false
        }
    }
}

/// `diag.fail`: one progress report, then an input error with the given message.
pub(crate) fn fail(params: &Params, ctx: &mut dyn Context) -> Result<Vec<Output>, MethodError> {
    let message = required(params.get_str("message"), "message")?;
    ctx.progress(0.0, "diag.fail: failing as asked");
    Err(MethodError::Input(message.to_string()))
}

/// `diag.alloc`: allocates `mib` MiB in 1 MiB chunks, writing every 4 KiB page
/// so the memory is resident, holds it for `hold_s`, then reads every page back.
pub(crate) fn alloc(params: &Params, ctx: &mut dyn Context) -> Result<Vec<Output>, MethodError> {
    let mib = required(params.get_i64("mib"), "mib")?;
    let hold_s = params.get_f64("hold_s").unwrap_or(1.0);
    let count = usize::try_from(mib)
        .map_err(|_| MethodError::Input(format!("parameter `mib` must be positive, not {mib}")))?;
    let report_every = (count / 100).max(1);
    let mut chunks: Vec<Vec<u8>> = Vec::with_capacity(count);
    for i in 1..=count {
        if ctx.stop_requested() {
            return Err(MethodError::Stopped { checkpointed: false });
        }
        let mut chunk = Vec::new();
        chunk.try_reserve_exact(MIB).map_err(|e| {
            MethodError::Input(format!("could not allocate MiB {i} of {count}: {e}; ask for less memory"))
        })?;
        chunk.resize(MIB, 0);
        chunk.iter_mut().step_by(PAGE).for_each(|b| *b = 1);
        chunks.push(chunk);
        if i % report_every == 0 || i == count {
            ctx.progress(0.9 * i as f64 / count as f64, &format!("allocated {i} of {count} MiB"));
        }
    }
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < hold_s {
        if ctx.stop_requested() {
            return Err(MethodError::Stopped { checkpointed: false });
        }
        let left = hold_s - start.elapsed().as_secs_f64();
        std::thread::sleep(TICK.min(Duration::from_secs_f64(left.max(0.0))));
    }
    // Reading every page back keeps the writes (and the memory) alive until now.
    let pages_touched: usize =
        chunks.iter().map(|c| c.iter().step_by(PAGE).filter(|b| **b != 0).count()).sum();
    drop(chunks);
    ctx.progress(1.0, &format!("held {count} MiB for {hold_s} s"));
    Ok(vec![json_output(RESULT, &json!({ "allocated_mib": mib, "pages_touched": pages_touched }))])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::{FakeContext, params};
    use crate::registry::{DIAG_ALLOC, DIAG_FAIL, DIAG_SLEEP};

    fn result(outputs: &[Output]) -> Value {
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].name, RESULT);
        serde_json::from_slice(&outputs[0].bytes).expect("result is JSON")
    }

    fn elapsed_s(state: &Value) -> f64 {
        state["elapsed_s"].as_f64().expect("elapsed_s")
    }

    #[test]
    fn sleep_checkpoints_on_stop() {
        let mut ctx = FakeContext { stop_after: Some(4), ..FakeContext::default() };
        let p = params(DIAG_SLEEP, json!({"seconds": 10, "checkpoint_every_s": 0.05}));
        let err = crate::run(DIAG_SLEEP, &p, b"not a csv \xff", &mut ctx).expect_err("stopped");
        assert_eq!(err, MethodError::Stopped { checkpointed: true });
        assert_eq!(ctx.stop_checks.get(), 5);
        // Four ticks of 50 ms, so the final checkpoint says at least 0.15 s.
        let last = ctx.checkpoints.last().expect("a final checkpoint");
        assert!((0.15..2.0).contains(&elapsed_s(last)), "{last}");
        assert!(ctx.checkpoints.len() >= 2, "periodic checkpoints too: {:?}", ctx.checkpoints);
        assert!(ctx.checkpoints.windows(2).all(|w| elapsed_s(&w[0]) <= elapsed_s(&w[1])));
        assert!(ctx.progress[0].0 < 0.01, "{:?}", ctx.progress);
    }

    #[test]
    fn sleep_without_checkpointing_stops_unsaved() {
        let mut ctx = FakeContext { stop_after: Some(2), ..FakeContext::default() };
        let p = params(DIAG_SLEEP, json!({"seconds": 10}));
        let err = crate::run(DIAG_SLEEP, &p, b"", &mut ctx).expect_err("stopped");
        assert_eq!(err, MethodError::Stopped { checkpointed: false });
        assert!(ctx.checkpoints.is_empty());
        // A failed final checkpoint is reported as not checkpointed.
        let mut ctx = FakeContext { stop_after: Some(1), fail_checkpoints: true, ..FakeContext::default() };
        let p = params(DIAG_SLEEP, json!({"seconds": 10, "checkpoint_every_s": 1}));
        let err = crate::run(DIAG_SLEEP, &p, b"", &mut ctx).expect_err("stopped");
        assert_eq!(err, MethodError::Stopped { checkpointed: false });
        assert!(ctx.progress.iter().any(|(_, m)| m.contains("failed: the store is down")));
    }

    #[test]
    fn sleep_resumes_from_a_checkpoint() {
        let mut ctx = FakeContext { resume: Some(json!({"elapsed_s": 0.3})), ..FakeContext::default() };
        let p =
            params(DIAG_SLEEP, json!({"seconds": 0.4, "checkpoint_every_s": 0.05, "progress_every_s": 0}));
        let started = Instant::now();
        let r = result(&crate::run(DIAG_SLEEP, &p, b"", &mut ctx).expect("completes"));
        let wall = started.elapsed().as_secs_f64();
        assert_eq!((r["slept_s"].clone(), r["resumed_from_s"].clone()), (json!(0.4), json!(0.3)));
        let this_attempt = r["this_attempt_s"].as_f64().expect("this_attempt_s");
        assert!((0.09..0.35).contains(&this_attempt), "{r}");
        assert!(wall < 0.35, "slept {wall} s instead of about 0.1");
        assert!(ctx.checkpoints.iter().all(|c| elapsed_s(c) >= 0.3));
        assert!((ctx.progress[0].0 - 0.75).abs() < 0.05, "{:?}", ctx.progress);
        assert_eq!(ctx.progress.last().map(|p| p.0), Some(1.0));
    }

    #[test]
    fn sleep_of_zero_and_stale_checkpoints_finish_at_once() {
        let mut ctx = FakeContext { resume: Some(json!({"elapsed_s": 99})), ..FakeContext::default() };
        let r = result(
            &crate::run(DIAG_SLEEP, &params(DIAG_SLEEP, json!({"seconds": 0.2})), b"", &mut ctx)
                .expect("completes"),
        );
        assert_eq!(r["resumed_from_s"], 0.2);
        let mut ctx = FakeContext { resume: Some(json!({"other": 1})), ..FakeContext::default() };
        let r = result(
            &crate::run(DIAG_SLEEP, &params(DIAG_SLEEP, json!({"seconds": 0})), b"", &mut ctx)
                .expect("completes"),
        );
        assert_eq!((r["slept_s"].clone(), r["resumed_from_s"].clone()), (json!(0.0), json!(0.0)));
        assert_eq!(ctx.progress, [(1.0, "slept 0 s".to_string())]);
    }

    #[test]
    fn fail_fails_after_one_progress_report() {
        let mut ctx = FakeContext::default();
        let err = crate::run(DIAG_FAIL, &params(DIAG_FAIL, json!({})), b"", &mut ctx).expect_err("fails");
        assert_eq!(err, MethodError::Input("diag.fail was asked to fail".into()));
        assert_eq!(ctx.progress.len(), 1);
        let p = params(DIAG_FAIL, json!({"message": "boom"}));
        assert_eq!(crate::run(DIAG_FAIL, &p, b"", &mut ctx), Err(MethodError::Input("boom".into())));
    }

    #[test]
    fn alloc_touches_every_page() {
        let mut ctx = FakeContext::default();
        let p = params(DIAG_ALLOC, json!({"mib": 2, "hold_s": 0}));
        let r = result(&crate::run(DIAG_ALLOC, &p, b"", &mut ctx).expect("allocates"));
        assert_eq!(r, json!({"allocated_mib": 2, "pages_touched": 2 * MIB / PAGE}));
        let fractions: Vec<f64> = ctx.progress.iter().map(|(f, _)| *f).collect();
        assert_eq!(fractions, [0.45, 0.9, 1.0]);
    }

    #[test]
    fn alloc_stops_while_holding() {
        let mut ctx = FakeContext { stop_after: Some(3), ..FakeContext::default() };
        let p = params(DIAG_ALLOC, json!({"mib": 1, "hold_s": 60}));
        let err = crate::run(DIAG_ALLOC, &p, b"", &mut ctx).expect_err("stopped");
        assert_eq!(err, MethodError::Stopped { checkpointed: false });
        assert_eq!(ctx.stop_checks.get(), 4);
    }
}
