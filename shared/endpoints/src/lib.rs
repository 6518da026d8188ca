//! Model endpoints as data. An endpoint (per project, by alias) is one
//! hosted service whose revisions each serve one model version; its
//! document says what the host should run (revisions, the traffic split, a
//! promotion under way) and what happened (status, history).
//!
//! - The API writes the document and asks the host for the change (a new
//!   service, a revision at 0 %, a delete); [`reconcile`] then moves the
//!   document with what the host reports: `deploying` becomes `ready` or
//!   `failed` with the host's message (or failed after [`DEPLOY_TIMEOUT`]),
//!   a promotion advances through the gate (`mapi-rollout`), `deleting`
//!   ends with the document gone. `reconcile-tick` runs it for every
//!   endpoint that is `active`.
//! - Scores are counted per revision in sharded statistics documents
//!   ([`StatsDoc`]): requests, errors, a latency histogram, compute time
//!   and cost. The gate reads them; the endpoint's view sums them.
//!
//! Architecture invariant: only `reconcile` moves an endpoint's status or
//! promotion from what the host reports; handlers only ask.

pub mod reconcile;
pub mod stats;

use std::collections::BTreeMap;
use std::time::Duration;

use mapi_api::endpoints::{
    Container, EndpointEventView, EndpointUsageView, EndpointView, PromotionView, RevisionView,
};
use mapi_domain::endpoint::{Accelerator, Access, EndpointStatus};
use mapi_domain::{ModelVersionId, ProjectId, TenantId, Timestamp, UserId};
use mapi_hosting::{Scaling, Traffic};
use mapi_store::typed::Doc;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use reconcile::{Reconciled, reconcile};
pub use stats::{StatsDoc, Usage};

/// How long a rollout may take before it is failed.
pub const DEPLOY_TIMEOUT: Duration = Duration::from_secs(600);
/// How many history entries an endpoint keeps (the oldest go first).
pub const MAX_EVENTS: usize = 50;

/// One revision of an endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// `r1`, `r2`, … in order of creation.
    pub tag: String,
    /// What it serves (its fields sit beside the tag in the document).
    #[serde(flatten)]
    pub serves: Serves,
    pub created_at: Timestamp,
}

/// What a revision serves: a model version on the platform's model server,
/// or the tenant's own model-server container.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Serves {
    Model(ServedModel),
    Container(ServedContainer),
}

/// A model version the platform's model server serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServedModel {
    pub model_version: ModelVersionId,
    pub bundle: String,
    pub manifest_sha256: String,
    /// One row of the fit's data and the fit's own prediction for it (the smoke test).
    pub example: Option<(Map<String, Value>, f64)>,
    /// The plugin whose `predict` serves it: its scores run tenant code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<ServedPlugin>,
}

/// A tenant's model-server container: requests are forwarded to it unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedContainer {
    pub container: Container,
}

impl Revision {
    /// The model version it serves, unless it runs a container.
    pub fn model_version(&self) -> Option<&ModelVersionId> {
        match &self.serves {
            Serves::Model(m) => Some(&m.model_version),
            Serves::Container(_) => None,
        }
    }

    /// The container it runs, unless it serves a model version.
    pub fn container(&self) -> Option<&Container> {
        match &self.serves {
            Serves::Model(_) => None,
            Serves::Container(c) => Some(&c.container),
        }
    }

    /// Whether its answers come from tenant code (a plugin's `predict`, or a container).
    pub fn runs_tenant_code(&self) -> bool {
        match &self.serves {
            Serves::Model(m) => m.plugin.is_some(),
            Serves::Container(_) => true,
        }
    }

    /// What it serves, in words: the model version's id or the image.
    pub fn served(&self) -> String {
        match &self.serves {
            Serves::Model(m) => m.model_version.to_string(),
            Serves::Container(c) => format!("image {}", c.container.image),
        }
    }
}

/// The plugin code a revision runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedPlugin {
    pub name: String,
    pub version: String,
    /// Lowercase hex SHA-256 of its package.
    pub sha256: String,
}

/// A promotion under way: the canary revision and its gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Promotion {
    pub tag: String,
    /// The version the canary serves (absent when it runs a container).
    #[serde(default)]
    pub model_version: Option<ModelVersionId>,
    /// The image the canary runs (absent when it serves a model version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub started_at: Timestamp,
    pub gate: mapi_rollout::Gate,
    /// The smoke test's result once it ran.
    pub smoke: Option<Result<(), String>>,
}

/// One entry of an endpoint's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at: Timestamp,
    pub kind: String,
    pub detail: String,
}

