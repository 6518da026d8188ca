//! The cloud-run adapter of the Hosting port: a model endpoint's service is
//! a Cloud Run **Service**, each model version one **Revision** of it named
//! `{service}-{tag}`, each revision tagged (its own URL) in the Service's
//! traffic, at 0 % until the split moves. Spoken through the official
//! `google-cloud-run-v2` client (Admin API v2, REST/JSON), which retries
//! nothing here: the caller repeats, and every call is safe to repeat.
//!
//! - **Body** ([`body`]): the model-server image running `serve` on
//!   [`mapi_hosting::server_env::CONTAINER_PORT`], told its bundle through
//!   the [`mapi_hosting::server_env`] variables; the data bucket mounted read-only as a Cloud
//!   Storage volume (`only-dir=t/{tenant}`) at `/objects/t/{tenant}`, so the
//!   object `K` is the file `/objects/K`; a startup probe on `/health` for
//!   up to 10 minutes; 1 vCPU / 2 GiB request-billed, or an L4 with 4 vCPU /
//!   16 GiB, zonal redundancy off; `invokerIamDisabled` only when public;
//!   the spec's labels plus [`mapi_hosting::MANAGED_LABEL`]. `ModelRef.files` is not sent:
//!   the bucket has them.
//! - **Rollouts** are long-running operations that are started, not
//!   awaited: `get` reads the Service's `reconciling`, its generations and
//!   its `terminalCondition`, and each revision's `Ready` condition, so
//!   [`mapi_hosting::wait_ready`] polls `get`.
//! - **Regions**: `us` and `eu` map to the configured regions, a named
//!   region must be one of `MAPI_ENDPOINTS_REGIONS`, an `l4` service one of
//!   the GPU regions (refused before any call). The port names a service by
//!   its name only, so `get` looks in the region it last found it in, then
//!   in every configured region in order; `list` lists each.
//! - **Errors** keep Google's answer: 404 `NotFound`, 409 `AlreadyExists`,
//!   429 `Throttled`, 5xx and lost answers `Unavailable`, 400
//!   `INVALID_ARGUMENT` `Invalid`, anything else `Api` with the HTTP status
//!   and Google's code (`PERMISSION_DENIED`).
//! - **Routes**: the service's URL, or a tag's from `trafficStatuses`
//!   (cached by name: Cloud Run's URLs do not change while a service
//!   exists); for a private service an ID token whose audience is the
//!   service URL ([`id_tokens`]), minted per request from a cache.
//!
//! Tested against `FakeCloudRunServices` (in `mapi-tests`), which speaks
//! the Admin API's REST JSON, runs each revision as a real process and
//! enforces IAM on the service URLs.

pub mod body;
pub mod id_tokens;
pub mod instances;
pub mod settings;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_run_v2::client::{Revisions, Services};
use google_cloud_run_v2::model;
use mapi_clock::Clock;
use mapi_hosting::{
    Hosting, HostingError, RevisionSpec, Route, Scaling, ServiceSpec, ServiceState, Traffic, check_scaling,
    check_split,
};

pub use id_tokens::{GoogleIdTokens, IdToken, IdTokens, TokenCache};
pub use settings::ServicesSettings;

use crate::{BuildError, Credentials};

/// The adapter's name.
pub const NAME: &str = "cloud-run";

/// The longest service name (the port's rule; Cloud Run allows 49 with tags).
const MAX_NAME: usize = 49;
/// The longest tag (a revision name `{service}-{tag}` stays within 63).
const MAX_TAG: usize = 13;

/// Where a route goes, as last read from the service.
#[derive(Clone, Debug)]
struct Target {
    url: String,
    audience: String,
    private: bool,
}

/// The cloud-run hosting adapter.
#[derive(Clone)]
pub struct CloudRunHosting {
    inner: Arc<Inner>,
}

struct Inner {
    settings: ServicesSettings,
    services: Services,
    revisions: Revisions,
    /// Cloud Monitoring, where instances' lifetimes are read.
    monitoring: google_cloud_monitoring_v3::client::MetricService,
    tokens: TokenCache,
    /// The region each service was last found in.
    regions: Mutex<HashMap<String, String>>,
    routes: Mutex<HashMap<(String, Option<String>), Target>>,
}

impl std::fmt::Debug for CloudRunHosting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudRunHosting")
            .field("project", &self.inner.settings.project)
            .field("regions", &self.inner.settings.regions)
            .finish_non_exhaustive()
    }
}

