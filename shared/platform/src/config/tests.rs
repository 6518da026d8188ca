use std::collections::HashMap;

use super::*;
use crate::Service;

fn with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Config::from_lookup(&|k| m.get(k).cloned())
}

#[test]
fn the_queue_is_local_unless_cloudtasks_is_chosen_with_its_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let home_s = home.to_string_lossy().into_owned();
    assert_eq!(with(&[("MAPI_HOME", &home_s)]).expect("defaults").cloudtasks, None);
    let e = with(&[("MAPI_HOME", &home_s), ("MAPI_QUEUE", "cloudtasks")]).expect_err("no project");
    assert!(e.to_string().contains("MAPI_CLOUDTASKS_PROJECT"), "{e}");
    let e = with(&[("MAPI_HOME", &home_s), ("MAPI_QUEUE", "pubsub")]).expect_err("unknown");
    assert!(e.to_string().contains("MAPI_QUEUE"), "{e}");
    let c = with(&[
        ("MAPI_HOME", &home_s),
        ("MAPI_QUEUE", "cloudtasks"),
        ("MAPI_CLOUDTASKS_PROJECT", "mapi-prod"),
        ("MAPI_CLOUDTASKS_SERVICE_ACCOUNT", "tasks@mapi-prod.iam.gserviceaccount.com"),
        ("MAPI_CLOUDTASKS_ENDPOINT", "http://127.0.0.1:9999"),
        ("MAPI_METER_URL", "https://meter.example"),
    ])
    .expect("cloudtasks");
    assert_eq!(
        c.cloudtasks,
        Some(CloudTasksConfig {
            project: "mapi-prod".into(),
            location: "europe-west1".into(),
            target: None,
            submit_tasks_url: None,
            meter_url: Some("https://meter.example".into()),
            tick_url: None,
            service_account: "tasks@mapi-prod.iam.gserviceaccount.com".into(),
            audience: None,
            endpoint: Some("http://127.0.0.1:9999".into()),
        })
    );
}

#[test]
fn defaults_need_no_environment_and_secrets_persist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let home_s = home.to_string_lossy().into_owned();
    let a = with(&[("MAPI_HOME", &home_s)]).expect("defaults");
    assert_eq!((a.port, a.public_url.as_str(), a.profile), (8080, "http://127.0.0.1:8080", Profile::Dev));
    assert_eq!(a.sqlite_durability, Durability::Full);
    let b = with(&[("MAPI_HOME", &home_s), ("PORT", "9000")]).expect("again");
    assert_eq!(a.secrets, b.secrets, "dev secrets are kept in MAPI_HOME");
    assert_eq!(b.public_url, "http://127.0.0.1:9000");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(home.join("secrets.json")).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn bad_values_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let e = with(&[("MAPI_HOME", &home), ("PORT", "eighty")]).expect_err("bad port");
    assert!(e.to_string().contains("PORT"), "{e}");
    let e = with(&[("MAPI_HOME", &home), ("MAPI_LOCAL_MEMORY_MIB", "S=lots")]).expect_err("bad map");
    assert!(e.to_string().contains("S=512"), "{e}");
    let e = with(&[&CLOUD_EXECUTOR[..], &[("MAPI_PROFILE", "multi-tenant"), ("MAPI_HOME", &home)]].concat())
        .expect_err("no secrets");
    assert!(e.to_string().contains("MAPI_INTERNAL_TOKEN"), "{e}");
    let m = with(&[("MAPI_HOME", &home), ("MAPI_LOCAL_MEMORY_MIB", "S=64, m=256")]).expect("map");
    assert_eq!(m.local_memory_mib.get(&ResourceClass::M), Some(&256));
}

