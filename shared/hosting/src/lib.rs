//! The Hosting port: a model endpoint is one **service** (shaped after a
//! Cloud Run Service) whose **revisions** each serve one model version, and
//! whose **traffic** splits requests between revisions by percent, each
//! revision reachable on its own by its **tag**.
//!
//! - `create` makes a service with its first revision at 100 %;
//!   `add_revision` adds one at 0 % (the split stays as it was);
//!   `set_traffic` moves the split; `delete` removes the service.
//! - A rollout is asynchronous: `get` answers `Rollout::Reconciling` until
//!   the newest revision passed its startup probe (`Ready`) or failed
//!   (`Failed` with the host's message). [`wait_ready`] polls on the clock.
//! - `route` says where to send a request to a revision (by tag) or to the
//!   service, with the authorization the host wants; the local adapter
//!   starts a scaled-to-zero server here.
//!
//! Failure: `Throttled` and `Unavailable` changed nothing and may be
//! retried; a call whose answer was lost is `Unavailable` too, and every
//! call is safe to repeat (`create` of an existing service answers
//! `AlreadyExists`, `add_revision` of an existing tag is a no-op, `delete`
//! of a missing service is `NotFound`).
//!
//! What a model server is told (its environment) is [`server_env`]; both
//! adapters set it and `mapi-worker serve` reads it.

pub mod local;
pub mod oci;
pub mod sandboxed;
pub mod server_env;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::Clock;
use serde::{Deserialize, Serialize};

pub use mapi_domain::endpoint::{Accelerator, Access};

/// Instances between `min` and `max`; `min = 0` scales to zero when idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scaling {
    pub min: u32,
    pub max: u32,
}

/// What a service is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// The service's name (lowercase letters, digits and `-`, ≤ 49).
    pub name: String,
    pub region: String,
    pub accelerator: Accelerator,
    pub scaling: Scaling,
    pub access: Access,
    /// Labels the host keeps (tenant, project, alias); the adapters add their managed-by label.
    pub labels: BTreeMap<String, String>,
}

/// One file of a bundle, by its object key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleFile {
    pub key: String,
    pub bytes: Vec<u8>,
}

/// The model a revision serves: a sealed bundle, pinned by its manifest's
/// SHA-256, and the public keys its signature must verify under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// The bundle's prefix (`t/{tenant}/…/bundle`).
    pub bundle: String,
    pub manifest_sha256: String,
    /// JSON of the trusted public keys (a list of `mapi_signer::PublicKey`).
    pub trusted_keys: String,
    /// The manifest, its signature and the artifacts, verified by the caller.
    /// An adapter whose servers read the object store itself ignores them.
    pub files: Vec<BundleFile>,
    /// The base image whose Python the model's `predict` needs (`base-ml`,
    /// …); `None`: any model server serves it (a model the Rust server loads).
    pub base: Option<String>,
}

/// A tenant's model-server image: run as it is, reached on `port`, ready
/// once `health_path` answers a 2xx.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// A registry reference (Cloud Run), or the path of a local OCI image layout (local).
    pub image: String,
    pub port: u16,
    pub health_path: String,
    /// The tenant whose image it is: it runs as that tenant and reads only that tenant's secrets.
    pub tenant: mapi_domain::TenantId,
    /// Variables whose values are the tenant's secrets.
    pub secrets: Vec<SecretEnv>,
}

/// One environment variable whose value is the tenant's secret `name`. Each
/// adapter finds it in its own store (Secret Manager, or the local secrets
/// file), among the tenant's own secrets only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretEnv {
    pub env: String,
    pub name: String,
    /// A version number, or `latest`.
    pub version: String,
}

/// What a revision serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// A sealed model bundle, on the platform's model server.
    Model(ModelRef),
    /// The tenant's own model-server image.
    Image(ImageRef),
}

/// A revision to add: its tag (lowercase letters, digits, `-`, unique in
/// the service) and what it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionSpec {
    pub tag: String,
    pub serves: Serving,
}