/// The port's error for a failed Admin API call about `service`.
pub fn hosting_error(service: &str, e: &GaxError) -> HostingError {
    let google = e.status();
    let code = google.map(|s| s.code.name().to_owned()).unwrap_or_default();
    let message = google.map_or_else(|| e.to_string(), |s| s.message.clone());
    match e.http_status_code() {
        Some(404) => HostingError::NotFound(service.to_owned()),
        Some(409) => HostingError::AlreadyExists(service.to_owned()),
        Some(429) => {
            let after = e
                .http_headers()
                .and_then(|h| h.get("retry-after"))
                .and_then(|v| v.to_str().ok())
                .map(|v| format!(" (retry after {v} s)"))
                .unwrap_or_default();
            HostingError::Throttled(format!("{message}{after}").into())
        }
        Some(status) if status >= 500 => {
            HostingError::Unavailable(format!("{status} {code}: {message}").into())
        }
        Some(400) if code == "INVALID_ARGUMENT" => HostingError::Invalid(message),
        Some(status) => HostingError::Api { status, code, message },
        // The request could not be made: nothing left this process.
        None if e.is_binding() || e.is_serialization() => HostingError::Invalid(e.to_string()),
        None if e.is_authentication() => HostingError::Api {
            status: 401,
            code: "UNAUTHENTICATED".into(),
            message: format!("no credentials for the Admin API: {e}"),
        },
        // No answer, or one lost on the way: the change may have been made.
        None => HostingError::Unavailable(e.to_string().into()),
    }
}

impl CloudRunHosting {
    /// Builds the clients. `id_tokens` mints the tokens of private
    /// services ([`GoogleIdTokens::application_default`] in the cloud),
    /// cached on `clock`.
    pub async fn new(
        settings: ServicesSettings,
        credentials: Credentials,
        id_tokens: Arc<dyn IdTokens>,
        clock: Arc<dyn Clock>,
    ) -> Result<CloudRunHosting, BuildError> {
        settings.validate().map_err(BuildError)?;
        let services = admin_client!(Services, settings.endpoint, credentials);
        let revisions = admin_client!(Revisions, settings.endpoint, credentials);
        let monitoring = admin_client!(
            google_cloud_monitoring_v3::client::MetricService,
            settings.monitoring_endpoint,
            credentials
        );
        Ok(CloudRunHosting {
            inner: Arc::new(Inner {
                settings,
                services,
                revisions,
                monitoring,
                tokens: TokenCache::new(id_tokens, clock),
                regions: Mutex::new(HashMap::new()),
                routes: Mutex::new(HashMap::new()),
            }),
        })
    }

    pub fn settings(&self) -> &ServicesSettings {
        &self.inner.settings
    }

    fn parent(&self, region: &str) -> String {
        format!("projects/{}/locations/{region}", self.inner.settings.project)
    }

    fn full_name(&self, region: &str, service: &str) -> String {
        format!("{}/services/{service}", self.parent(region))
    }

    fn remember(&self, service: &str, region: Option<&str>) {
        let mut regions = self.inner.regions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match region {
            Some(r) => regions.insert(service.to_owned(), r.to_owned()),
            None => regions.remove(service),
        };
        if region.is_none() {
            self.forget_routes(service);
        }
    }

    fn forget_routes(&self, service: &str) {
        let mut routes = self.inner.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        routes.retain(|(s, _), _| s != service);
    }

    /// The service and its full name: in the region it was last found in,
    /// else in the first configured region that has it.
    async fn locate(&self, service: &str) -> Result<model::Service, HostingError> {
        body::check_name("service name", service, MAX_NAME)?;
        let cached = {
            let regions = self.inner.regions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            regions.get(service).cloned()
        };
        let order =
            cached.iter().chain(self.inner.settings.regions.iter().filter(|r| Some(*r) != cached.as_ref()));
        for region in order {
            let got =
                self.inner.services.get_service().set_name(self.full_name(region, service)).send().await;
            match got {
                Ok(s) => {
                    self.remember(service, Some(region));
                    return Ok(s);
                }
                Err(e) if e.http_status_code() == Some(404) => continue,
                Err(e) => return Err(hosting_error(service, &e)),
            }
        }
        self.remember(service, None);
        Err(HostingError::NotFound(service.to_owned()))
    }

