//! FakeCloudRunServices: the Cloud Run Admin API v2 **Services** (and
//! their Revisions and operations) as REST/JSON on 127.0.0.1, written from
//! Google's REST reference for `projects.locations.services`, not from the
//! client crate's types.
//!
//! - **Resources**: services with generations, labels, a template, traffic
//!   (by revision, or the latest ready one) and tags; `create`, `get`,
//!   `patch` (whole, or the top-level fields of `updateMask`), `delete`,
//!   `list` (paged), `revisions.list` (of one service or of `-`, every
//!   service), `revisions.get`, `operations.get`. A new template makes a
//!   revision (named by `template.revision`, else generated; a name reused
//!   with another template is 409). Bodies are checked the way the API does
//!   (unknown fields, a split not of 100 %, a revision that does not exist,
//!   an L4 outside the GPU regions: 400). Enums are answered as numbers
//!   when the client asks `$alt=json;enum-encoding=int`, as names otherwise,
//!   and read in either spelling.
//! - **Rollouts**: `reconciling` stays true until the newest revision is
//!   ready or failed; `terminalCondition` is then `CONDITION_SUCCEEDED`, or
//!   `CONDITION_FAILED` with Cloud Run's message; `trafficStatuses` list
//!   the ready revisions of the split, tagged ones with their tag URL.
//! - **Revisions are real processes**: the configured program, its leading
//!   arguments then the container's `args`, with the container's env,
//!   `PORT` a free loopback port, `K_SERVICE`/`K_REVISION`. A revision's
//!   filesystem is a directory of its own where each Cloud Storage volume's
//!   mount path is a link to the directory the test registered for its
//!   bucket ([`FakeCloudRunServices::with_bucket_dir`], or a copy of an object
//!   store's objects at their keys, [`FakeCloudRunServices::with_bucket_store`]; `only-dir=X` honoured
//!   as `dir/X`); env values naming a path at or above a mount are rewritten
//!   into that directory (a process cannot see `/objects`). Ready when the
//!   startup probe's path answers 2xx (polled every 50 ms for the probe's
//!   whole budget); failed when the process exits first ("The user-provided
//!   container failed to start and listen on the port…" with its last
//!   stderr line), or when its image is unpullable.
//! - **Serving**: each service URL and each tag URL is a listener of its
//!   own (`http://127.0.0.1:{port}`), a reverse proxy that splits by
//!   percent (deterministically spread), honours tags, starts a new
//!   instance when the last one died, and enforces IAM: a service without
//!   `invokerIamDisabled` answers 403 unless `Authorization: Bearer <token>`
//!   passes the test's check for the service URL as audience.
//! - **Faults** on demand ([`Fault`]): 429 with `Retry-After`, 503, an
//!   answer lost after the change was made, an image that cannot be pulled,
//!   a revision whose container exits once ready.
//!
//! Every child is stopped when the fake is dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use mapi_clock::{Clock, SystemClock};
use mapi_cloudrun::services::{IdToken, IdTokens};
use mapi_domain::Timestamp;
use mapi_executor::local::layout::Command;
use mapi_hosting::HostingError;
use mapi_objects::ObjectStore;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

pub use crate::fake_cloudrun::Call;
use crate::fake_cloudrun::{google_error, lost};

/// Regions where the fake accepts an L4: those where Cloud Run offers L4 GPUs.
pub const GPU_REGIONS: &[&str] =
    &["asia-southeast1", "asia-south1", "europe-west1", "europe-west4", "us-central1", "us-east4"];

/// How often the startup probe is tried (the fake does not wait the probe's period).
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// Decides whether a bearer token may invoke a service: `(token, audience)`.
pub type InvokerCheck = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// A fault to inject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next Admin API call answers 429 with this Retry-After (seconds), changing nothing.
    Throttle { retry_after_s: u64 },
    /// The next Admin API call answers 503, changing nothing.
    Unavailable,
    /// The next call that changes something (create, patch, delete) makes
    /// its change, then its answer is lost.
    LoseAnswer,
    /// The next revision's image cannot be pulled.
    ImagePull,
    /// The next revision's container exits once it is ready (a request
    /// after that starts another instance, as Cloud Run does).
    CrashAfterReady,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cond {
    Reconciling,
    Failed,
    Succeeded,
}

const COND_NAMES: [&str; 5] = [
    "STATE_UNSPECIFIED",
    "CONDITION_PENDING",
    "CONDITION_RECONCILING",
    "CONDITION_FAILED",
    "CONDITION_SUCCEEDED",
];
const TRAFFIC_NAMES: [&str; 3] = [
    "TRAFFIC_TARGET_ALLOCATION_TYPE_UNSPECIFIED",
    "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST",
    "TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION",
];

impl Cond {
    fn index(self) -> usize {
        match self {
            Cond::Reconciling => 2,
            Cond::Failed => 3,
            Cond::Succeeded => 4,
        }
    }
}

/// How enums are spelled in an answer.
#[derive(Clone, Copy, Debug)]
struct Enc {
    ints: bool,
}

impl Enc {
    fn spell(self, names: &'static [&'static str], index: usize) -> Value {
        if self.ints { json!(index) } else { json!(names[index]) }
    }
}

/// The index of an enum given as a number or by name.
fn enum_index(v: &Value, names: &[&str]) -> Option<usize> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|n| *n < names.len()),
        Value::String(s) => names.iter().position(|n| n == s),
        Value::Null => Some(0),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RevState {
    Pending,
    Ready,
    Failed(String),
}

#[derive(Debug)]
struct Instance {
    child: tokio::process::Child,
    port: u16,
    started: Timestamp,
}

#[derive(Debug)]
struct Rev {
    /// Full name.
    name: String,
    id: String,
    service_id: String,
    location: String,
    uid: String,
    template: Value,
    created: Timestamp,
    state: RevState,
    instance: Option<Instance>,
    crash_after_ready: bool,
    starts: u32,
    last_line: Arc<Mutex<String>>,
}