/// One entry of a traffic split.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// The revision's tag.
    pub tag: String,
    pub percent: u32,
}

/// Where the newest change of a service stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "message", rename_all = "lowercase")]
pub enum Rollout {
    Reconciling,
    Ready,
    /// The host's own message (a failed probe, an image that cannot be pulled, a refused bundle).
    Failed(String),
}

/// A revision as the host reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionState {
    pub tag: String,
    /// The host's name of the revision.
    pub name: String,
    /// The revision's own URL (its tag URL).
    pub url: Option<String>,
    pub rollout: Rollout,
}

/// A service as the host reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceState {
    pub name: String,
    pub url: Option<String>,
    /// Of the newest change (creation, a revision, a traffic move).
    pub rollout: Rollout,
    pub revisions: Vec<RevisionState>,
    pub traffic: Vec<Traffic>,
    /// The service's instance bounds, as last set.
    pub scaling: Scaling,
    pub labels: BTreeMap<String, String>,
}

impl ServiceState {
    pub fn revision(&self, tag: &str) -> Option<&RevisionState> {
        self.revisions.iter().find(|r| r.tag == tag)
    }
}

/// Where to send one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Base URL; the caller appends the path (`/predict`).
    pub url: String,
    /// The `Authorization` header value to send, if the host wants one.
    /// Minted per request from a cache; never stored.
    pub authorization: Option<String>,
}

/// Why a hosting call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostingError {
    #[error("service {0} not found")]
    NotFound(String),
    #[error("service {0} already exists")]
    AlreadyExists(String),
    /// The host refused for now (429): nothing changed; retry later.
    #[error("the hosting API is rate limiting: {0}")]
    Throttled(#[source] mapi_domain::Cause),
    /// No answer, a lost answer or a 5xx: retry (every call is safe to repeat).
    #[error("the hosting API is unavailable: {0}")]
    Unavailable(#[source] mapi_domain::Cause),
    /// The request itself is wrong (a region without GPUs, a bad name).
    #[error("{0}")]
    Invalid(String),
    /// Any other error of the host, with its HTTP status and its code (e.g. `PERMISSION_DENIED`).
    #[error("the hosting API answered {status} {code}: {message}")]
    Api { status: u16, code: String, message: String },
}

impl HostingError {
    /// Whether repeating the call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, HostingError::Throttled(_) | HostingError::Unavailable(_))
    }
}

/// The Hosting port.
#[async_trait]
pub trait Hosting: Send + Sync + Debug {
    /// The adapter's name (`local`, `cloud-run`).
    fn name(&self) -> &'static str;

    /// Why this host does not serve a model whose `predict` is tenant code
    /// (a plugin's), if it does not: such code runs only in a sandbox with no
    /// network and none of the platform's credentials.
    fn uploaded_code_refusal(&self) -> Option<String> {
        Some(format!("endpoints on {} do not run uploaded code in a sandbox", self.name()))
    }

    /// Why this host does not run a tenant's own container, if it does not.
    fn container_refusal(&self) -> Option<String> {
        Some(format!("endpoints on {} do not run a tenant's own container", self.name()))
    }

    /// Why `tenant` may not run `image` here, if it may not (another tenant's image, say).
    fn image_refusal(&self, _tenant: &mapi_domain::TenantId, _image: &str) -> Option<String> {
        None
    }

    /// Creates `spec` serving `first` at 100 %.
    async fn create(&self, spec: &ServiceSpec, first: &RevisionSpec) -> Result<(), HostingError>;

    /// Adds a revision at 0 %, reachable by its tag; the split is unchanged.
    /// Adding a tag the service has is a no-op.
    async fn add_revision(&self, service: &str, revision: &RevisionSpec) -> Result<(), HostingError>;

    /// Sets the split (percents sum to 100; every tag named exists). Revisions
    /// left out keep their tags at 0 %.
    async fn set_traffic(&self, service: &str, traffic: &[Traffic]) -> Result<(), HostingError>;

