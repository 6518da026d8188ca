//! The route table (docs/routes.md) is the routers: each row's route is served
//! by the service it names and by no other function, each queue's tasks go
//! to a route of the service `mapi_platform::QUEUE_ROUTES` names, and the
//! table says that queue calls it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use mapi_platform::{AppState, Platform, QUEUE_ROUTES, Service};
use tower::ServiceExt;

/// One row of the table: service, method, path, caller.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    service: String,
    method: String,
    path: String,
    caller: String,
}

/// Routes every service gets from the shared runtime, not from its router.
const RUNTIME_ROUTES: &[&str] = &["GET /health", "GET /build-info", "GET /metrics"];

fn table() -> Vec<Row> {
    let section = include_str!("../../../docs/routes.md");
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 3, "a row has three cells: {line}");
        let route = cells[1].trim_matches('`');
        let (method, path) = route.split_once(' ').expect("`METHOD /path`");
        rows.push(Row {
            service: cells[0].to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            caller: cells[2].to_owned(),
        });
    }
    assert!(rows.len() > 20, "the table has its rows: {rows:?}");
    rows
}

/// A concrete path for a route: each `{param}` becomes a value of its shape.
fn concrete(path: &str) -> String {
    path.split('/').map(|seg| if seg.starts_with('{') { "x1" } else { seg }).collect::<Vec<_>>().join("/")
}

/// Whether `router` has a route for `method path`: axum answers a missing
/// route with an empty 404 and a wrong method with 405; a handler's own
/// answers (401, 400, a problem 404, …) mean the route is there.
async fn serves(router: &Router, method: &str, path: &str) -> bool {
    let req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("method"))
        .uri(concrete(path))
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("answer");
    let problem =
        resp.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"application/problem"));
    !(resp.status() == StatusCode::METHOD_NOT_ALLOWED || (resp.status() == StatusCode::NOT_FOUND && !problem))
}

async fn state(home: &std::path::Path) -> AppState {
    let config = mapi_tests::config(home, &[]);
    let platform = Platform::embedded(config, Arc::new(mapi_clock::SystemClock), mapi_tests::worker())
        .expect("platform");
    AppState(Arc::new(platform))
}

#[tokio::test]
async fn the_route_table_is_the_routers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = state(dir.path()).await;
    let routers: BTreeMap<&str, Router> = [
        (Service::Submit, mapi_submit::router(all.clone())),
        (Service::Tasks, mapi_tasks::router(all.clone())),
        (Service::PushEvents, mapi_push_events::router(all.clone())),
        (Service::ReconcileTick, mapi_reconcile_tick::router(all.clone())),
        (Service::Meter, mapi_meter::router(all.clone())),
        (Service::Admin, mapi_admin::router(all)),
    ]
    .into_iter()
    .map(|(s, r)| (s.as_str(), r))
    .collect();
    let rows = table();
    let named: BTreeSet<&str> = rows.iter().map(|r| r.service.as_str()).collect();
    let services: BTreeSet<&str> = Service::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(named, services, "the table names exactly the platform's services");
    for service in &services {
        for route in RUNTIME_ROUTES {
            assert!(
                rows.iter().any(|r| r.service == *service && format!("{} {}", r.method, r.path) == *route),
                "{service} lists {route}"
            );
        }
    }
    for row in rows.iter().filter(|r| !RUNTIME_ROUTES.contains(&format!("{} {}", r.method, r.path).as_str()))
    {
        for (service, router) in &routers {
            let served = serves(router, &row.method, &row.path).await;
            // `GET /manifest` is served by both deployments of submit.
            let shared = row.path == "/manifest" && service.starts_with("submit");
            if *service == row.service {
                assert!(served, "{service} serves {} {}, as the table says", row.method, row.path);
            } else if !shared {
                assert!(!served, "{} {} is {}'s, yet {service} serves it", row.method, row.path, row.service);
            }
        }
    }
    for q in QUEUE_ROUTES {
        let row = rows
            .iter()
            .find(|r| r.method == "POST" && r.path == q.path)
            .unwrap_or_else(|| panic!("the table lists the route of queue {}", q.queue));
        assert_eq!(
            row.service,
            q.service.as_str(),
            "queue {} delivers to the service that serves {}",
            q.queue,
            q.path
        );
        let caller = format!("Cloud Tasks queue {}", q.queue);
        assert!(row.caller.split(", ").any(|c| c == caller), "{row:?} names {caller}");
    }
    // Completeness: every operation a function documents is in the table, as that function's.
    let documented = [
        (Service::Submit, <mapi_submit::ApiDoc as utoipa::OpenApi>::openapi()),
        (Service::Meter, <mapi_meter::ApiDoc as utoipa::OpenApi>::openapi()),
        (Service::Admin, <mapi_admin::ApiDoc as utoipa::OpenApi>::openapi()),
    ];
    for (service, doc) in documented {
        for (path, item) in &doc.paths.paths {
            let methods = [
                ("GET", item.get.is_some()),
                ("POST", item.post.is_some()),
                ("PUT", item.put.is_some()),
                ("PATCH", item.patch.is_some()),
                ("DELETE", item.delete.is_some()),
            ];
            for (method, _) in methods.iter().filter(|(_, there)| *there) {
                assert!(
                    rows.iter()
                        .any(|r| r.service == service.as_str() && r.method == *method && r.path == *path),
                    "{service} documents {method} {path}, which the route table does not list"
                );
            }
        }
    }
    let queue_callers: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.caller.split(", "))
        .filter_map(|c| c.strip_prefix("Cloud Tasks queue "))
        .collect();
    let queues: BTreeSet<&str> = QUEUE_ROUTES.iter().map(|q| q.queue).collect();
    assert_eq!(queue_callers, queues, "every queue in the table has its target, and only those");
}