#[derive(Debug)]
struct Listener {
    url: String,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Svc {
    name: String,
    id: String,
    location: String,
    uid: String,
    generation: i64,
    observed: i64,
    /// The writable fields as last given (labels, template, traffic, …).
    spec: Map<String, Value>,
    created: Timestamp,
    updated: Timestamp,
    reconciling: bool,
    terminal: (Cond, String),
    latest_created: String,
    main: Listener,
    tags: BTreeMap<String, Listener>,
    served: u64,
}

/// A registered image: its program and its config's variables.
#[derive(Debug, Clone)]
struct Image {
    program: std::path::PathBuf,
    env: Vec<(String, String)>,
}

/// A service's instances' lifetimes, by its id (see [`FakeCloudRunServices::lifetimes`]).
pub type Lifetimes = Arc<dyn Fn(&str) -> Vec<(Timestamp, Option<Timestamp>)> + Send + Sync>;

#[derive(Default)]
struct FakeState {
    services: BTreeMap<String, Svc>,
    revisions: BTreeMap<String, Rev>,
    /// Operation name → service full name.
    operations: BTreeMap<String, String>,
    faults: VecDeque<Fault>,
    buckets: BTreeMap<String, Bucket>,
    unpullable: BTreeSet<String>,
    /// Images other than the platform's model server: what their containers run.
    images: BTreeMap<String, Image>,
    /// Secret Manager: secret id → its latest value.
    secrets: BTreeMap<String, String>,
    /// Instances gone with their revisions: (service id, started, stopped).
    ended: Vec<(String, Timestamp, Timestamp)>,
    check: Option<InvokerCheck>,
    calls: Vec<Call>,
    serial: u64,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeState")
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .field("revisions", &self.revisions.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Shared {
    project: String,
    server: Command,
    state: Mutex<FakeState>,
    http: reqwest::Client,
    root: tempfile::TempDir,
    cold_starts: tokio::sync::Mutex<()>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The fake service. Dropping it stops every revision's process.
#[derive(Debug)]
pub struct FakeCloudRunServices {
    /// The Admin API's root (`MAPI_ENDPOINTS_API_ENDPOINT`).
    pub url: String,
    pub project: String,
    shared: Arc<Shared>,
    server_task: JoinHandle<()>,
}

impl Drop for FakeCloudRunServices {
    fn drop(&mut self) {
        self.server_task.abort();
        let mut s = self.shared.lock();
        for r in s.revisions.values_mut() {
            if let Some(i) = &mut r.instance {
                let _ = i.child.start_kill();
            }
        }
        for svc in s.services.values() {
            svc.main.task.abort();
            svc.tags.values().for_each(|l| l.task.abort());
        }
        s.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// What a bucket's Cloud Storage volumes show.
#[derive(Clone, Debug)]
enum Bucket {
    Dir(PathBuf),
    Store(Arc<dyn ObjectStore>),
}

/// Writes every object of `store` under `prefix` to `dir`, at its key.
async fn copy_objects(store: &dyn ObjectStore, prefix: &str, dir: &Path) -> Result<(), String> {
    let mut token = None;
    loop {
        let page = store.list(prefix, token.as_deref(), 1000).await.map_err(|e| e.to_string())?;
        for meta in page.objects {
            let (_, bytes) = store.get(&meta.key, Some(meta.generation)).await.map_err(|e| e.to_string())?;
            let path = dir.join(meta.key.as_str());
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        }
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return Ok(()),
        }
    }
}

fn now() -> Timestamp {
    SystemClock.now()
}

async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

impl FakeCloudRunServices {
    /// Serves the Admin API for `project` (any location) on 127.0.0.1:0;
    /// revisions run `server` (its args, then the container's).
    pub async fn start(project: &str, server: Command) -> FakeCloudRunServices {
        let (listener, url) = bind().await;
        let shared = Arc::new(Shared {
            project: project.to_owned(),
            server,
            state: Mutex::new(FakeState::default()),
            http: reqwest::Client::builder().no_proxy().build().expect("client"),
            root: tempfile::tempdir().expect("tempdir"),
            cold_starts: tokio::sync::Mutex::new(()),
        });
        let app = Router::new().fallback(admin).with_state(shared.clone());
        let server_task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeCloudRunServices { url, project: project.to_owned(), shared, server_task }
    }

    /// Cloud Storage volumes of `bucket` show `dir`.
    pub fn with_bucket_dir(self, bucket: &str, dir: &Path) -> Self {
        self.shared.lock().buckets.insert(bucket.to_owned(), Bucket::Dir(dir.to_owned()));
        self
    }

    /// Cloud Storage volumes of `bucket` show the objects of `store`, each
    /// a file at its key, as Cloud Storage FUSE does (read when an
    /// instance starts: a started instance sees no later object).
    pub fn with_bucket_store(self, store: Arc<dyn ObjectStore>) -> Self {
        self.shared.lock().buckets.insert(store.bucket().to_owned(), Bucket::Store(store));
        self
    }

    /// Containers of `image` run `program` with the image's `env` (a tenant's own image); any
    /// other image runs the platform's model server.
    pub fn with_image(self, image: &str, program: &Path, env: &[(&str, &str)]) -> Self {
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.shared.lock().images.insert(image.to_owned(), Image { program: program.to_owned(), env });
        self
    }

    /// The lifetimes of a service's instances, by its id: (started, stopped; `None` while up):
    /// what Cloud Monitoring's `container/instance_count` samples.
    pub fn lifetimes(&self) -> Lifetimes {
        let shared = self.shared.clone();
        Arc::new(move |service: &str| {
            let s = shared.lock();
            let ended = s.ended.iter().filter(|(id, ..)| id == service).map(|(_, a, b)| (*a, Some(*b)));
            let up = s.revisions.values().filter(|r| r.service_id == service);
            ended.chain(up.filter_map(|r| r.instance.as_ref().map(|i| (i.started, None)))).collect()
        })
    }

    /// Secret Manager holds secret `id` (in the fake's project) with `value` as its only version.
    pub fn with_secret(self, id: &str, value: &str) -> Self {
        self.shared.lock().secrets.insert(id.to_owned(), value.to_owned());
        self
    }

    /// Revisions of `image` fail as an image that cannot be pulled.
    pub fn with_unpullable(self, image: &str) -> Self {
        self.shared.lock().unpullable.insert(image.to_owned());
        self
    }

    /// Private services admit a bearer token when `check(token, audience)`.
    pub fn with_invoker_check(self, check: InvokerCheck) -> Self {
        self.shared.lock().check = Some(check);
        self
    }

    /// Private services admit the tokens `issuer` minted for their URL.
    pub fn accepting(self, issuer: &Arc<FakeIdTokens>) -> Self {
        let issuer = issuer.clone();
        self.with_invoker_check(Arc::new(move |token, audience| issuer.verifies(token, audience)))
    }

    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.push_back(fault);
    }

    /// Faults not consumed yet.
    pub fn pending_faults(&self) -> usize {
        self.shared.lock().faults.len()
    }

    /// Every Admin API call answered, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// The full names of the services that exist.
    pub fn services(&self) -> Vec<String> {
        self.shared.lock().services.keys().cloned().collect()
    }

    /// The names of a service's revisions (by its id), oldest first.
    pub fn revisions_of(&self, service: &str) -> Vec<String> {
        let s = self.shared.lock();
        let mut revs: Vec<&Rev> = s.revisions.values().filter(|r| r.service_id == service).collect();
        revs.sort_by_key(|r| (r.created, r.uid.clone()));
        revs.iter().map(|r| r.id.clone()).collect()
    }

    /// How many instances of a revision (by its id) were started.
    pub fn instance_starts(&self, revision: &str) -> u32 {
        self.shared.lock().revisions.values().find(|r| r.id == revision).map_or(0, |r| r.starts)
    }

    /// Revision processes alive now.
    pub fn running(&self) -> usize {
        let mut s = self.shared.lock();
        s.revisions
            .values_mut()
            .filter_map(|r| r.instance.as_mut())
            .filter_map(|i| i.child.try_wait().ok())
            .filter(Option::is_none)
            .count()
    }
}

// ---------------------------------------------------------------- the Admin API

fn bad(message: &str) -> Response {
    google_error(400, "INVALID_ARGUMENT", message)
}

fn operation(shared: &Shared, s: &mut FakeState, service: &str, done: bool, enc: Enc) -> Value {
    s.serial += 1;
    let location = s.services.get(service).map(|v| v.location.clone()).unwrap_or_default();
    let name = format!("projects/{}/locations/{location}/operations/op-{:06}", shared.project, s.serial);
    s.operations.insert(name.clone(), service.to_owned());
    let mut meta = s.services.get(service).map(|v| service_json(s, v, enc)).unwrap_or_else(|| json!({}));
    meta["@type"] = json!("type.googleapis.com/google.cloud.run.v2.Service");
    let mut op = json!({"name": name, "metadata": meta, "done": done});
    if done {
        op["response"] = meta;
    }
    op
}

async fn admin(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    body: bytes::Bytes,
) -> Response {
    let body_json: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return bad(&format!("Invalid JSON payload received. {e}")),
        }
    };
    let enc = Enc { ints: query.get("$alt").is_some_and(|a| a.contains("enum-encoding=int")) };
    let resp = dispatch(&shared, &method, uri.path(), &query, &body_json, enc).await;
    shared.lock().calls.push(Call {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        body: body_json,
        status: resp.status().as_u16(),
    });
    resp
}

async fn dispatch(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    body: &Value,
    enc: Enc,
) -> Response {
    let changes = matches!(*method, Method::POST | Method::PATCH | Method::DELETE);
    let fault = {
        let mut s = shared.lock();
        let at = s.faults.iter().position(|f| match f {
            Fault::Throttle { .. } | Fault::Unavailable => true,
            Fault::LoseAnswer => changes,
            Fault::ImagePull | Fault::CrashAfterReady => false,
        });
        at.and_then(|i| s.faults.remove(i))
    };
    match fault {
        Some(Fault::Throttle { retry_after_s }) => {
            let mut r = google_error(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Write requests' and limit 'Write requests per minute per region' of service 'run.googleapis.com'",
            );
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                r.headers_mut().insert("retry-after", v);
            }
            return r;
        }
        Some(Fault::Unavailable) => {
            return google_error(503, "UNAVAILABLE", "The service is currently unavailable.");
        }
        _ => {}
    }
    let Some(rest) = path.strip_prefix("/v2/projects/") else {
        return google_error(404, "NOT_FOUND", &format!("no such method: {method} {path}"));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let (project, location, rest) = match parts.as_slice() {
        [p, "locations", l, rest @ ..] => (*p, *l, rest),
        _ => return google_error(404, "NOT_FOUND", &format!("no such resource: {path}")),
    };
    if project != shared.project {
        return google_error(
            403,
            "PERMISSION_DENIED",
            &format!(
                "Permission 'run.services.{}' denied on resource 'projects/{project}/locations/{location}/services' (or resource may not exist).",
                if changes { "update" } else { "get" }
            ),
        );
    }
    if query.get("validateOnly").is_some_and(|v| v == "true") {
        return bad("validateOnly is not supported by this fake");
    }
    let parent = format!("projects/{project}/locations/{location}");
    let resp = match (method.as_str(), rest) {
        ("POST", ["services"]) => {
            create(shared, &parent, location, query.get("serviceId").map_or("", String::as_str), body, enc)
                .await
        }
        ("GET", ["services"]) => list_services(shared, &parent, query, enc),
        ("GET", ["services", id]) => {
            let s = shared.lock();
            match s.services.get(&format!("{parent}/services/{id}")) {
                Some(v) => axum::Json(service_json(&s, v, enc)).into_response(),
                None => not_found(id),
            }
        }
        ("PATCH", ["services", id]) => patch(shared, &parent, location, id, query, body, enc).await,
        ("DELETE", ["services", id]) => delete(shared, &format!("{parent}/services/{id}"), id, enc),
        ("GET", ["services", id, "revisions"]) => list_revisions(shared, location, id, enc),
        ("GET", ["services", id, "revisions", r]) => {
            let s = shared.lock();
            match s.revisions.get(&format!("{parent}/services/{id}/revisions/{r}")) {
                Some(rev) => axum::Json(revision_json(rev, enc)).into_response(),
                None => google_error(404, "NOT_FOUND", &format!("Revision '{r}' does not exist.")),
            }
        }
        ("GET", ["operations", op]) => get_operation(shared, &format!("{parent}/operations/{op}"), enc),
        _ => google_error(404, "NOT_FOUND", &format!("no such method: {method} {path}")),
    };
    if fault == Some(Fault::LoseAnswer) && resp.status().is_success() {
        return lost();
    }
    resp
}

fn not_found(id: &str) -> Response {
    google_error(404, "NOT_FOUND", &format!("Resource '{id}' of kind 'SERVICE' does not exist."))
}

/// The Service fields a client may send (REST reference), output-only ones included (ignored).
const SERVICE_FIELDS: &[&str] = &[
    "name",
    "description",
    "uid",
    "generation",
    "labels",
    "annotations",
    "createTime",
    "updateTime",
    "deleteTime",
    "expireTime",
    "creator",
    "lastModifier",
    "client",
    "clientVersion",
    "ingress",
    "launchStage",
    "binaryAuthorization",
    "template",
    "traffic",
    "scaling",
    "invokerIamDisabled",
    "defaultUriDisabled",
    "urls",
    "iapEnabled",
    "multiRegionSettings",
    "customAudiences",
    "observedGeneration",
    "terminalCondition",
    "conditions",
    "latestReadyRevision",
    "latestCreatedRevision",
    "trafficStatuses",
    "uri",
    "satisfiesPzs",
    "threatDetectionEnabled",
    "buildConfig",
    "reconciling",
    "etag",
];
/// The fields kept as the service's spec.
const WRITABLE: &[&str] = &[
    "description",
    "labels",
    "annotations",
    "client",
    "clientVersion",
    "ingress",
    "launchStage",
    "binaryAuthorization",
    "template",
    "traffic",
    "scaling",
    "invokerIamDisabled",
    "defaultUriDisabled",
    "iapEnabled",
    "customAudiences",
];
/// The RevisionTemplate fields (REST reference).
const TEMPLATE_FIELDS: &[&str] = &[
    "revision",
    "labels",
    "annotations",
    "scaling",
    "vpcAccess",
    "timeout",
    "serviceAccount",
    "containers",
    "volumes",
    "executionEnvironment",
    "encryptionKey",
    "maxInstanceRequestConcurrency",
    "serviceMesh",
    "encryptionKeyRevocationAction",
    "encryptionKeyShutdownDuration",
    "sessionAffinity",
    "healthCheckDisabled",
    "nodeSelector",
    "gpuZonalRedundancyDisabled",
];

fn unknown_field(v: &Value, known: &[&str], at: &str) -> Option<String> {
    let obj = v.as_object()?;
    obj.keys()
        .find(|k| !known.contains(&k.as_str()))
        .map(|k| format!("Invalid JSON payload received. Unknown name \"{k}\" at '{at}': Cannot find field."))
}

fn valid_id(id: &str) -> bool {
    (1..=49).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && id.as_bytes()[0].is_ascii_lowercase()
        && !id.ends_with('-')
}

/// One traffic entry as given.
#[derive(Clone, Debug)]
struct Split {
    latest: bool,
    revision: String,
    percent: u64,
    tag: String,
}

fn splits(spec: &Map<String, Value>) -> Result<Vec<Split>, String> {
    let Some(traffic) = spec.get("traffic").and_then(Value::as_array).filter(|t| !t.is_empty()) else {
        return Ok(vec![Split { latest: true, revision: String::new(), percent: 100, tag: String::new() }]);
    };
    traffic
        .iter()
        .map(|t| {
            let kind = enum_index(&t["type"], &TRAFFIC_NAMES)
                .ok_or("traffic.type is not a TrafficTargetAllocationType")?;
            let revision = t["revision"].as_str().unwrap_or_default().to_owned();
            Ok(Split {
                latest: kind == 1 || (kind == 0 && revision.is_empty()),
                revision,
                percent: t["percent"].as_u64().unwrap_or(0),
                tag: t["tag"].as_str().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// Checks a service's spec: what the API refuses with 400. `revisions`
/// are the revision ids the traffic may name.
/// `Service.scaling`: its fields, and a minimum no greater than the
/// maximum (a maximum of 0 is none).
fn check_service_scaling(scaling: Option<&Value>) -> Result<(), String> {
    let Some(s) = scaling.filter(|s| !s.is_null()) else { return Ok(()) };
    let fields = &["minInstanceCount", "scalingMode", "maxInstanceCount", "manualInstanceCount"];
    if let Some(e) = unknown_field(s, fields, "service.scaling") {
        return Err(e);
    }
    let count = |k: &str| s[k].as_i64().unwrap_or(0);
    let (min, max) = (count("minInstanceCount"), count("maxInstanceCount"));
    if min < 0 || max < 0 {
        return Err("service.scaling: instance counts must not be negative".into());
    }
    if max > 0 && min > max {
        return Err(format!(
            "service.scaling: min_instance_count ({min}) must not exceed max_instance_count ({max})"
        ));
    }
    Ok(())
}

fn check_spec(
    spec: &Map<String, Value>,
    id: &str,
    location: &str,
    revisions: &[String],
) -> Result<(), String> {
    let template = spec.get("template").ok_or("service.template is required")?;
    if let Some(e) = unknown_field(template, TEMPLATE_FIELDS, "service.template") {
        return Err(e);
    }
    let containers = template["containers"].as_array().filter(|c| !c.is_empty());
    let containers = containers.ok_or("service.template.containers: at least one container is required")?;
    if containers.iter().any(|c| c["image"].as_str().is_none_or(str::is_empty)) {
        return Err("service.template.containers[0].image: the image is required".into());
    }
    if let Some(r) = template["revision"].as_str()
        && !r.starts_with(&format!("{id}-"))
    {
        return Err(format!(
            "service.template.revision: the revision name must be prefixed by the service name and '-' ('{id}-')"
        ));
    }
    let volumes: Vec<&str> =
        template["volumes"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    for c in containers {
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().unwrap_or_default();
            if !volumes.contains(&name) {
                return Err(format!(
                    "service.template.containers[0].volume_mounts: volume '{name}' not found"
                ));
            }
        }
    }
    if template["nodeSelector"]["accelerator"].as_str() == Some("nvidia-l4") {
        if !GPU_REGIONS.contains(&location) {
            return Err(format!("GPU type nvidia-l4 is not supported in region {location}."));
        }
        let limits = &containers[0]["resources"]["limits"];
        if limits["nvidia.com/gpu"].as_str() != Some("1") {
            return Err("service.template.containers[0].resources.limits: nvidia.com/gpu must be 1 with a GPU node selector".into());
        }
    }
    check_service_scaling(spec.get("scaling"))?;
    let traffic = splits(spec)?;
    let sum: u64 = traffic.iter().map(|t| t.percent).sum();
    if sum != 100 {
        return Err(format!(
            "service.traffic: the percents sum to {sum}; total traffic percentage must be 100"
        ));
    }
    let mut tags: Vec<&str> = traffic.iter().map(|t| t.tag.as_str()).filter(|t| !t.is_empty()).collect();
    tags.sort_unstable();
    if tags.windows(2).any(|w| w[0] == w[1]) {
        return Err("service.traffic: tags must be unique".into());
    }
    if let Some(t) = traffic.iter().find(|t| !t.latest && !revisions.contains(&t.revision)) {
        return Err(format!("service.traffic: Revision '{}' referenced in traffic not found", t.revision));
    }
    Ok(())
}

/// A container's variables: plain values, and Secret Manager references
/// resolved as Cloud Run does when an instance starts (a secret that does not
/// exist fails the revision, naming it).
fn env_of(
    container: &Value,
    project: &str,
    secrets: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, e) in container["env"].as_array().into_iter().flatten().enumerate() {
        let name = e["name"].as_str().unwrap_or_default().to_owned();
        let reference = &e["valueSource"]["secretKeyRef"];
        if reference.is_object() {
            let secret = reference["secret"].as_str().unwrap_or_default();
            let id = secret.rsplit('/').next().unwrap_or(secret);
            let version = reference["version"].as_str().unwrap_or("latest");
            let value = secrets.get(id).filter(|_| version == "latest" || version == "1").ok_or_else(|| {
                format!(
                    "spec.template.spec.containers[0].env[{i}].value_from.secret_key_ref.name: Secret projects/{project}/secrets/{id}/versions/{version} was not found"
                )
            })?;
            out.push((name, value.clone()));
        } else {
            out.push((name, e["value"].as_str().unwrap_or_default().to_owned()));
        }
    }
    Ok(out)
}

fn writable(body: &Value) -> Map<String, Value> {
    body.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| WRITABLE.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The newest ready revision of a service (by its full name).
fn latest_ready(s: &FakeState, service: &str) -> Option<String> {
    let prefix = format!("{service}/revisions/");
    s.revisions
        .values()
        .filter(|r| r.name.starts_with(&prefix) && r.state == RevState::Ready)
        .max_by_key(|r| (r.created, r.uid.clone()))
        .map(|r| r.id.clone())
}

fn revision_ids(s: &FakeState, service: &str) -> Vec<String> {
    s.revisions
        .values()
        .filter(|r| r.name.starts_with(&format!("{service}/")))
        .map(|r| r.id.clone())
        .collect()
}

async fn create(
    shared: &Arc<Shared>,
    parent: &str,
    location: &str,
    id: &str,
    body: &Value,
    enc: Enc,
) -> Response {
    if !valid_id(id) {
        return bad(&format!(
            "serviceId '{id}' must use lowercase letters, digits and hyphens, start with a letter, and be at most 49 characters"
        ));
    }
    if let Some(e) = unknown_field(body, SERVICE_FIELDS, "service") {
        return bad(&e);
    }
    let name = format!("{parent}/services/{id}");
    let spec = writable(body);
    let named: Vec<String> = named_revision(&spec).into_iter().collect();
    if let Err(e) = check_spec(&spec, id, location, &named) {
        return bad(&e);
    }
    if shared.lock().services.contains_key(&name) {
        return google_error(409, "ALREADY_EXISTS", &format!("Resource '{id}' already exists."));
    }
    let main = serve_proxy(shared, &name, None).await;
    let t = now();
    {
        let mut s = shared.lock();
        if s.services.contains_key(&name) {
            main.task.abort();
            return google_error(409, "ALREADY_EXISTS", &format!("Resource '{id}' already exists."));
        }
        s.serial += 1;
        let svc = Svc {
            name: name.clone(),
            id: id.to_owned(),
            location: location.to_owned(),
            uid: format!("00000000-0000-4000-8000-{:012}", s.serial),
            generation: 1,
            observed: 0,
            spec,
            created: t,
            updated: t,
            reconciling: true,
            terminal: (Cond::Reconciling, String::new()),
            latest_created: String::new(),
            main,
            tags: BTreeMap::new(),
            served: 0,
        };
        s.services.insert(name.clone(), svc);
    }
    apply(shared, &name).await;
    let mut s = shared.lock();
    let op = operation(shared, &mut s, &name, false, enc);
    axum::Json(op).into_response()
}

/// The revision a spec's template names, if it names one.
fn named_revision(spec: &Map<String, Value>) -> Option<String> {
    spec.get("template").and_then(|t| t["revision"].as_str()).map(str::to_owned)
}

#[allow(clippy::too_many_arguments)]
async fn patch(
    shared: &Arc<Shared>,
    parent: &str,
    location: &str,
    id: &str,
    query: &HashMap<String, String>,
    body: &Value,
    enc: Enc,
) -> Response {
    let name = format!("{parent}/services/{id}");
    if !shared.lock().services.contains_key(&name) {
        if query.get("allowMissing").is_some_and(|v| v == "true") {
            return create(shared, parent, location, id, body, enc).await;
        }
        return not_found(id);
    }
    if let Some(e) = unknown_field(body, SERVICE_FIELDS, "service") {
        return bad(&e);
    }
    let given = writable(body);
    let mask: Vec<String> = query
        .get("updateMask")
        .map(|m| m.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    if let Some(p) = mask.iter().find(|p| !WRITABLE.contains(&p.as_str())) {
        return bad(&format!(
            "update_mask: the path '{p}' is not a field this fake updates (top-level writable fields only)"
        ));
    }
    {
        let mut s = shared.lock();
        let existing = revision_ids(&s, &name);
        let Some(svc) = s.services.get(&name) else { return not_found(id) };
        let mut spec = svc.spec.clone();
        if mask.is_empty() {
            spec = given;
        } else {
            for p in &mask {
                match given.get(p) {
                    Some(v) => spec.insert(p.clone(), v.clone()),
                    None => spec.remove(p),
                };
            }
        }
        let mut allowed = existing;
        if let Some(wanted) = named_revision(&spec) {
            let same = s
                .revisions
                .get(&format!("{name}/revisions/{wanted}"))
                .map(|r| Some(&r.template) == spec.get("template"));
            if same == Some(false) {
                return google_error(
                    409,
                    "ALREADY_EXISTS",
                    &format!("Revision named '{wanted}' with different configuration already exists."),
                );
            }
            allowed.push(wanted);
        }
        if let Err(e) = check_spec(&spec, id, location, &allowed) {
            return bad(&e);
        }
        let Some(svc) = s.services.get_mut(&name) else { return not_found(id) };
        svc.spec = spec;
        svc.generation += 1;
        svc.updated = now();
        svc.reconciling = true;
        svc.terminal = (Cond::Reconciling, String::new());
    }
    apply(shared, &name).await;
    let mut s = shared.lock();
    let op = operation(shared, &mut s, &name, false, enc);
    axum::Json(op).into_response()
}

/// Makes what a service's spec now asks for: a revision for a new
/// template (started in the background), listeners for its tags; settles
/// it when nothing is left to wait for.
async fn apply(shared: &Arc<Shared>, name: &str) {
    let (wanted_tags, new_rev) = {
        let mut s = shared.lock();
        let Some(svc) = s.services.get(name) else { return };
        let id = svc.id.clone();
        let location = svc.location.clone();
        let template = svc.spec.get("template").cloned().unwrap_or(Value::Null);
        let latest = s.revisions.get(&format!("{name}/revisions/{}", svc.latest_created));
        let rev_id = match named_revision(&svc.spec) {
            Some(r) => r,
            None if latest.is_some_and(|r| r.template == template) => svc.latest_created.clone(),
            None => format!("{id}-{:05}-gen", svc.generation),
        };
        let tags: Vec<String> = splits(&svc.spec)
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.tag)
            .filter(|t| !t.is_empty())
            .collect();
        let rev_name = format!("{name}/revisions/{rev_id}");
        let new_rev = if s.revisions.contains_key(&rev_name) {
            None
        } else {
            s.serial += 1;
            let image = template["containers"][0]["image"].as_str().unwrap_or_default().to_owned();
            let pull = s.unpullable.contains(&image);
            let fault_at =
                s.faults.iter().position(|f| matches!(f, Fault::ImagePull | Fault::CrashAfterReady));
            let fault = fault_at.and_then(|i| s.faults.remove(i));
            let rev = Rev {
                name: rev_name.clone(),
                id: rev_id.clone(),
                service_id: id.clone(),
                location,
                uid: format!("00000000-0000-4000-9000-{:012}", s.serial),
                template,
                created: now(),
                state: RevState::Pending,
                instance: None,
                crash_after_ready: fault == Some(Fault::CrashAfterReady),
                starts: 0,
                last_line: Arc::new(Mutex::new(String::new())),
            };
            s.revisions.insert(rev_name.clone(), rev);
            if let Some(svc) = s.services.get_mut(name) {
                svc.latest_created = rev_id.clone();
            }
            Some((rev_name, pull || fault == Some(Fault::ImagePull), image))
        };
        (tags, new_rev)
    };
    // Tag listeners: one per tag in the split.
    let have: Vec<String> =
        shared.lock().services.get(name).map(|s| s.tags.keys().cloned().collect()).unwrap_or_default();
    for tag in wanted_tags.iter().filter(|t| !have.contains(t)) {
        let l = serve_proxy(shared, name, Some(tag)).await;
        let mut s = shared.lock();
        match s.services.get_mut(name) {
            Some(svc) => {
                svc.tags.insert(tag.clone(), l);
            }
            None => l.task.abort(),
        }
    }
    if let Some(svc) = shared.lock().services.get_mut(name) {
        svc.tags.retain(|t, l| {
            let keep = wanted_tags.contains(t);
            if !keep {
                l.task.abort();
            }
            keep
        });
    }
    match new_rev {
        Some((rev, unpullable, image)) => {
            let f = shared.clone();
            let task = tokio::spawn(async move {
                if unpullable {
                    let id = rev.rsplit('/').next().unwrap_or_default().to_owned();
                    f.finish(&rev, RevState::Failed(format!(
                        "Revision '{id}' is not ready and cannot serve traffic. Image '{image}' not found."
                    )));
                    return;
                }
                let state = match f.start_instance(&rev).await {
                    Ok(()) => RevState::Ready,
                    Err(message) => RevState::Failed(message),
                };
                f.finish(&rev, state);
                f.crash_if_asked(&rev).await;
            });
            shared.lock().tasks.push(task);
        }
        None => shared.settle(name),
    }
}

impl Shared {
    /// Ends a revision's rollout and settles its service.
    fn finish(&self, rev: &str, state: RevState) {
        let service = {
            let mut s = self.lock();
            let Some(r) = s.revisions.get_mut(rev) else { return };
            r.state = state;
            rev.rsplit_once("/revisions/").map(|(svc, _)| svc.to_owned()).unwrap_or_default()
        };
        self.settle(&service);
    }

    /// A service is settled once the newest revision and every revision of
    /// its split are ready or failed.
    fn settle(&self, name: &str) {
        let mut s = self.lock();
        let Some(svc) = s.services.get(name) else { return };
        let latest = format!("{name}/revisions/{}", svc.latest_created);
        let mut wanted: Vec<String> = splits(&svc.spec)
            .unwrap_or_default()
            .iter()
            .filter(|t| !t.latest)
            .map(|t| format!("{name}/revisions/{}", t.revision))
            .collect();
        wanted.push(latest.clone());
        let states: Vec<(String, RevState)> = wanted
            .iter()
            .filter_map(|r| s.revisions.get(r).map(|rev| (r.clone(), rev.state.clone())))
            .collect();
        if states.iter().any(|(_, st)| *st == RevState::Pending) {
            return;
        }
        let failed = states
            .iter()
            .find(|(r, st)| *r == latest && matches!(st, RevState::Failed(_)))
            .or_else(|| states.iter().find(|(_, st)| matches!(st, RevState::Failed(_))));
        let terminal = match failed {
            Some((_, RevState::Failed(m))) => (Cond::Failed, m.clone()),
            _ => (Cond::Succeeded, String::new()),
        };
        if let Some(svc) = s.services.get_mut(name) {
            svc.reconciling = false;
            svc.observed = svc.generation;
            svc.terminal = terminal;
        }
    }

    /// Starts a revision's process and waits for its startup probe: `Err`
    /// with Cloud Run's message when it exits first or the probe's budget runs out.
    async fn start_instance(self: &Arc<Self>, rev: &str) -> Result<(), String> {
        let (template, id, service_id, last_line, buckets, images, secrets) = {
            let mut s = self.lock();
            let (buckets, images, secrets) = (s.buckets.clone(), s.images.clone(), s.secrets.clone());
            let Some(r) = s.revisions.get_mut(rev) else { return Err("deleted".into()) };
            r.starts += 1;
            (
                r.template.clone(),
                r.id.clone(),
                r.service_id.clone(),
                r.last_line.clone(),
                buckets,
                images,
                secrets,
            )
        };
        let container = &template["containers"][0];
        let container_port = container["ports"][0]["containerPort"].as_u64().unwrap_or(8080);
        let not_ready = format!("Revision '{id}' is not ready and cannot serve traffic.");
        let image = images.get(container["image"].as_str().unwrap_or_default());
        let env = env_of(container, &self.project, &secrets).map_err(|e| format!("{not_ready} {e}"))?;
        // The container's filesystem: mounts as links into the registered directories.
        let root = self.root.path().join(format!("{id}-{}", ROOTS.fetch_add(1, Ordering::Relaxed)));
        let mut mounts = Vec::new();
        for m in container["volumeMounts"].as_array().into_iter().flatten() {
            let (vname, path) =
                (m["name"].as_str().unwrap_or_default(), m["mountPath"].as_str().unwrap_or_default());
            let volume = template["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == vname);
            let Some(gcs) = volume.map(|v| &v["gcs"]).filter(|g| g.is_object()) else { continue };
            let bucket = gcs["bucket"].as_str().unwrap_or_default();
            let Some(dir) = buckets.get(bucket) else {
                return Err(format!(
                    "{not_ready} Cloud Storage volume '{vname}': bucket '{bucket}' does not exist or the service account cannot read it."
                ));
            };
            let only = gcs["mountOptions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find_map(|o| o.strip_prefix("only-dir="));
            let target = match dir {
                Bucket::Dir(dir) => only.map_or_else(|| dir.clone(), |o| dir.join(o)),
                Bucket::Store(store) => {
                    let files = root.with_extension("bucket");
                    copy_objects(&**store, only.unwrap_or_default(), &files)
                        .await
                        .map_err(|e| format!("{not_ready} Cloud Storage volume '{vname}': {e}"))?;
                    files.join(only.unwrap_or_default())
                }
            };
            let _ = std::fs::create_dir_all(&target);
            let link = root.join(path.trim_start_matches('/'));
            if let Some(parent) = link.parent() {
                std::fs::create_dir_all(parent).map_err(|e| format!("{not_ready} mount {path}: {e}"))?;
            }
            std::os::unix::fs::symlink(&target, &link)
                .map_err(|e| format!("{not_ready} mount {path}: {e}"))?;
            mounts.push(path.to_owned());
        }
        std::fs::create_dir_all(&root).map_err(|e| format!("{not_ready} {e}"))?;
        let in_root = |v: &str| {
            let under =
                |m: &str| v == m || m.starts_with(&format!("{v}/")) || v.starts_with(&format!("{m}/"));
            if v.starts_with('/') && mounts.iter().any(|m| under(m)) {
                root.join(v.trim_start_matches('/')).to_string_lossy().into_owned()
            } else {
                v.to_owned()
            }
        };
        let mut attempt = 0;
        let (mut child, port) = 'start: loop {
            attempt += 1;
            let port = crate::free_port();
            let mut cmd = match image {
                Some(image) => {
                    let mut cmd = tokio::process::Command::new(&image.program);
                    cmd.env_clear().envs(image.env.iter().cloned());
                    cmd
                }
                None => {
                    let mut cmd = tokio::process::Command::new(&self.server.program);
                    cmd.args(&self.server.args).env_clear();
                    cmd
                }
            };
            cmd.args(container["args"].as_array().into_iter().flatten().filter_map(Value::as_str))
                .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
                .envs(env.iter().map(|(k, v)| (k.clone(), in_root(v))))
                .env("PORT", port.to_string())
                .env("K_SERVICE", &service_id)
                .env("K_REVISION", &id)
                .env("K_CONFIGURATION", &service_id)
                .current_dir(&root)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let mut child =
                cmd.spawn().map_err(|e| format!("{not_ready} The container could not be started: {e}"))?;
            if let Some(err) = child.stderr.take() {
                let last = last_line.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(err).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if !line.trim().is_empty() {
                            *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = line;
                        }
                    }
                });
            }
            let probe = &container["startupProbe"];
            let path = probe["httpGet"]["path"].as_str().unwrap_or("/").to_owned();
            let secs = |k: &str, d: u64| probe[k].as_u64().unwrap_or(d);
            let budget = Duration::from_secs(
                secs("initialDelaySeconds", 0) + secs("failureThreshold", 3) * secs("periodSeconds", 10),
            );
            let deadline = Instant::now() + budget;
            let url = format!("http://127.0.0.1:{port}{path}");
            let failed = |last_line: &Arc<Mutex<String>>| {
                let line = last_line.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                format!(
                    "{not_ready} The user-provided container failed to start and listen on the port defined provided by the PORT={container_port} environment variable within the allocated timeout. This can happen when the container port is misconfigured or if the timeout is too short. The health check timeout can be extended. Logs for this revision might contain more information. Last log line: {line}"
                )
            };
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    // Let the stderr reader take the last lines.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // The free port was taken by another process between our
                    // check and the child's bind (a local race Cloud Run never
                    // has): start the container again on another port.
                    let clash = last_line.lock().is_ok_and(|l| l.contains("Address already in use"));
                    if clash && attempt < PORT_ATTEMPTS {
                        continue 'start;
                    }
                    return Err(failed(&last_line));
                }
                let ok = self.http.get(&url).timeout(Duration::from_secs(2)).send().await;
                if ok.is_ok_and(|r| r.status().is_success()) {
                    break 'start (child, port);
                }
                if Instant::now() >= deadline {
                    let _ = child.start_kill();
                    return Err(failed(&last_line));
                }
                tokio::time::sleep(PROBE_EVERY).await;
            }
        };
        let mut s = self.lock();
        match s.revisions.get_mut(rev) {
            Some(r) => r.instance = Some(Instance { child, port, started: now() }),
            None => {
                let _ = child.start_kill();
            }
        }
        Ok(())
    }

    async fn crash_if_asked(&self, rev: &str) {
        let crash =
            self.lock().revisions.get(rev).is_some_and(|r| r.crash_after_ready && r.state == RevState::Ready);
        if !crash {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(i) = self.lock().revisions.get_mut(rev).and_then(|r| r.instance.as_mut()) {
            let _ = i.child.start_kill();
        }
    }
}

/// How many ports an instance's start tries when its port was taken.
const PORT_ATTEMPTS: u32 = 3;

/// A number for each instance's directory.
static ROOTS: AtomicU64 = AtomicU64::new(0);

fn delete(shared: &Arc<Shared>, name: &str, id: &str, enc: Enc) -> Response {
    let mut s = shared.lock();
    if !s.services.contains_key(name) {
        return not_found(id);
    }
    let op = operation(shared, &mut s, name, true, enc);
    if let Some(svc) = s.services.remove(name) {
        svc.main.task.abort();
        svc.tags.values().for_each(|l| l.task.abort());
    }
    let prefix = format!("{name}/revisions/");
    let gone: Vec<String> = s.revisions.keys().filter(|r| r.starts_with(&prefix)).cloned().collect();
    for r in gone {
        if let Some(mut rev) = s.revisions.remove(&r)
            && let Some(i) = &mut rev.instance
        {
            let _ = i.child.start_kill();
            s.ended.push((rev.service_id.clone(), i.started, now()));
        }
    }
    axum::Json(op).into_response()
}

fn get_operation(shared: &Arc<Shared>, name: &str, enc: Enc) -> Response {
    let s = shared.lock();
    let Some(service) = s.operations.get(name) else {
        return google_error(404, "NOT_FOUND", &format!("Operation '{name}' does not exist."));
    };
    let svc = s.services.get(service);
    let done = svc.is_none_or(|v| !v.reconciling);
    let mut op = json!({"name": name, "done": done});
    if let Some(v) = svc {
        let mut meta = service_json(&s, v, enc);
        meta["@type"] = json!("type.googleapis.com/google.cloud.run.v2.Service");
        if done {
            op["response"] = meta.clone();
        }
        op["metadata"] = meta;
    }
    axum::Json(op).into_response()
}

fn list_services(shared: &Arc<Shared>, parent: &str, query: &HashMap<String, String>, enc: Enc) -> Response {
    let s = shared.lock();
    let all: Vec<&Svc> =
        s.services.values().filter(|v| v.name.starts_with(&format!("{parent}/services/"))).collect();
    let size = query.get("pageSize").and_then(|p| p.parse::<usize>().ok()).filter(|p| *p > 0).unwrap_or(100);
    let from = query.get("pageToken").and_then(|t| t.parse::<usize>().ok()).unwrap_or(0);
    let page: Vec<Value> = all.iter().skip(from).take(size).map(|v| service_json(&s, v, enc)).collect();
    let mut body = json!({"services": page});
    if from + size < all.len() {
        body["nextPageToken"] = json!((from + size).to_string());
    }
    axum::Json(body).into_response()
}

fn list_revisions(shared: &Arc<Shared>, location: &str, id: &str, enc: Enc) -> Response {
    let s = shared.lock();
    let parent = format!("projects/{}/locations/{location}/services/", shared.project);
    if id != "-" && !s.services.contains_key(&format!("{parent}{id}")) {
        return not_found(id);
    }
    let revs: Vec<Value> = s
        .revisions
        .values()
        .filter(|r| r.location == location && (id == "-" || r.service_id == id))
        .map(|r| revision_json(r, enc))
        .collect();
    axum::Json(json!({"revisions": revs})).into_response()
}

fn condition(kind: &str, state: Cond, message: &str, at: Timestamp, enc: Enc) -> Value {
    let mut c = json!({
        "type": kind,
        "state": enc.spell(&COND_NAMES, state.index()),
        "lastTransitionTime": at.to_rfc3339(),
    });
    if !message.is_empty() {
        c["message"] = json!(message);
        c["severity"] = enc.spell(&["SEVERITY_UNSPECIFIED", "ERROR", "WARNING", "INFO"], 1);
    }
    c
}

fn revision_json(r: &Rev, enc: Enc) -> Value {
    let (state, message) = match &r.state {
        RevState::Pending => (Cond::Reconciling, ""),
        RevState::Ready => (Cond::Succeeded, ""),
        RevState::Failed(m) => (Cond::Failed, m.as_str()),
    };
    let t = &r.template;
    let mut v = json!({
        "name": r.name,
        "uid": r.uid,
        "generation": "1",
        "createTime": r.created.to_rfc3339(),
        "updateTime": r.created.to_rfc3339(),
        "service": r.service_id,
        "containers": t["containers"],
        "maxInstanceRequestConcurrency": t["maxInstanceRequestConcurrency"].as_u64().unwrap_or(80),
        "timeout": t["timeout"].as_str().unwrap_or("300s"),
        "reconciling": r.state == RevState::Pending,
        "conditions": [
            condition("Ready", state, message, r.created, enc),
            condition("ContainerHealthy", state, message, r.created, enc),
        ],
        "observedGeneration": "1",
        "logUri": format!("https://console.cloud.google.com/logs/viewer?resource=cloud_run_revision/revision_name/{}", r.id),
        "etag": format!("\"{}\"", r.uid),
    });
    for k in ["scaling", "volumes", "serviceAccount", "nodeSelector", "gpuZonalRedundancyDisabled", "labels"]
    {
        if !t[k].is_null() {
            v[k] = t[k].clone();
        }
    }
    v
}

fn service_json(s: &FakeState, v: &Svc, enc: Enc) -> Value {
    let mut out = Map::new();
    for (k, val) in &v.spec {
        out.insert(k.clone(), val.clone());
    }
    let latest_ready = latest_ready(s, &v.name).unwrap_or_default();
    let ready = |rev: &str| {
        s.revisions.get(&format!("{}/revisions/{rev}", v.name)).is_some_and(|r| r.state == RevState::Ready)
    };
    let statuses: Vec<Value> = splits(&v.spec)
        .unwrap_or_default()
        .iter()
        .filter_map(|t| {
            let revision = if t.latest { latest_ready.clone() } else { t.revision.clone() };
            if revision.is_empty() || !ready(&revision) {
                return None;
            }
            let mut st = json!({
                "type": enc.spell(&TRAFFIC_NAMES, if t.latest { 1 } else { 2 }),
                "revision": revision,
                "percent": t.percent,
            });
            if !t.tag.is_empty() {
                st["tag"] = json!(t.tag);
                if let Some(l) = v.tags.get(&t.tag) {
                    st["uri"] = json!(l.url);
                }
            }
            Some(st)
        })
        .collect();
    let fixed = json!({
        "name": v.name,
        "uid": v.uid,
        "generation": v.generation.to_string(),
        "createTime": v.created.to_rfc3339(),
        "updateTime": v.updated.to_rfc3339(),
        "creator": "deployer@fake.iam.gserviceaccount.com",
        "lastModifier": "deployer@fake.iam.gserviceaccount.com",
        "observedGeneration": v.observed.to_string(),
        "terminalCondition": condition("Ready", v.terminal.0, &v.terminal.1, v.updated, enc),
        "conditions": [
            condition("RoutesReady", v.terminal.0, &v.terminal.1, v.updated, enc),
            condition("ConfigurationsReady", v.terminal.0, &v.terminal.1, v.updated, enc),
        ],
        "latestReadyRevision": latest_ready,
        "latestCreatedRevision": v.latest_created,
        "trafficStatuses": statuses,
        "uri": v.main.url,
        "urls": [v.main.url],
        "reconciling": v.reconciling,
        "etag": format!("\"{}-{}\"", v.generation, v.uid),
    });
    if let Value::Object(f) = fixed {
        out.extend(f);
    }
    Value::Object(out)
}

// ---------------------------------------------------------------- serving

#[derive(Clone)]
struct ProxyState {
    shared: Arc<Shared>,
    service: String,
    tag: Option<String>,
}

async fn serve_proxy(shared: &Arc<Shared>, service: &str, tag: Option<&str>) -> Listener {
    let (listener, url) = bind().await;
    let state =
        ProxyState { shared: shared.clone(), service: service.to_owned(), tag: tag.map(str::to_owned) };
    let app = Router::new().fallback(proxy).with_state(state);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Listener { url, task }
}

fn forbidden(path: &str) -> Response {
    let body = format!(
        "<html><head><title>403 Forbidden</title></head><body><h1>Error: Forbidden</h1><h2>Your client does not have permission to get URL <code>{path}</code> from this server.</h2></body></html>"
    );
    (StatusCode::FORBIDDEN, [("content-type", "text/html; charset=UTF-8")], body).into_response()
}

async fn proxy(State(p): State<ProxyState>, req: Request) -> Response {
    let path = req.uri().path_and_query().map_or("/", |pq| pq.as_str()).to_owned();
    // IAM, then the revision this request goes to.
    let picked = {
        let mut s = p.shared.lock();
        let check = s.check.clone();
        let Some(svc) = s.services.get_mut(&p.service) else {
            return (StatusCode::NOT_FOUND, "Page not found").into_response();
        };
        if svc.spec.get("invokerIamDisabled").and_then(Value::as_bool) != Some(true) {
            let token = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            let mut audiences = vec![svc.main.url.clone()];
            audiences.extend(p.tag.as_ref().and_then(|t| svc.tags.get(t)).map(|l| l.url.clone()));
            let admitted = !token.is_empty() && check.is_some_and(|c| audiences.iter().any(|a| c(token, a)));
            if !admitted {
                return forbidden(req.uri().path());
            }
        }
        let traffic = splits(&svc.spec).unwrap_or_default();
        svc.served += 1;
        let slot = (svc.served * 37) % 100;
        let name = svc.name.clone();
        let latest_ready = latest_ready(&s, &name);
        let ready = |id: &str| {
            s.revisions.get(&format!("{name}/revisions/{id}")).is_some_and(|r| r.state == RevState::Ready)
        };
        let resolve = |t: &Split| if t.latest { latest_ready.clone() } else { Some(t.revision.clone()) };
        match &p.tag {
            Some(tag) => traffic.iter().find(|t| &t.tag == tag).and_then(resolve).filter(|r| ready(r)),
            None => {
                let candidates: Vec<(String, u64)> = traffic
                    .iter()
                    .filter(|t| t.percent > 0)
                    .filter_map(|t| resolve(t).filter(|r| ready(r)).map(|r| (r, t.percent)))
                    .collect();
                let total: u64 = candidates.iter().map(|(_, w)| w).sum();
                let mut at = if total == 0 { 0 } else { slot * total / 100 };
                candidates
                    .iter()
                    .find(|(_, w)| {
                        let hit = at < *w;
                        at = at.saturating_sub(*w);
                        hit
                    })
                    .or(candidates.last())
                    .map(|(r, _)| r.clone())
            }
        }
        .map(|r| format!("{name}/revisions/{r}"))
    };
    let Some(rev) = picked else {
        return (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response();
    };
    let Some(port) = p.shared.instance_port(&rev).await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response();
    };
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "too large").into_response();
    };
    let mut out = p.shared.http.request(parts.method, format!("http://127.0.0.1:{port}{path}")).body(bytes);
    for (k, v) in &parts.headers {
        if !matches!(k.as_str(), "host" | "content-length" | "connection" | "transfer-encoding") {
            out = out.header(k, v);
        }
    }
    match out.send().await {
        Ok(r) => {
            let mut resp = Response::builder().status(r.status().as_u16());
            for (k, v) in r.headers() {
                if !matches!(k.as_str(), "content-length" | "connection" | "transfer-encoding") {
                    resp = resp.header(k, v);
                }
            }
            let body = r.bytes().await.unwrap_or_default();
            resp.body(axum::body::Body::from(body)).unwrap_or_default()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "The request failed because the instance crashed.")
            .into_response(),
    }
}

impl Shared {
    /// The port of a live instance of `rev`, starting one if the last died.
    async fn instance_port(self: &Arc<Self>, rev: &str) -> Option<u16> {
        let alive = |s: &mut FakeState| {
            let i = s.revisions.get_mut(rev)?.instance.as_mut()?;
            matches!(i.child.try_wait(), Ok(None)).then_some(i.port)
        };
        if let Some(port) = alive(&mut self.lock()) {
            return Some(port);
        }
        let _one_at_a_time = self.cold_starts.lock().await;
        if let Some(port) = alive(&mut self.lock()) {
            return Some(port);
        }
        if let Some(r) = self.lock().revisions.get_mut(rev) {
            r.crash_after_ready = false;
        }
        self.start_instance(rev).await.ok()?;
        alive(&mut self.lock())
    }
}

// ---------------------------------------------------------------- ID tokens

/// An ID token issuer for tests: mints JWT-shaped tokens (`aud`, `exp`)
/// and knows which it minted, so the fake admits exactly those.
#[derive(Debug)]
pub struct FakeIdTokens {
    clock: Arc<dyn Clock>,
    lifetime: Duration,
    minted: Mutex<HashMap<String, (String, Timestamp)>>,
    count: AtomicU64,
}

impl FakeIdTokens {
    /// Tokens valid for `lifetime` on `clock`.
    pub fn new(clock: Arc<dyn Clock>, lifetime: Duration) -> Arc<FakeIdTokens> {
        Arc::new(FakeIdTokens {
            clock,
            lifetime,
            minted: Mutex::new(HashMap::new()),
            count: AtomicU64::new(0),
        })
    }