    /// Sets the service's instance bounds, without a new revision: at least
    /// `min` kept warm among the revisions that take traffic (shared by their
    /// percents; a revision at 0 % keeps none warm), at most `max` in all.
    /// Setting the bounds the service has is a no-op.
    async fn set_scaling(&self, service: &str, scaling: Scaling) -> Result<(), HostingError>;

    async fn get(&self, service: &str) -> Result<ServiceState, HostingError>;

    /// The services this platform made (by its managed-by label), by name.
    async fn list(&self) -> Result<Vec<ServiceState>, HostingError>;

    async fn delete(&self, service: &str) -> Result<(), HostingError>;

    /// The time `service`'s instances (of every revision) were up within
    /// `[from, to)`, summed over instances: what an instance-billed service
    /// is billed for. `None` where this host does not report it.
    /// How long after a moment the host's [`Hosting::instance_time`] up to it is complete.
    fn reporting_lag(&self) -> Duration {
        Duration::ZERO
    }

    async fn instance_time(
        &self,
        _service: &str,
        (_from, _to): (mapi_domain::Timestamp, mapi_domain::Timestamp),
    ) -> Result<Option<Duration>, HostingError> {
        Ok(None)
    }

    /// Where to send a request: to revision `tag`, or to the service's split.
    async fn route(&self, service: &str, tag: Option<&str>) -> Result<Route, HostingError>;
}

/// The newest change's outcome, polling `get` every `every` on `clock` for
/// at most `timeout`. `Reconciling` when the time ran out.
pub async fn wait_ready(
    hosting: &dyn Hosting,
    clock: &dyn Clock,
    service: &str,
    every: Duration,
    timeout: Duration,
) -> Result<Rollout, HostingError> {
    let deadline = clock.now() + timeout;
    loop {
        let state = match hosting.get(service).await {
            Ok(state) => Some(state),
            Err(e) if e.is_retryable() => None,
            Err(e) => return Err(e),
        };
        if let Some(state) = state
            && state.rollout != Rollout::Reconciling
        {
            return Ok(state.rollout);
        }
        if clock.now() >= deadline {
            return Ok(Rollout::Reconciling);
        }
        clock.sleep_until(clock.now() + every).await;
    }
}

/// Checks a split: percents sum to 100 and no tag repeats.
/// Checks instance bounds: `0 ≤ min ≤ max ≤ MAX_INSTANCES` and `max ≥ 1`.
pub fn check_scaling(scaling: Scaling) -> Result<(), HostingError> {
    scaling.check().map_err(HostingError::Invalid)
}

/// The most instances one service may scale to.
pub const MAX_INSTANCES: u32 = 100;

impl Scaling {
    /// Whether the bounds make sense, and what to fix if not.
    pub fn check(self) -> Result<(), String> {
        if (1..=MAX_INSTANCES).contains(&self.max) && self.min <= self.max {
            return Ok(());
        }
        Err(format!(
            "instances must satisfy 0 ≤ min_instances ≤ max_instances ≤ {MAX_INSTANCES} and max_instances ≥ 1, not {}…{}",
            self.min, self.max
        ))
    }
}

pub fn check_split(traffic: &[Traffic]) -> Result<(), HostingError> {
    let sum: u32 = traffic.iter().map(|t| t.percent).sum();
    if sum != 100 {
        return Err(HostingError::Invalid(format!("the traffic split sums to {sum} %, not 100 %")));
    }
    let mut tags: Vec<&str> = traffic.iter().map(|t| t.tag.as_str()).collect();
    tags.sort_unstable();
    if tags.windows(2).any(|w| w[0] == w[1]) {
        return Err(HostingError::Invalid("the traffic split names a revision twice".into()));
    }
    Ok(())
}

/// The label every service this platform makes carries, so `list` returns only those.
pub const MANAGED_LABEL: (&str, &str) = ("managed-by", "mapi");
