//! From the Hosting port's types to the Admin API's Service, and back: the
//! body every revision is made with, and the state read from a Service and
//! its Revisions. One place, so the request a test sees is the one sent.

use std::collections::BTreeMap;

use google_cloud_run_v2::model;
use google_cloud_run_v2::model::condition::State;
use mapi_hosting::{
    Accelerator, Access, HostingError, ImageRef, MANAGED_LABEL, ModelRef, RevisionSpec, RevisionState,
    Rollout, Scaling, ServiceSpec, ServiceState, Serving, Traffic, server_env,
};

use super::ServicesSettings;

/// The name of the Cloud Storage volume bundles are read from.
pub const VOLUME: &str = "bundles";
/// Where the data bucket's objects appear in the container (`MAPI_SERVE_OBJECTS`).
pub const OBJECTS_DIR: &str = "/objects";
/// The node selector of an L4 revision.
pub const L4_SELECTOR: &str = "nvidia-l4";
/// The startup probe: every `PROBE_PERIOD_S` seconds, up to `PROBE_FAILURES`
/// times, so a server has 10 minutes to load its model.
pub const PROBE_PERIOD_S: i32 = 10;
pub const PROBE_FAILURES: i32 = 60;
pub const PROBE_TIMEOUT_S: i32 = 5;
/// The condition type of a Revision's readiness.
const READY: &str = "Ready";

/// The last segment of a resource name.
pub fn short(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// The revision mapi names for `tag` (set explicitly, so a repeat finds it).
pub fn revision_name(service: &str, tag: &str) -> String {
    format!("{service}-{tag}")
}

/// The tenant of a bundle: the segment after `t/` of its prefix.
pub fn tenant_of(bundle: &str) -> Result<&str, HostingError> {
    match bundle.strip_prefix("t/").and_then(|rest| rest.split('/').next()) {
        Some(t)
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Ok(t)
        }
        _ => Err(HostingError::Invalid(format!("bundle {bundle} is not under t/{{tenant}}/"))),
    }
}

/// Checks a service name or a tag: lowercase letters, digits and `-`,
/// starting with a letter, not ending with `-`.
pub fn check_name(what: &str, name: &str, max: usize) -> Result<(), HostingError> {
    let ok = (1..=max).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.as_bytes()[0].is_ascii_lowercase()
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(HostingError::Invalid(format!(
            "{what} `{}` is not valid: use 1–{max} lowercase letters, digits and `-`, starting with a letter",
            name.chars().take(64).collect::<String>()
        )))
    }
}

/// What a revision keeps of its service's spec. Instance bounds are not in
/// it: they are the service's (`Service.scaling`), shared by the revisions
/// that take traffic, so a tagged revision at 0 % keeps no instance warm and
/// a change of bounds needs no new revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub accelerator: Accelerator,
}

impl Shape {
    /// The shape an existing revision template was made with.
    pub fn of(template: &model::RevisionTemplate) -> Shape {
        let l4 = template.node_selector.as_ref().is_some_and(|n| n.accelerator == L4_SELECTOR);
        Shape { accelerator: if l4 { Accelerator::L4 } else { Accelerator::Cpu } }
    }
}

/// A service's instance bounds, as Cloud Run holds them.
pub fn service_scaling(scaling: Scaling) -> model::ServiceScaling {
    let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    model::ServiceScaling::new()
        .set_min_instance_count(count(scaling.min))
        .set_max_instance_count(count(scaling.max))
}

/// The bounds of a service read back (absent: Cloud Run's defaults, 0 and
/// no service-wide maximum, reported as the most a service may have).
pub fn scaling_of(service: &model::Service) -> Scaling {
    let count = |n: i32| u32::try_from(n).unwrap_or(0);
    let s = service.scaling.as_ref();
    let max = s.map_or(0, |s| count(s.max_instance_count));
    Scaling {
        min: s.map_or(0, |s| count(s.min_instance_count)),
        max: if max == 0 { mapi_hosting::MAX_INSTANCES } else { max },
    }
}