#[test]
fn push_authentication_needs_both_settings_and_well_formed_subscriptions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let d = with(&[("MAPI_HOME", &home)]).expect("defaults");
    assert_eq!(d.pubsub_push, None);
    assert!(d.pubsub_push_subscriptions.is_empty(), "any subscription by default");
    assert_eq!(d.google_jwks_url, "https://www.googleapis.com/oauth2/v3/certs");

    let audience = ("MAPI_PUBSUB_PUSH_AUDIENCE", "https://api.example.com/internal/events");
    let account = ("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT", "Mapi-Events-Push@p.iam.gserviceaccount.com");
    for half in [audience, account] {
        let e = with(&[("MAPI_HOME", &home), half]).expect_err("one of the two");
        assert!(e.to_string().contains("set both"), "{e}");
    }
    let subs = "projects/p/subscriptions/a, projects/p/subscriptions/b";
    let c = with(&[
        ("MAPI_HOME", &home),
        audience,
        account,
        ("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS", subs),
        ("MAPI_GOOGLE_JWKS_URL", "http://127.0.0.1:9/jwks"),
    ])
    .expect("configured");
    let push = c.pubsub_push.expect("push auth");
    assert_eq!(push.audience, "https://api.example.com/internal/events");
    assert_eq!(push.service_account, "mapi-events-push@p.iam.gserviceaccount.com");
    assert_eq!(c.pubsub_push_subscriptions, ["projects/p/subscriptions/a", "projects/p/subscriptions/b"]);
    assert_eq!(c.google_jwks_url, "http://127.0.0.1:9/jwks");

    for bad in ["mapi-run-events-push", "projects/p/topics/t", "projects//subscriptions/s"] {
        let e = with(&[("MAPI_HOME", &home), ("MAPI_PUBSUB_PUSH_SUBSCRIPTIONS", bad)]).expect_err(bad);
        assert!(e.to_string().contains(bad), "{e}");
    }
    let e = with(&[("MAPI_HOME", &home), ("MAPI_SIGNER", "kms")]).expect_err("no key version");
    assert!(e.to_string().contains("MAPI_KMS_KEY_VERSION"), "{e}");
    let v = "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/2";
    let k = with(&[("MAPI_HOME", &home), ("MAPI_SIGNER", "kms"), ("MAPI_KMS_KEY_VERSION", v)]).expect("kms");
    assert!(matches!(k.signer, SignerConfig::Kms(ref s) if s.key_version == v));
    let e = with(&[("MAPI_HOME", &home), audience, ("MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT", "nobody")])
        .expect_err("not an e-mail");
    assert!(e.to_string().contains("nobody"), "{e}");
}

#[test]
fn every_variable_is_declared_once_and_its_default_is_what_unset_means() {
    let all: Vec<&mapi_settings::Var> = variables().collect();
    mapi_settings::check_unique(&all).expect("unique names");
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let defaults = mapi_settings::defaults_env(&all);
    let home_only = |k: &str| (k == "MAPI_HOME").then(|| home.clone());
    let spelled_out = |k: &str| if k == "MAPI_HOME" { Some(home.clone()) } else { defaults(k) };
    let unset = Config::from_lookup(&home_only).expect("unset");
    let set = Config::from_lookup(&spelled_out).expect("every default, spelled out");
    assert_eq!(format!("{unset:?}"), format!("{set:?}"), "a declared default differs from what unset means");
}