    /// Every Revision under `parent` (a service, or `…/services/-`).
    async fn revisions_of(
        &self,
        service: &str,
        parent: String,
    ) -> Result<Vec<model::Revision>, HostingError> {
        let mut all = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .inner
                .revisions
                .list_revisions()
                .set_parent(parent.clone())
                .set_page_size(500)
                .set_page_token(token)
                .send()
                .await
                .map_err(|e| hosting_error(service, &e))?;
            all.extend(page.revisions);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            token = page.next_page_token;
        }
    }

    /// Sends `service` (named in full) with only the fields of `mask` changed.
    async fn update(&self, name: &str, service: model::Service, mask: &[&str]) -> Result<(), HostingError> {
        let op = self
            .inner
            .services
            .update_service()
            .set_service(service)
            .set_update_mask(google_cloud_wkt::FieldMask::default().set_paths(mask.iter().copied()))
            .send()
            .await
            .map_err(|e| hosting_error(name, &e))?;
        tracing::info!(operation = %op.name, service = name, fields = ?mask, "services.patch answered");
        Ok(())
    }

    async fn target(&self, service: &str, tag: Option<&str>) -> Result<Target, HostingError> {
        let key = (service.to_owned(), tag.map(str::to_owned));
        if let Some(t) = self.inner.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key)
        {
            return Ok(t.clone());
        }
        let s = self.locate(service).await?;
        if s.uri.is_empty() {
            return Err(HostingError::Unavailable(format!("service {service} has no URL yet").into()));
        }
        let url = match tag {
            None => s.uri.clone(),
            Some(tag) => {
                if !s.traffic.iter().any(|t| t.tag == tag) {
                    return Err(HostingError::Invalid(format!(
                        "service {service} has no revision tagged {tag}"
                    )));
                }
                let status = s.traffic_statuses.iter().find(|t| t.tag == tag && !t.uri.is_empty());
                let Some(status) = status else {
                    return Err(HostingError::Unavailable(
                        format!("revision {tag} of service {service} has no URL yet").into(),
                    ));
                };
                status.uri.clone()
            }
        };
        let target = Target { url, audience: s.uri.clone(), private: !s.invoker_iam_disabled };
        self.inner
            .routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, target.clone());
        Ok(target)
    }
}