    /// How many tokens were minted.
    pub fn minted(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Whether `token` was minted here for `audience` and has not expired.
    pub fn verifies(&self, token: &str, audience: &str) -> bool {
        let minted = self.minted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        minted.get(token).is_some_and(|(aud, exp)| aud == audience && self.clock.now() < *exp)
    }

    /// The audience of a token minted here.
    pub fn audience_of(&self, token: &str) -> Option<String> {
        let minted = self.minted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        minted.get(token).map(|(aud, _)| aud.clone())
    }
}

#[async_trait]
impl IdTokens for FakeIdTokens {
    async fn mint(&self, audience: &str) -> Result<IdToken, HostingError> {
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        let expires = self.clock.now() + self.lifetime;
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let claims =
            json!({"aud": audience, "exp": expires.as_secs(), "iss": "https://accounts.google.com", "n": n});
        let token =
            format!("{}.{}.fake-signature", b64(&json!({"alg": "RS256", "typ": "JWT"})), b64(&claims));
        self.minted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token.clone(), (audience.to_owned(), expires));
        Ok(IdToken { token, expires })
    }
}

/// The metadata server's identity path (what `google-cloud-auth` asks).
const IDENTITY_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/identity";

impl FakeIdTokens {
    /// Serves the issuer as the metadata server's identity endpoint on
    /// 127.0.0.1: `GET …/identity?audience=A` with `Metadata-Flavor:
    /// Google` answers a token for `A` as text, as the metadata server of
    /// a Cloud Run instance does; no header is 403, no audience 400. Answers
    /// the root to give `MAPI_ENDPOINTS_METADATA_URL`; the server stops when
    /// the runtime does.
    pub async fn serve_metadata(self: &Arc<Self>) -> String {
        let (listener, url) = bind().await;
        let issuer = self.clone();
        let app = Router::new().route(
            IDENTITY_PATH,
            axum::routing::get(
                move |headers: axum::http::HeaderMap, Query(q): Query<HashMap<String, String>>| {
                    let issuer = issuer.clone();
                    async move {
                        if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
                            return (
                                StatusCode::FORBIDDEN,
                                "Missing Metadata-Flavor:Google header.".to_owned(),
                            );
                        }
                        let Some(audience) = q.get("audience").filter(|a| !a.is_empty()) else {
                            return (
                                StatusCode::BAD_REQUEST,
                                "non-empty audience parameter required".to_owned(),
                            );
                        };
                        match issuer.mint(audience).await {
                            Ok(t) => (StatusCode::OK, t.token),
                            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
                        }
                    }
                },
            ),
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        url
    }
}