fn env(name: &str, value: impl Into<String>) -> model::EnvVar {
    model::EnvVar::new().set_name(name).set_value(value.into())
}

/// The revision template of `revision` of `service`.
pub fn template(
    settings: &ServicesSettings,
    service: &str,
    shape: Shape,
    revision: &RevisionSpec,
) -> Result<model::RevisionTemplate, HostingError> {
    let (cpus, mib) = shape.accelerator.resources();
    let mut limits = BTreeMap::from([("cpu", cpus.to_string()), ("memory", format!("{}Gi", mib / 1024))]);
    if shape.accelerator == Accelerator::L4 {
        limits.insert("nvidia.com/gpu", "1".to_owned());
    }
    let resources = model::ResourceRequirements::new()
        .set_limits(limits)
        // CPU revisions are request-billed; a GPU needs its CPU always allocated.
        .set_cpu_idle(shape.accelerator == Accelerator::Cpu);
    let (container, volume, account) = match &revision.serves {
        Serving::Model(model) => {
            let (container, volume) = model_server(settings, &revision.tag, model)?;
            (container, Some(volume), settings.service_account.clone())
        }
        Serving::Image(image) => {
            let (container, account) = own_container(settings, image)?;
            (container, None, Some(account))
        }
    };
    let mut t = model::RevisionTemplate::new()
        .set_revision(revision_name(service, &revision.tag))
        .set_containers([container.set_resources(resources)])
        .set_volumes(volume);
    if let Some(account) = account {
        t = t.set_service_account(account);
    }
    if shape.accelerator == Accelerator::L4 {
        t = t
            .set_node_selector(model::NodeSelector::new().set_accelerator(L4_SELECTOR))
            .set_gpu_zonal_redundancy_disabled(true);
    }
    Ok(t)
}

fn startup_probe(path: &str, port: i32) -> model::Probe {
    model::Probe::new()
        .set_http_get(model::HTTPGetAction::new().set_path(path).set_port(port))
        .set_period_seconds(PROBE_PERIOD_S)
        .set_timeout_seconds(PROBE_TIMEOUT_S)
        .set_failure_threshold(PROBE_FAILURES)
}

/// The platform's model server serving `model`, and the tenant's part of the bucket it reads.
fn model_server(
    settings: &ServicesSettings,
    tag: &str,
    model: &ModelRef,
) -> Result<(model::Container, model::Volume), HostingError> {
    let tenant = tenant_of(&model.bundle)?;
    let port = i32::from(server_env::CONTAINER_PORT);
    let mount = format!("{OBJECTS_DIR}/t/{tenant}");
    // A model whose predict is Python is served from the worker image of its base.
    let image = match &model.base {
        None => settings.server_image.clone(),
        Some(base) => settings.base_images.get(base).cloned().ok_or_else(|| {
            HostingError::Invalid(format!(
                "no model server image for base {base}: set it in MAPI_ENDPOINTS_BASE_IMAGES"
            ))
        })?,
    };
    let container = model::Container::new()
        .set_image(image)
        .set_args(["serve"])
        .set_env([
            env(server_env::OBJECTS, OBJECTS_DIR),
            env(server_env::BUNDLE, model.bundle.clone()),
            env(server_env::MANIFEST_SHA256, model.manifest_sha256.clone()),
            env(server_env::TRUSTED_KEYS, model.trusted_keys.clone()),
            env(server_env::REVISION, tag),
        ])
        .set_ports([model::ContainerPort::new().set_container_port(port)])
        .set_startup_probe(startup_probe(server_env::HEALTH_PATH, port))
        .set_volume_mounts([model::VolumeMount::new().set_name(VOLUME).set_mount_path(mount)]);
    let volume = model::Volume::new().set_name(VOLUME).set_gcs(
        model::GCSVolumeSource::new()
            .set_bucket(settings.bucket.clone())
            .set_read_only(true)
            .set_mount_options([format!("only-dir=t/{tenant}")]),
    );
    Ok((container, volume))
}

