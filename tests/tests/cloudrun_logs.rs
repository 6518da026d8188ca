//! The cloudrun-jobs executor's `logs` against FakeCloudLogging: entries
//! sharing a timestamp across cursors, a follower picking up what is written
//! after the end, both payloads, faults, forged cursors, expired page
//! tokens, and the query it sends. Executions are made on FakeCloudRun
//! without processes; their entries are written to the logging fake by the
//! test, at timestamps it chooses.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::{Clock, VirtualClock};
use mapi_cloudrun::{CloudRunJobsExecutor, Credentials};
use mapi_domain::Timestamp;
use mapi_executor::conformance::attempt;
use mapi_executor::{ExecutionHandle, Executor, ExecutorError, LogLine, LogStream, MAX_LOG_LINE_BYTES};
use mapi_tests::fake_cloudlogging::{LoggingFault, task_entry};
use mapi_tests::fake_cloudrun::FakeCloudRun;
use serde_json::{Value, json};

struct Rig {
    clock: Arc<VirtualClock>,
    fake: FakeCloudRun,
    executor: CloudRunJobsExecutor,
    _driver: tokio::task::JoinHandle<()>,
}

async fn rig() -> Rig {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let (fake, settings) = mapi_tests::fake_cloudrun::without_processes(clock.clone()).await;
    let executor =
        CloudRunJobsExecutor::new(settings, Credentials::Anonymous, clock.clone(), Default::default())
            .await
            .expect("executor");
    Rig { _driver: mapi_tests::fake_cloudrun::drive(clock.clone()), clock, fake, executor }
}

impl Rig {
    /// A new execution of `tasks` tasks (nothing runs: the test writes its output).
    async fn execution(&self, seq: u8, tasks: u32) -> ExecutionHandle {
        self.executor.submit(&attempt(seq, Duration::from_secs(600), tasks)).await.expect("submit")
    }

    async fn created(&self, handle: &ExecutionHandle) -> Timestamp {
        self.executor.status(handle).await.expect("status").created
    }

    /// Writes `(insertId, text)` of task 0's stdout at `at`.
    fn write_at(&self, handle: &ExecutionHandle, at: Timestamp, lines: &[(&str, &str)]) {
        for (id, text) in lines {
            self.fake.logging.write(task_entry(&handle.0, 0, LogStream::Stdout, &at.to_rfc3339(), id, text));
        }
    }

    /// Every page from `cursor` in pages of `limit`: the lines and the cursor after the last.
    async fn read_all(
        &self,
        handle: &ExecutionHandle,
        cursor: Option<String>,
        limit: usize,
    ) -> (Vec<LogLine>, String) {
        let (mut lines, mut cursor) = (Vec::new(), cursor);
        for _ in 0..100 {
            let page = self.executor.logs(handle, cursor.as_deref(), limit).await.expect("logs");
            assert!(page.lines.len() <= limit, "a page holds at most the limit");
            lines.extend(page.lines);
            cursor = Some(page.cursor);
            if !page.more {
                return (lines, cursor.unwrap_or_default());
            }
        }
        panic!("the pages never ended")
    }
}

