//! Application Default Credentials on Cloud Run come from the metadata
//! server. `google-cloud-auth` honours `GCE_METADATA_HOST`, so a cloud
//! client built with `Credentials::ApplicationDefault` (what the platform
//! uses towards Google's endpoints) is checked here against a fake metadata
//! server: the token it mints is the bearer the API receives.
//!
//! ADC reads the process environment, so the client runs in a child
//! process (this test binary again, with `MAPI_ADC_CHILD` set) whose
//! environment has no other credentials: no `GOOGLE_APPLICATION_CREDENTIALS`
//! and a `HOME` without gcloud's file.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use mapi_clock::SystemClock;
use mapi_cloudtasks::{CloudTasksQueue, Credentials, Settings};
use mapi_queue::{NewTask, QueueName, TaskName, TaskQueue};
use serde_json::json;

const CHILD: &str = "MAPI_ADC_CHILD";
const TOKEN: &str = "ya29.fake-metadata-token";

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// In the child: one task created with ADC against `MAPI_ADC_API`.
async fn child() {
    let api = std::env::var("MAPI_ADC_API").expect("the fake API's address");
    let queues = mapi_platform::job_queue_configs().expect("queues");
    let settings = Settings {
        project: "p".into(),
        location: "europe-west1".into(),
        targets: queues
            .iter()
            .map(|q| (q.name.as_str().to_owned(), "https://submit.example".to_owned()))
            .collect(),
        service_account_email: "tasks@p.iam.gserviceaccount.com".into(),
        audience: "https://submit.example".into(),
        endpoint: Some(api),
        queues,
    };
    let q = CloudTasksQueue::new(settings, Credentials::ApplicationDefault, Arc::new(SystemClock))
        .await
        .expect("a client with Application Default Credentials");
    let task =
        NewTask::new(QueueName::new(mapi_jobs::tasks::FANOUT_QUEUE).expect("queue"), "/internal/x", "{}")
            .named(TaskName::new("adc-1").expect("name"));
    q.create(task).await.expect("created with the metadata server's token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_client_with_adc_takes_its_token_from_the_metadata_server() {
    if std::env::var_os(CHILD).is_some() {
        return child().await;
    }
    type Seen = Arc<Mutex<Vec<String>>>;
    let (metadata_seen, api_seen): (Seen, Seen) = Default::default();
    let m = metadata_seen.clone();
    let metadata = axum::Router::new().fallback(move |uri: axum::http::Uri, headers: HeaderMap| {
        let m = m.clone();
        async move {
            m.lock().expect("seen").push(format!("{} {}", uri.path(), header(&headers, "metadata-flavor")));
            if header(&headers, "metadata-flavor") != "Google" {
                return (StatusCode::FORBIDDEN, axum::Json(json!({})));
            }
            if uri.path() == "/computeMetadata/v1/instance/service-accounts/default/token" {
                let token = json!({"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"});
                return (StatusCode::OK, axum::Json(token));
            }
            (StatusCode::NOT_FOUND, axum::Json(json!({})))
        }
    });
    let a = api_seen.clone();
    let api = axum::Router::new().route(
        "/v2/projects/{project}/locations/{location}/queues/{queue}/tasks",
        axum::routing::post(move |Path((p, l, q)): Path<(String, String, String)>, headers: HeaderMap| {
            let a = a.clone();
            async move {
                a.lock().expect("seen").push(header(&headers, "authorization"));
                let name = format!("projects/{p}/locations/{l}/queues/{q}/tasks/adc-1");
                let now = "2026-11-30T12:00:00Z";
                axum::Json(json!({"name": name, "createTime": now, "scheduleTime": now}))
            }
        }),
    );
    let serve = |router: axum::Router| async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(l, router).await });
        addr
    };
    let (metadata_addr, api_addr) = (serve(metadata).await, serve(api).await);
    let home = tempfile::tempdir().expect("an empty HOME");
    let exe = std::env::current_exe().expect("this test binary");
    let out = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "adc::a_cloud_client_with_adc_takes_its_token_from_the_metadata_server",
            "--nocapture",
        ])
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("HOME", home.path())
        .env(CHILD, "1")
        .env("GCE_METADATA_HOST", metadata_addr.to_string())
        .env("MAPI_ADC_API", format!("http://{api_addr}"))
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("the child ends").expect("run");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let api_seen: Vec<String> = api_seen.lock().expect("seen").clone();
    assert_eq!(api_seen, vec![format!("Bearer {TOKEN}")], "the API got the metadata server's token");
    let metadata_seen: Vec<String> = metadata_seen.lock().expect("seen").clone();
    assert!(
        metadata_seen
            .iter()
            .any(|s| s.starts_with("/computeMetadata/v1/instance/service-accounts/default/token")),
        "{metadata_seen:?}"
    );
    assert!(
        metadata_seen.iter().all(|s| s.ends_with(" Google")),
        "every request names the flavor: {metadata_seen:?}"
    );
}