/// A tenant's own image, as that tenant's own account: no volume, and each
/// secret a Secret Manager reference to the tenant's `mapi-{tenant}-{name}`
/// (Cloud Run reads it as the revision's account; it is never a plain value).
fn own_container(
    settings: &ServicesSettings,
    image: &ImageRef,
) -> Result<(model::Container, String), HostingError> {
    let account = settings.container_service_account.as_ref().ok_or_else(|| {
        HostingError::Invalid(
            "this deployment runs no tenant's own container: its operator has not set \
             MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT (the account each tenant's containers run as)"
                .into(),
        )
    })?;
    let port = i32::from(image.port);
    let secrets = image.secrets.iter().map(|s| {
        let source = model::SecretKeySelector::new()
            .set_secret(secret_id(&image.tenant, &s.name))
            .set_version(s.version.clone());
        model::EnvVar::new()
            .set_name(s.env.clone())
            .set_value_source(model::EnvVarSource::new().set_secret_key_ref(source))
    });
    let container = model::Container::new()
        .set_image(image.image.clone())
        .set_env(secrets)
        .set_ports([model::ContainerPort::new().set_container_port(port)])
        .set_startup_probe(startup_probe(&image.health_path, port));
    Ok((container, account.replace("{tenant}", image.tenant.as_str())))
}

/// The Secret Manager secret a tenant's secret `name` is: `mapi-{tenant}-{name}`, so a tenant
/// names only its own.
pub fn secret_id(tenant: &mapi_domain::TenantId, name: &str) -> String {
    format!("mapi-{tenant}-{name}")
}

/// A traffic entry of a revision mapi made (percent 0 keeps its tag URL).
pub fn target(service: &str, tag: &str, percent: u32) -> model::TrafficTarget {
    model::TrafficTarget::new()
        .set_type(model::TrafficTargetAllocationType::Revision)
        .set_revision(revision_name(service, tag))
        .set_percent(i32::try_from(percent).unwrap_or(100))
        .set_tag(tag)
}

/// The body of a new service serving `first` at 100 %.
pub fn service(
    settings: &ServicesSettings,
    spec: &ServiceSpec,
    first: &RevisionSpec,
) -> Result<model::Service, HostingError> {
    let shape = Shape { accelerator: spec.accelerator };
    let mut labels = spec.labels.clone();
    labels.insert(MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned());
    Ok(model::Service::new()
        .set_labels(labels)
        .set_template(template(settings, &spec.name, shape, first)?)
        .set_traffic([target(&spec.name, &first.tag, 100)])
        .set_scaling(service_scaling(spec.scaling))
        .set_invoker_iam_disabled(spec.access == Access::Public))
}

/// Whether a service carries the managed-by label.
pub fn is_managed(service: &model::Service) -> bool {
    service.labels.get(MANAGED_LABEL.0).is_some_and(|v| v == MANAGED_LABEL.1)
}

fn rollout_of(condition: Option<&model::Condition>) -> Rollout {
    match condition.map(|c| (&c.state, c)) {
        Some((State::ConditionSucceeded, _)) => Rollout::Ready,
        Some((State::ConditionFailed, c)) => Rollout::Failed(c.message.clone()),
        _ => Rollout::Reconciling,
    }
}

/// Where the newest change of a service stands.
pub fn service_rollout(service: &model::Service) -> Rollout {
    if service.reconciling || service.observed_generation < service.generation {
        return Rollout::Reconciling;
    }
    rollout_of(service.terminal_condition.as_ref())
}