fn texts(lines: &[LogLine]) -> Vec<&str> {
    lines.iter().map(|l| l.text.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_sharing_a_timestamp_are_neither_lost_nor_repeated_across_cursors() {
    let r = rig().await;
    let h = r.execution(1, 1).await;
    let created = r.created(&h).await;
    let (t1, t2) = (created + Duration::from_secs(1), created + Duration::from_secs(2));
    // Written out of insertId order: Logging lists equal timestamps by insertId.
    r.write_at(&h, t1, &[("c", "c"), ("a", "a"), ("e", "e"), ("b", "b"), ("d", "d")]);
    r.write_at(&h, t2, &[("x1", "x1"), ("x0", "x0")]);
    let expected = ["a", "b", "c", "d", "e", "x0", "x1"];
    let (whole, _) = r.read_all(&h, None, 1000).await;
    assert_eq!(texts(&whole), expected);
    assert!(whole.iter().all(|l| l.task == 0 && l.stream == LogStream::Stdout));
    assert_eq!(whole[0].at, Some(t1));
    for limit in [1, 2, 3, 6] {
        let (paged, _) = r.read_all(&h, None, limit).await;
        assert_eq!(paged, whole, "pages of {limit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cursor_after_the_end_picks_up_what_is_written_later() {
    let r = rig().await;
    let h = r.execution(2, 1).await;
    let created = r.created(&h).await;
    let t = created + Duration::from_secs(5);
    r.write_at(&h, t, &[("m0", "first"), ("m1", "second")]);
    let (lines, end) = r.read_all(&h, None, 10).await;
    assert_eq!(texts(&lines), ["first", "second"]);
    let idle = r.executor.logs(&h, Some(&end), 10).await.expect("logs");
    assert!(idle.lines.is_empty() && !idle.more, "nothing new yet: {idle:?}");
    // One more at the last entry's very timestamp (a later insertId), one later still.
    r.write_at(&h, t, &[("m2", "third")]);
    r.write_at(&h, t + Duration::from_millis(1), &[("a0", "fourth")]);
    for limit in [1, 10] {
        let (later, _) = r.read_all(&h, Some(end.clone()), limit).await;
        assert_eq!(texts(&later), ["third", "fourth"], "pages of {limit}");
    }
    let (_, end) = r.read_all(&h, Some(end), 10).await;
    let after = r.executor.logs(&h, Some(&end), 10).await.expect("logs");
    assert!(after.lines.is_empty() && !after.more, "{after:?}");
    let filter = r.fake.logging.calls().last().map(|c| c.body["filter"].clone()).unwrap_or_default();
    assert_eq!(
        bound_of(&filter),
        Some(t + Duration::from_millis(1)),
        "a follower queries from its last entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_text_payloads_render_as_the_lines_printed() {
    let r = rig().await;
    let h = r.execution(3, 2).await;
    let at = r.created(&h).await + Duration::from_secs(1);
    let json_line = r#"{"mapi_event":{"kind":"started","seq":1},"b":[1,2.5,null]}"#;
    let long = "é".repeat(MAX_LOG_LINE_BYTES);
    r.fake.logging.write_line(&h.0, 0, LogStream::Stdout, at, json_line);
    r.fake.logging.write_line(&h.0, 1, LogStream::Stderr, at, "plain text {not json");
    r.fake.logging.write_line(&h.0, 1, LogStream::Stdout, at, &long);
    let kept = r.fake.logging.entries();
    assert!(kept[0].get("jsonPayload").is_some() && kept[1].get("textPayload").is_some(), "{kept:#?}");
    let page = r.executor.logs(&h, None, 10).await.expect("logs");
    assert_eq!(page.lines.len(), 3, "{page:?}");
    let (json, text, cut) = (&page.lines[0], &page.lines[1], &page.lines[2]);
    assert!(!json.text.contains('\n'), "one line: {}", json.text);
    let parsed: Value = serde_json::from_str(&json.text).expect("the line is JSON");
    assert_eq!(parsed, serde_json::from_str::<Value>(json_line).expect("json"));
    assert_eq!((json.task, json.stream, json.at), (0, LogStream::Stdout, Some(at)));
    assert_eq!((text.task, text.stream, text.text.as_str()), (1, LogStream::Stderr, "plain text {not json"));
    assert!(cut.text.ends_with('…') && cut.text.len() <= MAX_LOG_LINE_BYTES + 3, "{}", cut.text.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_refused_unavailable_and_lost_answers_are_unavailable_and_the_next_call_works() {
    let r = rig().await;
    let h = r.execution(4, 1).await;
    r.write_at(&h, r.created(&h).await, &[("i0", "hello")]);
    for fault in
        [LoggingFault::Throttle, LoggingFault::Forbidden, LoggingFault::Unavailable, LoggingFault::Drop]
    {
        r.fake.logging.fail_next(fault, 1);
        let failed = r.executor.logs(&h, None, 10).await;
        match failed {
            Err(ExecutorError::Unavailable(m)) => {
                assert!(m.to_string().contains("Cloud Logging"), "{fault:?}: {m}")
            }
            other => panic!("{fault:?}: {other:?}"),
        }
        let page = r.executor.logs(&h, None, 10).await.expect("the next call works");
        assert_eq!(texts(&page.lines), ["hello"], "{fault:?}");
    }
    let statuses: Vec<u16> = r.fake.logging.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 200, 403, 200, 503, 200, 200, 200], "the lost answer was a 200 cut short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_cursors_are_refused_and_an_expired_page_token_reads_on_from_the_position() {
    let r = rig().await;
    let (h, other) = (r.execution(5, 1).await, r.execution(6, 1).await);
    let at = r.created(&h).await + Duration::from_secs(1);
    r.write_at(&h, at, &[("0", "l0"), ("1", "l1"), ("2", "l2"), ("3", "l3"), ("4", "l4")]);
    let first = r.executor.logs(&h, None, 2).await.expect("logs");
    assert_eq!((texts(&first.lines), first.more), (vec!["l0", "l1"], true));
    let half = &first.cursor[..first.cursor.len() / 2];
    for forged in ["not-a-cursor!", "", half] {
        let got = r.executor.logs(&h, Some(forged), 2).await;
        assert!(matches!(got, Err(ExecutorError::Cursor(_))), "{forged:?}: {got:?}");
    }
    let got = r.executor.logs(&other, Some(&first.cursor), 2).await;
    assert!(matches!(got, Err(ExecutorError::Cursor(_))), "another execution's cursor: {got:?}");
    r.fake.logging.expire_page_tokens();
    let calls_before = r.fake.logging.calls().len();
    let (rest, _) = r.read_all(&h, Some(first.cursor), 2).await;
    assert_eq!(texts(&rest), ["l2", "l3", "l4"]);
    let statuses: Vec<u16> = r.fake.logging.calls()[calls_before..].iter().map(|c| c.status).collect();
    assert_eq!(statuses.first(), Some(&400), "the expired token was refused: {statuses:?}");
}

/// The lower bound of a filter's `timestamp>="…"`.
fn bound_of(filter: &Value) -> Option<Timestamp> {
    let rest = filter.as_str()?.split_once("timestamp>=\"")?.1;
    Timestamp::parse_rfc3339(rest.split_once('"')?.0).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_names_the_execution_both_logs_and_a_timestamp_bound() {
    let r = rig().await;
    let h = r.execution(7, 1).await;
    let created = r.created(&h).await;
    r.executor.logs(&h, None, 7).await.expect("logs");
    let calls = r.fake.logging.calls();
    assert_eq!(calls.len(), 1);
    let (body, query) = (&calls[0].body, &calls[0].query);
    assert!(
        query.contains("%24alt=json%3Benum-encoding%3Dint") || query.contains("$alt=json;enum-encoding=int"),
        "{query}"
    );
    assert_eq!(body["resourceNames"], json!(["projects/fake-project"]));
    assert_eq!((&body["orderBy"], &body["pageSize"]), (&json!("timestamp asc"), &json!(7)));
    let filter = body["filter"].as_str().expect("a filter");
    let (job, short) = {
        let parts: Vec<&str> = h.0.split('/').collect();
        (parts[5], parts[7])
    };
    for part in [
        "resource.type=\"cloud_run_job\"".to_owned(),
        format!("resource.labels.job_name=\"{job}\""),
        format!("labels.\"run.googleapis.com/execution_name\"=\"{short}\""),
        "logName=\"projects/fake-project/logs/run.googleapis.com%2Fstdout\"".to_owned(),
        "logName=\"projects/fake-project/logs/run.googleapis.com%2Fstderr\"".to_owned(),
    ] {
        assert!(filter.contains(&part), "{part} not in {filter}");
    }
    assert_eq!(bound_of(&body["filter"]), Some(created - Duration::from_secs(60)), "{filter}");
    assert!(r.clock.now() >= created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_foreign_executions_print_nothing_and_ask_logging_nothing() {
    let r = rig().await;
    let h = r.execution(8, 1).await;
    let unknown = ExecutionHandle(format!("{}-gone", h.0));
    let foreign = ExecutionHandle("projects/other/locations/europe-west1/jobs/j/executions/j-1".to_owned());
    for handle in [unknown, foreign, ExecutionHandle("exec-0-00000000".to_owned())] {
        let page = r.executor.logs(&handle, None, 10).await.expect("logs");
        assert!(page.lines.is_empty() && !page.more, "{handle}: {page:?}");
        let again = r.executor.logs(&handle, Some(&page.cursor), 10).await.expect("its own cursor");
        assert!(again.lines.is_empty(), "{handle}");
    }
    assert!(r.fake.logging.calls().is_empty(), "{:?}", r.fake.logging.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_refuses_what_it_cannot_parse_in_googles_error_shape() {
    let r = rig().await;
    let http = reqwest::Client::new();
    let url = format!("{}/v2/entries:list", r.fake.logging.url);
    let ok = json!({"resourceNames": ["projects/fake-project"], "filter": "(a=\"1\" OR b.\"c/d\">=\"2\") AND e!=\"3\""});
    let resp = http.post(&url).json(&ok).send().await.expect("post");
    assert_eq!(resp.status(), 200);
    for bad in [
        json!({"resourceNames": ["projects/fake-project"], "filter": "NOT resource.type=\"x\""}),
        json!({"resourceNames": ["projects/fake-project"], "filter": "labels.x:\"y\""}),
        json!({"resourceNames": ["projects/fake-project"], "filter": "timestamp>=2026-01-01"}),
        json!({"resourceNames": ["projects/fake-project"], "filter": "a=\"1\" b=\"2\""}),
        json!({"resourceNames": ["projects/fake-project"], "filter": "(a=\"1\""}),
        json!({"resourceNames": ["projects/fake-project"], "orderBy": "insertId"}),
        json!({"resourceNames": ["projects/fake-project"], "pageSize": 1001}),
        json!({"resourceNames": ["projects/fake-project"], "pageToken": "made-up"}),
        json!({"resourceNames": ["projects/fake-project"], "unknown": 1}),
        json!({"filter": "a=\"1\""}),
    ] {
        let resp = http.post(&url).json(&bad).send().await.expect("post");
        assert_eq!(resp.status(), 400, "{bad}");
        let v: Value = resp.json().await.expect("json");
        assert_eq!(
            (&v["error"]["code"], &v["error"]["status"]),
            (&json!(400), &json!("INVALID_ARGUMENT")),
            "{v}"
        );
    }
}