#[test]
fn every_variable_listed_is_read_by_someone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let v = "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1".to_owned();
    let cloud: Vec<(&str, String)> = vec![
        ("MAPI_HOME", home.clone()),
        ("MAPI_STORE", "firestore".into()),
        ("MAPI_FIRESTORE_PROJECT", "p-1".into()),
        ("MAPI_OBJECTS", "gcs".into()),
        ("MAPI_GCS_BUCKET", "b-1".into()),
        ("MAPI_QUEUE", "cloudtasks".into()),
        ("MAPI_CLOUDTASKS_PROJECT", "p-1".into()),
        ("MAPI_CLOUDTASKS_SERVICE_ACCOUNT", "t@p-1.iam.gserviceaccount.com".into()),
        ("MAPI_EXECUTOR", "cloudrun-jobs".into()),
        ("MAPI_CLOUDRUN_PROJECT", "p-1".into()),
        ("MAPI_SIGNER", "kms".into()),
        ("MAPI_KMS_KEY_VERSION", v),
        ("MAPI_HOSTING", "cloud-run".into()),
        ("MAPI_ENDPOINTS_PROJECT", "p-1".into()),
        ("MAPI_ENDPOINTS_SERVER_IMAGE", "europe-docker.pkg.dev/p-1/mapi/worker:1".into()),
        ("MAPI_ENDPOINTS_BUCKET", "b-1".into()),
    ];
    let lookup =
        |vars: &[(&str, String)], k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    let local = [("MAPI_HOME", home.clone())];
    let mut read = mapi_settings::names_read(&|k| lookup(&cloud, k), |env| {
        Config::read(env, Uses::ALL).expect("cloud");
    });
    read.extend(mapi_settings::names_read(&|k| lookup(&local, k), |env| {
        Config::read(env, Uses::ALL).expect("local");
    }));
    read.extend(mapi_settings::names_read(&|_| None, |env| {
        mapi_runtime::RuntimeConfig::from_lookup(env).expect("runtime");
    }));
    let unread: Vec<&str> = variables().map(|v| v.name).filter(|n| !read.contains(*n)).collect();
    assert!(unread.is_empty(), "listed but never read: {unread:?}");
}

#[test]
fn a_function_that_does_not_use_a_section_does_not_read_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let env = |k: &str| match k {
        "MAPI_HOME" => Some(home.clone()),
        "MAPI_JOB_FANOUT_BATCH" => Some("many".into()),
        _ => None,
    };
    let e = Config::read(&env, Uses::ALL).expect_err("bad job setting");
    assert_eq!(e.to_string(), "MAPI_JOB_FANOUT_BATCH has an invalid value `many`: write a whole number");
    let c = Config::read(&env, Uses::only(&[Section::Push])).expect("jobs are not read");
    assert_eq!(c.jobs.fanout_batch, 100, "an unread section holds its defaults");
    assert!(!c.uses.has(Section::Jobs) && c.uses.has(Section::Push));
}

#[test]
fn endpoints_are_hosted_beside_a_local_executor_and_on_cloud_run_only_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let read = |extra: &[(&str, &str)]| {
        let mut vars: Vec<(String, String)> = vec![("MAPI_HOME".into(), home.clone())];
        vars.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        Config::read(&|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()), Uses::ALL)
    };
    assert_eq!(read(&[]).expect("local").hosting, HostingBackend::Local);
    let jobs = [("MAPI_EXECUTOR", "cloudrun-jobs"), ("MAPI_CLOUDRUN_PROJECT", "p-1")];
    assert_eq!(read(&jobs).expect("jobs").hosting, HostingBackend::None, "no machine to serve on");
    let Err(ConfigError::Invalid(e)) = read(&[("MAPI_HOSTING", "cloud-run")]) else {
        panic!("cloud-run without its project is refused")
    };
    assert!(e.contains("MAPI_ENDPOINTS_PROJECT"), "{e}");
    let Err(ConfigError::Invalid(e)) = read(&[("MAPI_HOSTING", "gke")]) else { panic!("unknown host") };
    assert_eq!(e, "MAPI_HOSTING `gke`: use local, cloud-run or none");
    let cloud = [
        ("MAPI_HOSTING", "cloud-run"),
        ("MAPI_ENDPOINTS_PROJECT", "p-1"),
        ("MAPI_ENDPOINTS_SERVER_IMAGE", "europe-docker.pkg.dev/p-1/mapi/worker:1"),
        ("MAPI_ENDPOINTS_BUCKET", "b-1"),
    ];
    let HostingBackend::CloudRun(s) = read(&cloud).expect("cloud-run").hosting else {
        panic!("cloud-run hosting")
    };
    assert_eq!((s.project.as_str(), s.bucket.as_str(), s.metadata_url.as_deref()), ("p-1", "b-1", None));
}