/// The port's view of `service`, its revisions' states read from
/// `revisions` (a listing of its Revisions; others are ignored).
pub fn state_of(service: &model::Service, revisions: &[model::Revision]) -> ServiceState {
    let tagged: Vec<&model::TrafficTarget> = service.traffic.iter().filter(|t| !t.tag.is_empty()).collect();
    let url_of = |tag: &str| {
        service.traffic_statuses.iter().find(|s| s.tag == tag && !s.uri.is_empty()).map(|s| s.uri.clone())
    };
    let revision_states = tagged
        .iter()
        .map(|t| {
            let own = revisions.iter().find(|r| short(&r.name) == t.revision);
            RevisionState {
                tag: t.tag.clone(),
                name: t.revision.clone(),
                url: url_of(&t.tag),
                rollout: rollout_of(own.and_then(|r| r.conditions.iter().find(|c| c.r#type == READY))),
            }
        })
        .collect();
    ServiceState {
        name: short(&service.name).to_owned(),
        url: Some(service.uri.clone()).filter(|u| !u.is_empty()),
        rollout: service_rollout(service),
        revisions: revision_states,
        traffic: tagged
            .iter()
            .map(|t| Traffic { tag: t.tag.clone(), percent: u32::try_from(t.percent).unwrap_or(0) })
            .collect(),
        scaling: scaling_of(service),
        labels: service.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_is_the_bundles_first_segment_after_t() {
        assert_eq!(tenant_of("t/acme/p/default/runs/r1/a1/bundle"), Ok("acme"));
        assert!(tenant_of("x/acme/bundle").is_err());
        assert!(tenant_of("t//bundle").is_err());
        assert!(tenant_of("t/../bundle").is_err());
    }

    #[test]
    fn a_shape_survives_its_template() {
        let s = ServicesSettings::new("p", "img", "b");
        let r = RevisionSpec {
            tag: "r1".into(),
            serves: Serving::Model(ModelRef {
                bundle: "t/acme/x/bundle".into(),
                manifest_sha256: "00".into(),
                trusted_keys: "[]".into(),
                files: vec![],
                base: None,
            }),
        };
        for accelerator in [Accelerator::Cpu, Accelerator::L4] {
            let shape = Shape { accelerator };
            let t = template(&s, "svc", shape, &r).expect("template");
            assert_eq!(Shape::of(&t), shape);
            assert_eq!(t.revision, "svc-r1");
            assert!(t.scaling.is_none(), "bounds are the service's, never a revision's");
        }
    }

    #[test]
    fn a_service_holds_its_bounds_for_all_its_revisions() {
        let s = ServicesSettings::new("p", "img", "b");
        let model = ModelRef {
            bundle: "t/acme/x/bundle".into(),
            manifest_sha256: "00".into(),
            trusted_keys: "[]".into(),
            files: vec![],
            base: None,
        };
        let spec = ServiceSpec {
            name: "svc".into(),
            region: "us".into(),
            accelerator: Accelerator::L4,
            scaling: Scaling { min: 1, max: 4 },
            access: Access::Private,
            labels: BTreeMap::new(),
        };
        let r = RevisionSpec { tag: "r1".into(), serves: Serving::Model(model) };
        let body = service(&s, &spec, &r).expect("service");
        assert_eq!(scaling_of(&body), spec.scaling);
        assert!(body.template.as_ref().is_some_and(|t| t.scaling.is_none()));
        assert_eq!(scaling_of(&model::Service::new()).max, mapi_hosting::MAX_INSTANCES);
    }

    #[test]
    fn a_python_model_is_served_from_its_base_s_image() {
        let mut s = ServicesSettings::new("p", "img", "b");
        let mut model = ModelRef {
            bundle: "t/acme/x/bundle".into(),
            manifest_sha256: "00".into(),
            trusted_keys: "[]".into(),
            files: vec![],
            base: Some("base-forecast".into()),
        };
        let r = RevisionSpec { tag: "r1".into(), serves: Serving::Model(model.clone()) };
        let shape = Shape { accelerator: Accelerator::Cpu };
        let refused = template(&s, "svc", shape, &r).expect_err("no image for the base");
        assert!(refused.to_string().contains("MAPI_ENDPOINTS_BASE_IMAGES"), "{refused}");
        s.base_images.insert("base-forecast".into(), "forecast-img".into());
        let t = template(&s, "svc", shape, &r).expect("template");
        assert_eq!(t.containers[0].image, "forecast-img");
        model.base = None;
        let r = RevisionSpec { tag: "r1".into(), serves: Serving::Model(model) };
        assert_eq!(template(&s, "svc", shape, &r).expect("template").containers[0].image, "img");
    }

    #[test]
    fn a_tenants_container_runs_as_the_tenants_account_with_secret_references_and_no_bucket() {
        let mut s = ServicesSettings::new("p", "img", "b");
        s.service_account = Some("servers@p.iam.gserviceaccount.com".into());
        let image = ImageRef {
            image: "us-docker.pkg.dev/acme/models/laya-serve:0.3.1".into(),
            port: 8000,
            health_path: "/ready".into(),
            tenant: mapi_domain::TenantId::parse("acme").expect("tenant"),
            secrets: vec![mapi_hosting::SecretEnv {
                env: "HF_TOKEN".into(),
                name: "hf".into(),
                version: "3".into(),
            }],
        };
        let r = RevisionSpec { tag: "r2".into(), serves: Serving::Image(image) };
        let shape = Shape { accelerator: Accelerator::L4 };
        let refused = template(&s, "svc", shape, &r).expect_err("no account for containers");
        assert!(refused.to_string().contains("MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT"), "{refused}");
        s.container_service_account = Some("ep-{tenant}@p.iam.gserviceaccount.com".into());
        let t = template(&s, "svc", shape, &r).expect("template");
        assert_eq!(t.service_account, "ep-acme@p.iam.gserviceaccount.com");
        assert!(t.volumes.is_empty(), "a tenant's container mounts nothing of the platform's bucket");
        let c = &t.containers[0];
        assert_eq!(c.image, "us-docker.pkg.dev/acme/models/laya-serve:0.3.1");
        assert_eq!(c.ports[0].container_port, 8000);
        let probe = c.startup_probe.as_ref().and_then(|p| p.http_get()).expect("an HTTP startup probe");
        assert_eq!((probe.path.as_str(), probe.port), ("/ready", 8000));
        assert_eq!(c.env.len(), 1);
        assert_eq!(c.env[0].name, "HF_TOKEN");
        assert!(c.env[0].value().is_none(), "a secret is never a plain value on the revision");
        let secret =
            c.env[0].value_source().and_then(|v| v.secret_key_ref.as_ref()).expect("a secret reference");
        assert_eq!((secret.secret.as_str(), secret.version.as_str()), ("mapi-acme-hf", "3"));
        assert_eq!(Shape::of(&t), shape);
    }

    #[test]
    fn rollouts_follow_reconciling_generations_and_the_terminal_condition() {
        let done = |state: State, message: &str| {
            model::Service::new()
                .set_generation(2)
                .set_observed_generation(2)
                .set_terminal_condition(model::Condition::new().set_state(state).set_message(message))
        };
        assert_eq!(service_rollout(&done(State::ConditionSucceeded, "")), Rollout::Ready);
        assert_eq!(service_rollout(&done(State::ConditionFailed, "no")), Rollout::Failed("no".into()));
        assert_eq!(service_rollout(&done(State::ConditionReconciling, "")), Rollout::Reconciling);
        assert_eq!(
            service_rollout(&done(State::ConditionSucceeded, "").set_reconciling(true)),
            Rollout::Reconciling
        );
        assert_eq!(
            service_rollout(&done(State::ConditionSucceeded, "").set_observed_generation(1)),
            Rollout::Reconciling,
            "an older generation's condition says nothing of the newest change"
        );
    }
}
