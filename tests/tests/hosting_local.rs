//! The Hosting conformance suite against the local adapter, with real
//! model servers (`mapi-worker serve`), and what only the local adapter
//! does: restart a crashed server, scale to zero after the idle time and
//! start again on the next request.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::SystemClock;
use mapi_hosting::conformance::{self, Fixture};
use mapi_hosting::local::{LocalHosting, ServerCommand};
use mapi_hosting::{
    Accelerator, Access, Hosting, RevisionSpec, Rollout, Scaling, ServiceSpec, server_env, wait_ready,
};
use mapi_tests::model_fixture::{self, Bundles};

fn server() -> ServerCommand {
    ServerCommand {
        program: mapi_tests::binary("mapi-worker"),
        args: vec!["serve".into()],
        sandbox: None,
        containers: None,
        secrets: std::path::PathBuf::from("/nonexistent/secrets.json"),
        images: None,
    }
}

async fn fixture(dir: &std::path::Path) -> Fixture {
    let bundles = Bundles::new(&dir.join("objects"));
    let model = model_fixture::fit(model_fixture::DATA);
    let good = bundles.seal("r1", &model).await;
    let second = bundles.seal("r2", &model_fixture::fit(model_fixture::DATA_2)).await;
    Fixture {
        tampered: model_fixture::tampered(&good),
        good,
        second,
        example: model_fixture::example(&model),
        prefix: "ep".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_adapter_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = fixture(dir.path()).await;
    let clock = Arc::new(SystemClock);
    let hosting =
        LocalHosting::open(&dir.path().join("endpoints"), server(), Duration::from_secs(600), clock.clone())
            .expect("open");
    conformance::run_all(&hosting, &*clock, &f).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_restart_after_a_crash_scale_to_zero_and_wake_on_the_next_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = fixture(dir.path()).await;
    let clock = Arc::new(SystemClock);
    let hosting = LocalHosting::open(
        &dir.path().join("endpoints"),
        server(),
        Duration::from_millis(800),
        clock.clone(),
    )
    .expect("open");
    let spec = ServiceSpec {
        name: "ep-idle".into(),
        region: "us".into(),
        accelerator: Accelerator::Cpu,
        scaling: Scaling { min: 0, max: 1 },
        access: Access::Private,
        labels: Default::default(),
    };
    hosting
        .create(
            &spec,
            &RevisionSpec { tag: "r1".into(), serves: mapi_hosting::Serving::Model(f.good.clone()) },
        )
        .await
        .expect("create");
    let ready = wait_ready(&hosting, &*clock, "ep-idle", Duration::from_millis(50), Duration::from_secs(60));
    assert_eq!(ready.await.expect("get"), Rollout::Ready);
    let health = |url: String| async move {
        reqwest::get(format!("{url}{}", server_env::HEALTH_PATH)).await.map(|r| r.status().as_u16())
    };

    // Killed from outside: the next request starts it again.
    let port = hosting.port_of("ep-idle", "r1").await.expect("running after its rollout");
    let pid = std::process::Command::new("sh")
        .args(["-c", &format!("ss -ltnpH 'sport = :{port}' | sed -n 's/.*pid=\\([0-9]*\\).*/\\1/p'")])
        .output()
        .expect("ss");
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_owned();
    assert!(!pid.is_empty(), "the server's pid");
    std::process::Command::new("kill").args(["-9", &pid]).status().expect("kill");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let route = hosting.route("ep-idle", None).await.expect("route restarts it");
    assert_eq!(health(route.url).await.expect("health"), 200);

    // Idle past the idle time: stopped; the next route starts it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while hosting.running().await > 0 {
        assert!(std::time::Instant::now() < deadline, "an idle server of a service with min 0 is stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let route = hosting.route("ep-idle", Some("r1")).await.expect("route wakes it");
    assert_eq!(health(route.url).await.expect("health"), 200);
    assert_eq!(hosting.running().await, 1);

    // Services outlive the adapter: a new one knows them and starts servers on demand.
    drop(hosting);
    let again =
        LocalHosting::open(&dir.path().join("endpoints"), server(), Duration::from_secs(600), clock.clone())
            .expect("reopen");
    assert_eq!(again.get("ep-idle").await.expect("kept").rollout, Rollout::Ready);
    let route = again.route("ep-idle", None).await.expect("route");
    assert_eq!(health(route.url).await.expect("health"), 200);
}

/// With many tenants on one machine, a tenant's container image must lie
/// under its own directory: another tenant's, a path that climbs out with
/// `..` or a link, or one that does not exist is refused before anything runs.
#[tokio::test]
async fn a_tenant_runs_only_images_under_its_own_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let images = dir.path().join("images");
    for d in ["acme/toy", "other/toy"] {
        std::fs::create_dir_all(images.join(d)).expect("mkdir");
    }
    std::os::unix::fs::symlink(images.join("other/toy"), images.join("acme/link")).expect("link");
    let mut many = server();
    many.images = Some(images.clone());
    let hosting = LocalHosting::open(
        &dir.path().join("endpoints"),
        many,
        Duration::from_secs(60),
        Arc::new(SystemClock),
    )
    .expect("open");
    let acme = mapi_domain::TenantId::parse("acme").expect("tenant");
    let at = |p: &str| images.join(p).to_string_lossy().into_owned();
    assert_eq!(hosting.image_refusal(&acme, &at("acme/toy")), None);
    for refused in
        [at("other/toy"), at("acme/../other/toy"), at("acme/link"), at("acme/none"), "/etc".to_owned()]
    {
        let why = hosting.image_refusal(&acme, &refused).unwrap_or_else(|| panic!("{refused} was accepted"));
        assert!(why.contains("not an image of tenant acme"), "{why}");
    }
    // One person's machine: any path.
    let open =
        LocalHosting::open(&dir.path().join("e2"), server(), Duration::from_secs(60), Arc::new(SystemClock))
            .expect("open");
    assert_eq!(open.image_refusal(&acme, &at("other/toy")), None);
}