/// Reads a multi-tenant configuration with its secrets (in a home of its own), `extra` added
/// (a later pair replaces an earlier one of the same name).
fn multi_tenant(extra: &[(&str, &str)], uses: Uses) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().to_string_lossy().into_owned();
    let base = [
        ("MAPI_PROFILE", "multi-tenant"),
        ("MAPI_HOME", home.as_str()),
        ("MAPI_INTERNAL_TOKEN", "0123456789abcdef0123"),
        ("MAPI_TOKEN_PEPPER", "00112233445566778899aabbccddeeff"),
    ];
    let m: HashMap<String, String> =
        base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Config::read(&|k| m.get(k).cloned(), uses)
}

/// The cloudrun-jobs executor's one required setting.
const CLOUD_EXECUTOR: [(&str, &str); 2] =
    [("MAPI_EXECUTOR", "cloudrun-jobs"), ("MAPI_CLOUDRUN_PROJECT", "exec")];

#[test]
fn the_url_signing_key_is_asked_for_only_where_local_objects_are_served() {
    let read =
        |extra: &[(&str, &str)], uses: Uses| multi_tenant(&[&CLOUD_EXECUTOR[..], extra].concat(), uses);
    let gcs = [("MAPI_OBJECTS", "gcs"), ("MAPI_GCS_BUCKET", "mapi-prod-data")];
    let c = read(&gcs, Uses::ALL).expect("Cloud Storage signs its own URLs");
    assert_eq!(c.secrets.url_signing_key, None);
    let e = read(&[], Uses::ALL).expect_err("local objects without their key");
    assert!(e.to_string().contains("MAPI_URL_SIGNING_KEY"), "{e}");
    let push = read(&[], Service::PushEvents.uses()).expect("push-events serves no objects");
    assert_eq!(push.secrets.url_signing_key, None);
    let key = [("MAPI_URL_SIGNING_KEY", "ffeeddccbbaa99887766554433221100")];
    let local = read(&key, Uses::ALL).expect("local objects with their key");
    assert_eq!(local.secrets.url_signing_key.as_deref().map(<[u8]>::len), Some(16));
    let e = read(&[("MAPI_URL_SIGNING_KEY", "ffee")], Uses::ALL).expect_err("short key");
    assert!(e.to_string().contains("at least 16"), "{e}");
}

/// Under the multi-tenant profile `local-process` refuses to start, naming why and what to use;
/// a service that starts no execution (push-events) is not asked, and cloudrun-jobs and gvisor
/// start (gvisor only where its runsc is found).
#[test]
fn the_multi_tenant_profile_refuses_the_local_process_executor() {
    let key = ("MAPI_URL_SIGNING_KEY", "ffeeddccbbaa99887766554433221100");
    let read = |extra: &[(&str, &str)], uses: Uses| multi_tenant(&[&[key][..], extra].concat(), uses);
    for local in [&[][..], &[("MAPI_EXECUTOR", "local-process")][..]] {
        let e = read(local, Uses::ALL).expect_err("local-process under multi-tenant");
        let e = e.to_string();
        assert!(e.contains("local-process") && e.contains("MAPI_EXECUTOR=cloudrun-jobs"), "{e}");
        assert!(e.contains("MAPI_EXECUTOR=gvisor"), "{e}");
    }
    read(&[], Service::PushEvents.uses()).expect("push-events starts no execution");
    read(&CLOUD_EXECUTOR, Uses::ALL).expect("cloudrun-jobs under multi-tenant");
    let runsc = ("MAPI_GVISOR_RUNSC", "/bin/sh");
    let c = read(&[("MAPI_EXECUTOR", "gvisor"), runsc], Uses::ALL).expect("gvisor under multi-tenant");
    assert_eq!(c.gvisor_runsc.as_deref(), Some(std::path::Path::new("/bin/sh")));
    let missing = [("MAPI_EXECUTOR", "gvisor"), ("MAPI_GVISOR_RUNSC", "/nowhere/runsc")];
    let e = read(&missing, Uses::ALL).expect_err("gvisor without runsc").to_string();
    assert!(e.contains("/nowhere/runsc") && e.contains("apt-get install runsc"), "{e}");
    read(&[("MAPI_PROFILE", "dev")], Uses::ALL).expect("local-process under dev");
}
