//! The Hosting conformance suite: what every adapter must do, run against
//! each (the local adapter and the cloud-run adapter on its fake) with real
//! model servers. The caller supplies the models: a good one, a second good
//! one, and one whose bundle was changed after it was signed.

use std::collections::BTreeMap;
use std::time::Duration;

use mapi_clock::Clock;
use serde_json::{Value, json};

use crate::{
    Accelerator, Access, Hosting, HostingError, ModelRef, RevisionSpec, Rollout, Scaling, ServiceSpec,
    Traffic, server_env, wait_ready,
};

/// What the suite deploys.
#[derive(Clone, Debug)]
pub struct Fixture {
    pub good: ModelRef,
    pub second: ModelRef,
    /// A bundle changed after signing: its server must refuse to start.
    pub tampered: ModelRef,
    /// One input row and the prediction the fit made for it.
    pub example: (Value, f64),
    /// A prefix for service names, unique per run.
    pub prefix: String,
}

/// The names of the cases, in order.
pub const CASES: &[&str] = &[
    "a_service_becomes_ready_and_scores",
    "a_revision_joins_at_zero_and_moves_with_the_split",
    "scaling_changes_without_a_new_revision",
    "a_tampered_bundle_fails_its_rollout_with_the_reason",
    "calls_repeat_safely",
    "a_deleted_service_is_gone",
];

fn spec(f: &Fixture, name: &str) -> ServiceSpec {
    ServiceSpec {
        name: format!("{}-{name}", f.prefix),
        region: "us".into(),
        accelerator: Accelerator::Cpu,
        scaling: Scaling { min: 0, max: 2 },
        access: Access::Private,
        labels: BTreeMap::from([("alias".to_owned(), name.to_owned())]),
    }
}

fn revision(tag: &str, model: &ModelRef) -> RevisionSpec {
    RevisionSpec { tag: tag.into(), serves: crate::Serving::Model(model.clone()) }
}

const POLL: Duration = Duration::from_millis(100);
const READY_WITHIN: Duration = Duration::from_secs(120);

async fn ready(h: &dyn Hosting, clock: &dyn Clock, name: &str) -> Rollout {
    wait_ready(h, clock, name, POLL, READY_WITHIN).await.expect("get answers")
}

/// Scores the example through `route`; answers the prediction and the revision that served it.
async fn score(h: &dyn Hosting, name: &str, tag: Option<&str>, f: &Fixture) -> (f64, String) {
    let route = h.route(name, tag).await.expect("route");
    let mut req = reqwest::Client::new()
        .post(format!("{}{}", route.url, server_env::PREDICT_PATH))
        .json(&json!({"rows": [f.example.0], "std_errors": true}));
    if let Some(a) = &route.authorization {
        req = req.header("authorization", a);
    }
    let resp = req.send().await.expect("the server answers");
    assert_eq!(resp.status(), 200, "predict answered {}", resp.status());
    let body: Value = resp.json().await.expect("json");
    let value = body["predictions"][0]["value"].as_f64().expect("a prediction");
    assert!(body["predictions"][0]["std_error"].as_f64().is_some_and(|se| se >= 0.0), "{body}");
    (value, body["revision"].as_str().unwrap_or_default().to_owned())
}

/// Runs every case; panics naming the first that fails.
pub async fn run_all(h: &dyn Hosting, clock: &dyn Clock, f: &Fixture) {
    a_service_becomes_ready_and_scores(h, clock, f).await;
    a_revision_joins_at_zero_and_moves_with_the_split(h, clock, f).await;
    scaling_changes_without_a_new_revision(h, clock, f).await;
    a_tampered_bundle_fails_its_rollout_with_the_reason(h, clock, f).await;
    calls_repeat_safely(h, clock, f).await;
    a_deleted_service_is_gone(h, clock, f).await;
}

pub async fn a_service_becomes_ready_and_scores(h: &dyn Hosting, clock: &dyn Clock, f: &Fixture) {
    let s = spec(f, "ready");
    h.create(&s, &revision("r1", &f.good)).await.expect("create");
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready, "the first revision rolls out");
    let state = h.get(&s.name).await.expect("get");
    assert_eq!(state.traffic, vec![Traffic { tag: "r1".into(), percent: 100 }]);
    assert_eq!(state.labels.get("alias").map(String::as_str), Some("ready"));
    let (value, served_by) = score(h, &s.name, None, f).await;
    assert!((value - f.example.1).abs() <= 1e-9 * f.example.1.abs().max(1.0), "{value} vs {}", f.example.1);
    assert_eq!(served_by, "r1");
    h.delete(&s.name).await.expect("delete");
}