/// An endpoint. Id: `{tenant}:{project}:{alias}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointDoc {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub alias: String,
    /// The host's service name.
    pub service: String,
    /// The adapter that hosts it (`local`, `cloud-run`).
    pub hosting: String,
    pub accelerator: Accelerator,
    pub region: String,
    pub scaling: Scaling,
    pub access: Access,
    pub status: EndpointStatus,
    pub message: Option<String>,
    pub url: Option<String>,
    pub revisions: Vec<Revision>,
    /// The tag of the revision that serves unless a promotion moves traffic.
    pub stable: String,
    /// The last good revision before `stable`, for `rollback`.
    pub previous: Option<String>,
    /// The split last asked of the host.
    pub traffic: Vec<Traffic>,
    pub promotion: Option<Promotion>,
    /// Whether reconciliation has anything to do (deploying, deleting, promoting or rescaling).
    pub active: bool,
    pub events: Vec<Event>,
    pub created_at: Timestamp,
    pub created_by: UserId,
    pub updated_at: Timestamp,
    /// When the newest rollout was asked for.
    pub rollout_started_at: Timestamp,
    /// The host may not hold `scaling` yet (a change of bounds whose answer
    /// was lost): reconciliation sets it until the host reports it.
    #[serde(default)]
    pub rescale: bool,
}

impl Doc for EndpointDoc {
    const COLLECTION: &'static str = "endpoints";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

/// The id of the endpoint `alias` of a project.
pub fn endpoint_id(tenant: &TenantId, project: &ProjectId, alias: &str) -> String {
    format!("{tenant}:{project}:{alias}")
}

/// The host's service name: `ep-{alias}-{8 hex of the tenant, project and
/// alias}` (at most 44 characters; unique per project's alias).
pub fn service_name(tenant: &TenantId, project: &ProjectId, alias: &str) -> String {
    let digest = Sha256::digest(endpoint_id(tenant, project, alias).as_bytes());
    format!("ep-{alias}-{}", hex::encode(&digest[..4]))
}

impl EndpointDoc {
    /// Records an event (and the time of the change).
    pub fn event(&mut self, at: Timestamp, kind: &str, detail: impl Into<String>) {
        self.events.push(Event { at, kind: kind.to_owned(), detail: detail.into() });
        if self.events.len() > MAX_EVENTS {
            let over = self.events.len() - MAX_EVENTS;
            self.events.drain(..over);
        }
        self.updated_at = at;
    }

    pub fn revision(&self, tag: &str) -> Option<&Revision> {
        self.revisions.iter().find(|r| r.tag == tag)
    }

    /// The tag a new revision gets.
    pub fn next_tag(&self) -> String {
        format!("r{}", self.revisions.len() + 1)
    }

    /// The model versions the endpoint serves or may serve again without a
    /// new deploy: the stable revision's, the previous one's (`rollback`),
    /// every revision's in the traffic split, and a promotion's. Their
    /// bytes are kept whatever their age.
    pub fn versions_in_use(&self) -> impl Iterator<Item = &ModelVersionId> {
        let tags = [Some(self.stable.as_str()), self.previous.as_deref()]
            .into_iter()
            .flatten()
            .chain(self.traffic.iter().map(|t| t.tag.as_str()));
        tags.filter_map(|t| self.revision(t))
            .filter_map(Revision::model_version)
            .chain(self.promotion.iter().filter_map(|p| p.model_version.as_ref()))
    }

    /// Whether the endpoint runs a tenant's container (all its revisions do, or none).
    pub fn runs_container(&self) -> bool {
        self.revisions.first().is_some_and(|r| r.container().is_some())
    }

    /// The version the stable revision serves (none when it runs a container).
    pub fn model_version(&self) -> Option<&ModelVersionId> {
        self.revision(&self.stable).and_then(Revision::model_version)
    }

    /// Which revision serves a score, `draw` in `0..100` (uniform): by the split.
    pub fn choose(&self, draw: u32) -> &str {
        let mut acc = 0;
        for t in &self.traffic {
            acc += t.percent;
            if draw < acc {
                return &t.tag;
            }
        }
        &self.stable
    }

    /// Whether reconciliation has anything left to do.
    pub fn needs_reconcile(&self) -> bool {
        matches!(self.status, EndpointStatus::Deploying | EndpointStatus::Deleting)
            || self.promotion.is_some()
            || self.rescale
    }

    /// The split with `canary` at `percent` and the stable revision at the rest.
    pub fn split(&self, canary: &str, percent: u32) -> Vec<Traffic> {
        let mut split = vec![Traffic { tag: self.stable.clone(), percent: 100 - percent.min(100) }];
        if percent > 0 {
            split.push(Traffic { tag: canary.to_owned(), percent: percent.min(100) });
        }
        split.retain(|t| t.percent > 0);
        split
    }