#[async_trait]
impl Hosting for CloudRunHosting {
    fn name(&self) -> &'static str {
        NAME
    }

    fn container_refusal(&self) -> Option<String> {
        // A container's process reaches its revision's account through the metadata server:
        // it runs only as an account of its tenant's own.
        let s = self.settings();
        (s.container_service_account.is_none() || s.container_images.is_none()).then(|| {
            "this deployment runs no tenant's own container: its operator has not set \
             MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT (the account each tenant's containers run as) and \
             MAPI_ENDPOINTS_CONTAINER_IMAGES (where each tenant's images are)"
                .to_owned()
        })
    }

    fn image_refusal(&self, tenant: &mapi_domain::TenantId, image: &str) -> Option<String> {
        let prefix = self.settings().container_images.as_ref()?.replace("{tenant}", tenant.as_str());
        // A reference is a registry path: no `..`, no scheme, and within the tenant's repository.
        let within = image.starts_with(&prefix) && !image.contains("..") && !image.contains("//");
        (!within).then(|| {
            format!(
                "image `{}` is not an image of tenant {tenant}: push it under {prefix} and name it there",
                image.chars().take(200).collect::<String>()
            )
        })
    }

    fn uploaded_code_refusal(&self) -> Option<String> {
        // A revision's account reads the tenant's bundles and its metadata
        // server answers any process of the container: tenant code there would
        // hold the account's token. Serving it needs an account per tenant.
        Some(
            "Cloud Run endpoints do not serve a plugin's model yet: a model server's identity would be \
             within reach of the plugin's code"
                .to_owned(),
        )
    }

    async fn create(&self, spec: &ServiceSpec, first: &RevisionSpec) -> Result<(), HostingError> {
        body::check_name("service name", &spec.name, MAX_NAME)?;
        body::check_name("revision tag", &first.tag, MAX_TAG)?;
        let region = self.inner.settings.region_of(&spec.region, spec.accelerator)?;
        let service = body::service(&self.inner.settings, spec, first)?;
        self.forget_routes(&spec.name);
        let op = self
            .inner
            .services
            .create_service()
            .set_parent(self.parent(&region))
            .set_service_id(spec.name.clone())
            .set_service(service)
            .send()
            .await
            .map_err(|e| hosting_error(&spec.name, &e))?;
        tracing::info!(operation = %op.name, service = %spec.name, %region, "services.create answered");
        self.remember(&spec.name, Some(&region));
        Ok(())
    }

    async fn add_revision(&self, service: &str, revision: &RevisionSpec) -> Result<(), HostingError> {
        body::check_name("revision tag", &revision.tag, MAX_TAG)?;
        let s = self.locate(service).await?;
        if s.traffic.iter().any(|t| t.tag == revision.tag) {
            return Ok(());
        }
        let shape = s.template.as_ref().map(body::Shape::of).ok_or_else(|| {
            HostingError::Unavailable(format!("service {service} was read without its template").into())
        })?;
        let template = body::template(&self.inner.settings, service, shape, revision)?;
        let mut traffic = s.traffic.clone();
        traffic.push(body::target(service, &revision.tag, 0));
        let change =
            model::Service::new().set_name(s.name.clone()).set_template(template).set_traffic(traffic);
        self.update(service, change, &["template", "traffic"]).await
    }

    async fn set_traffic(&self, service: &str, traffic: &[Traffic]) -> Result<(), HostingError> {
        check_split(traffic)?;
        let s = self.locate(service).await?;
        if let Some(t) = traffic.iter().find(|t| !s.traffic.iter().any(|x| x.tag == t.tag)) {
            return Err(HostingError::Invalid(format!("service {service} has no revision tagged {}", t.tag)));
        }
        let split = s.traffic.iter().filter(|t| !t.tag.is_empty()).map(|t| {
            let percent = traffic.iter().find(|x| x.tag == t.tag).map_or(0, |x| x.percent);
            body::target(service, &t.tag, percent).set_revision(t.revision.clone())
        });
        let change = model::Service::new().set_name(s.name.clone()).set_traffic(split);
        self.update(service, change, &["traffic"]).await
    }

    async fn set_scaling(&self, service: &str, scaling: Scaling) -> Result<(), HostingError> {
        check_scaling(scaling)?;
        let s = self.locate(service).await?;
        if body::scaling_of(&s) == scaling && s.scaling.is_some() {
            return Ok(());
        }
        let change =
            model::Service::new().set_name(s.name.clone()).set_scaling(body::service_scaling(scaling));
        self.update(service, change, &["scaling"]).await
    }

    async fn get(&self, service: &str) -> Result<ServiceState, HostingError> {
        let s = self.locate(service).await?;
        let revisions = self.revisions_of(service, s.name.clone()).await?;
        Ok(body::state_of(&s, &revisions))
    }

    async fn list(&self) -> Result<Vec<ServiceState>, HostingError> {
        let mut out = Vec::new();
        for region in &self.inner.settings.regions {
            let mut managed = Vec::new();
            let mut token = String::new();
            loop {
                let page = self
                    .inner
                    .services
                    .list_services()
                    .set_parent(self.parent(region))
                    .set_page_size(100)
                    .set_page_token(token)
                    .send()
                    .await;
                let page = match page {
                    Ok(p) => p,
                    // A region without the API enabled has no services.
                    Err(e) if e.http_status_code() == Some(404) => break,
                    Err(e) => return Err(hosting_error(&format!("in {region}"), &e)),
                };
                managed.extend(page.services.into_iter().filter(body::is_managed));
                if page.next_page_token.is_empty() {
                    break;
                }
                token = page.next_page_token;
            }
            if managed.is_empty() {
                continue;
            }
            let revisions = self.revisions_of(&format!("in {region}"), self.full_name(region, "-")).await?;
            for s in &managed {
                let own: Vec<model::Revision> = revisions
                    .iter()
                    .filter(|r| r.service == s.name || r.service == body::short(&s.name))
                    .cloned()
                    .collect();
                self.remember(body::short(&s.name), Some(region));
                out.push(body::state_of(s, &own));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete(&self, service: &str) -> Result<(), HostingError> {
        let s = self.locate(service).await?;
        let op = self
            .inner
            .services
            .delete_service()
            .set_name(s.name.clone())
            .send()
            .await
            .map_err(|e| hosting_error(service, &e))?;
        tracing::info!(operation = %op.name, service, "services.delete answered");
        self.remember(service, None);
        Ok(())
    }

    async fn instance_time(
        &self,
        service: &str,
        window: (mapi_domain::Timestamp, mapi_domain::Timestamp),
    ) -> Result<Option<std::time::Duration>, HostingError> {
        let project = &self.inner.settings.project;
        instances::read(&self.inner.monitoring, project, service, window).await.map(Some)
    }

    fn reporting_lag(&self) -> std::time::Duration {
        instances::LAG
    }

    async fn route(&self, service: &str, tag: Option<&str>) -> Result<Route, HostingError> {
        let target = self.target(service, tag).await?;
        let authorization = if target.private {
            Some(format!("Bearer {}", self.inner.tokens.get(&target.audience).await?))
        } else {
            None
        };
        Ok(Route { url: target.url, authorization })
    }
}