pub async fn a_revision_joins_at_zero_and_moves_with_the_split(
    h: &dyn Hosting,
    clock: &dyn Clock,
    f: &Fixture,
) {
    let s = spec(f, "split");
    h.create(&s, &revision("r1", &f.good)).await.expect("create");
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready);
    h.add_revision(&s.name, &revision("r2", &f.second)).await.expect("add");
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready, "the second revision rolls out");
    let state = h.get(&s.name).await.expect("get");
    let percent = |tag: &str| state.traffic.iter().find(|t| t.tag == tag).map(|t| t.percent);
    assert_eq!((percent("r1"), percent("r2")), (Some(100), Some(0)), "a new revision joins at 0 %");
    assert_eq!(score(h, &s.name, Some("r2"), f).await.1, "r2", "its tag reaches it alone");
    let split = [Traffic { tag: "r1".into(), percent: 75 }, Traffic { tag: "r2".into(), percent: 25 }];
    h.set_traffic(&s.name, &split).await.expect("split");
    let state = h.get(&s.name).await.expect("get");
    assert_eq!(state.traffic, split.to_vec());
    let bad = [Traffic { tag: "r1".into(), percent: 75 }];
    assert!(
        matches!(h.set_traffic(&s.name, &bad).await, Err(HostingError::Invalid(_))),
        "a split not of 100 %"
    );
    let unknown = [Traffic { tag: "r9".into(), percent: 100 }];
    assert!(h.set_traffic(&s.name, &unknown).await.is_err(), "a revision that does not exist");
    h.delete(&s.name).await.expect("delete");
}

pub async fn scaling_changes_without_a_new_revision(h: &dyn Hosting, clock: &dyn Clock, f: &Fixture) {
    let s = spec(f, "scale");
    h.create(&s, &revision("r1", &f.good)).await.expect("create");
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready);
    assert_eq!(h.get(&s.name).await.expect("get").scaling, s.scaling, "created with its bounds");
    let wider = Scaling { min: 1, max: 5 };
    h.set_scaling(&s.name, wider).await.expect("scale");
    h.set_scaling(&s.name, wider).await.expect("setting the same bounds again is a no-op");
    let state = h.get(&s.name).await.expect("get");
    assert_eq!(state.scaling, wider);
    assert_eq!(state.revisions.len(), 1, "bounds change without a new revision");
    assert_eq!(state.traffic, vec![Traffic { tag: "r1".into(), percent: 100 }]);
    assert_eq!(score(h, &s.name, None, f).await.1, "r1", "it still serves");
    for bad in [Scaling { min: 3, max: 2 }, Scaling { min: 0, max: 0 }, Scaling { min: 0, max: 101 }] {
        assert!(
            matches!(h.set_scaling(&s.name, bad).await, Err(HostingError::Invalid(_))),
            "bounds {bad:?} are refused"
        );
    }
    assert_eq!(h.get(&s.name).await.expect("get").scaling, wider, "a refused change changes nothing");
    assert!(matches!(
        h.set_scaling(&format!("{}-none", f.prefix), wider).await,
        Err(HostingError::NotFound(_))
    ));
    h.delete(&s.name).await.expect("delete");
}

pub async fn a_tampered_bundle_fails_its_rollout_with_the_reason(
    h: &dyn Hosting,
    clock: &dyn Clock,
    f: &Fixture,
) {
    let s = spec(f, "tampered");
    h.create(&s, &revision("r1", &f.tampered)).await.expect("create is accepted");
    match ready(h, clock, &s.name).await {
        Rollout::Failed(message) => {
            assert!(message.contains("refusing to serve"), "the server's reason is the message: {message}")
        }
        other => panic!("a changed bundle must not serve: {other:?}"),
    }
    h.delete(&s.name).await.expect("delete");
}

pub async fn calls_repeat_safely(h: &dyn Hosting, clock: &dyn Clock, f: &Fixture) {
    let s = spec(f, "again");
    h.create(&s, &revision("r1", &f.good)).await.expect("create");
    assert!(matches!(h.create(&s, &revision("r1", &f.good)).await, Err(HostingError::AlreadyExists(_))));
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready);
    h.add_revision(&s.name, &revision("r2", &f.second)).await.expect("add");
    h.add_revision(&s.name, &revision("r2", &f.second)).await.expect("adding it again is a no-op");
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready);
    assert_eq!(h.get(&s.name).await.expect("get").revisions.len(), 2);
    h.delete(&s.name).await.expect("delete");
}

pub async fn a_deleted_service_is_gone(h: &dyn Hosting, clock: &dyn Clock, f: &Fixture) {
    let s = spec(f, "gone");
    h.create(&s, &revision("r1", &f.good)).await.expect("create");
    assert_eq!(ready(h, clock, &s.name).await, Rollout::Ready);
    assert!(h.list().await.expect("list").iter().any(|x| x.name == s.name), "listed while it exists");
    h.delete(&s.name).await.expect("delete");
    assert!(matches!(h.get(&s.name).await, Err(HostingError::NotFound(_))));
    assert!(matches!(h.delete(&s.name).await, Err(HostingError::NotFound(_))));
    assert!(!h.list().await.expect("list").iter().any(|x| x.name == s.name), "not listed once deleted");
}