    /// The endpoint as the API shows it.
    pub fn view(&self, usage: &Usage) -> EndpointView {
        let percent = |tag: &str| self.traffic.iter().find(|t| t.tag == tag).map_or(0, |t| t.percent);
        let canary = self.promotion.as_ref().map(|p| p.tag.as_str());
        let revisions = self
            .revisions
            .iter()
            .map(|r| RevisionView {
                tag: r.tag.clone(),
                model_version: r.model_version().cloned(),
                image: r.container().map(|c| c.image.clone()),
                traffic_percent: percent(&r.tag),
                role: if r.tag == self.stable {
                    "stable"
                } else if Some(r.tag.as_str()) == canary {
                    "canary"
                } else if self.previous.as_deref() == Some(&r.tag) {
                    "previous"
                } else {
                    "retired"
                }
                .into(),
                created_at: r.created_at,
            })
            .collect();
        let promotion = self.promotion.as_ref().map(|p| PromotionView {
            model_version: p.model_version.clone(),
            image: p.image.clone(),
            tag: p.tag.clone(),
            phase: p.gate.phase_name().to_owned(),
            canary_percent: p.gate.desired_percent(),
            started_at: p.started_at,
        });
        let stable = self.revision(&self.stable).or_else(|| self.revisions.first());
        EndpointView {
            alias: self.alias.clone(),
            tenant: self.tenant.clone(),
            project: self.project.clone(),
            model_version: stable.and_then(Revision::model_version).cloned(),
            image: stable.and_then(Revision::container).map(|c| c.image.clone()),
            accelerator: self.accelerator,
            region: self.region.clone(),
            min_instances: self.scaling.min,
            max_instances: self.scaling.max,
            access: self.access,
            status: self.status,
            message: self.message.clone(),
            hosting: self.hosting.clone(),
            service: self.service.clone(),
            url: self.url.clone(),
            revisions,
            promotion,
            usage: EndpointUsageView {
                requests: usage.requests,
                errors: usage.errors,
                compute_ms: usage.compute_ms,
                cost_micros: usage.cost_nanos / 1000,
            },
            events: self
                .events
                .iter()
                .map(|e| EndpointEventView { at: e.at, kind: e.kind.clone(), detail: e.detail.clone() })
                .collect(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            deprecated: Vec::new(),
        }
    }
}

/// The example a fit's `model.json` stores for the smoke test.
pub fn example_of(model_json: &[u8]) -> Option<(Map<String, Value>, f64)> {
    let v: Value = serde_json::from_slice(model_json).ok()?;
    let inputs = v.get("example")?.get("inputs")?.as_object()?.clone();
    let prediction = v.get("example")?.get("prediction")?.as_f64()?;
    Some((inputs, prediction))
}

/// The label naming the tenant whose endpoint a service is (a purge deletes by it).
pub const TENANT_LABEL: &str = "mapi-tenant";

/// Labels the host keeps on the service.
pub fn labels(tenant: &TenantId, project: &ProjectId, alias: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (TENANT_LABEL.to_owned(), tenant.to_string()),
        ("mapi-project".to_owned(), project.to_string()),
        ("mapi-alias".to_owned(), alias.to_owned()),
    ])
}

/// Checks a container's fields and reads its secret references: each
/// variable's name (`[A-Z_][A-Z0-9_]*`, none the host sets itself) and its
/// `SECRET[:VERSION]` (a name of letters, digits, `-` and `_`; a version
/// number or `latest`). The error says what to fix.
pub fn check_container(c: &Container) -> Result<Vec<mapi_hosting::SecretEnv>, String> {
    const MAX_SECRETS: usize = 32;
    const RESERVED: [&str; 4] = ["PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION"];
    let printable = |s: &str| s.bytes().all(|b| (0x21..0x7f).contains(&b));
    if c.image.is_empty() || c.image.len() > 1024 || !printable(&c.image) {
        return Err("container.image must be 1 to 1,024 printable characters without spaces".into());
    }
    if c.port == 0 {
        return Err("container.port must be a TCP port, 1 to 65535".into());
    }
    if !c.health_path.starts_with('/') || c.health_path.len() > 256 || !printable(&c.health_path) {
        return Err(
            "container.health_path must be a path starting with `/` (e.g. /health), at most 256 characters"
                .into(),
        );
    }
    if let Some(e) = &c.example
        && (!e.path.starts_with('/') || e.path.len() > 1024 || !printable(&e.path))
    {
        return Err("container.example.path must be a path starting with `/`".into());
    }
    if c.secrets.len() > MAX_SECRETS {
        return Err(format!("a container takes at most {MAX_SECRETS} secrets, not {}", c.secrets.len()));
    }
    c.secrets
        .iter()
        .map(|(env, reference)| {
            let env_ok = !env.is_empty()
                && env.len() <= 128
                && env.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                && !env.as_bytes()[0].is_ascii_digit();
            if !env_ok {
                return Err(format!(
                    "secret variable `{}` is not a variable name: use capitals, digits and `_`",
                    env.chars().take(40).collect::<String>()
                ));
            }
            if RESERVED.contains(&env.as_str()) || env.starts_with("MAPI_") || env.starts_with("CLOUD_RUN_") {
                return Err(format!("secret variable {env} is set by the host: name it otherwise"));
            }
            let (name, version) = reference.split_once(':').unwrap_or((reference, "latest"));
            let name_ok = (1..=200).contains(&name.len())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            let version_ok =
                version == "latest" || (!version.is_empty() && version.len() <= 10 && version.bytes().all(|b| b.is_ascii_digit()));
            if !name_ok || !version_ok {
                return Err(format!(
                    "secret of {env} is `{}`: give SECRET or SECRET:VERSION (a secret name of letters, digits, `-` and `_`; a version number or `latest`)",
                    reference.chars().take(60).collect::<String>()
                ));
            }
            Ok(mapi_hosting::SecretEnv { env: env.clone(), name: name.to_owned(), version: version.to_owned() })
        })
        .collect()
}
