//! The workload: what tenants and operators do during the hour. Tenants
//! on three tiers submit runs (single tasks and fan-outs of fits and
//! summaries) and item jobs, cancel runs and jobs, retry a job's failed
//! items; operators change quotas, set and lift the spend cap and switch
//! the executor off and on. A client retries a submit that got no answer
//! or a 5xx with the same `Idempotency-Key`, as a careful client does.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use crate::world::{Action, OPERATOR, WORKLOAD, World};

/// One thing a tenant or an operator does.
#[derive(Debug, Clone)]
pub enum Work {
    SubmitRun { tenant: usize, key: String, body: Value, tries: u32 },
    SubmitJob { tenant: usize, key: String, body: Value, tries: u32 },
    CancelRun { tenant: usize },
    CancelJob { tenant: usize },
    RetryFailed { tenant: usize },
    SetQuota { tenant: usize },
    RemoveQuota { tenant: usize },
    SpendCap,
    ExecutorSwitch { enabled: bool },
}

/// Plans an hour's workload, from now; `round` 0 is the first hour (later
/// rounds use their own idempotency keys).
pub fn plan(world: &mut World, round: u32) {
    let start = if round == 0 { world.start } else { world.now() };
    let tag = if round == 0 { String::new() } else { format!("r{round}-") };
    let tenants = world.tenants.len() as u64;
    let (runs, jobs) = world.rng.with(|r| (r.between(16, 30), r.between(2, 5)));
    let mut planned = Vec::new();
    for i in 0..runs {
        let (tenant, at) = world.rng.with(|r| (r.below(tenants) as usize, r.below(WORKLOAD.as_secs())));
        let body = run_body(world, tenant);
        planned.push((at, Work::SubmitRun { tenant, key: format!("{tag}run-{i}"), body, tries: 0 }));
    }
    for i in 0..jobs {
        let (tenant, at) = world.rng.with(|r| (r.below(tenants) as usize, r.below(WORKLOAD.as_secs())));
        let body = job_body(world);
        planned.push((at, Work::SubmitJob { tenant, key: format!("{tag}job-{i}"), body, tries: 0 }));
    }
    let others = world.rng.with(|r| r.between(6, 16));
    for _ in 0..others {
        let (kind, tenant, at) =
            world.rng.with(|r| (r.below(9), r.below(tenants) as usize, r.below(WORKLOAD.as_secs())));
        let work = match kind {
            0..=2 => Work::CancelRun { tenant },
            3 => Work::CancelJob { tenant },
            4 => Work::RetryFailed { tenant },
            5 => Work::SetQuota { tenant },
            6 => Work::RemoveQuota { tenant },
            7 => Work::SpendCap,
            _ => Work::ExecutorSwitch { enabled: false },
        };
        planned.push((at, work));
    }
    for (at, work) in planned {
        world.at(start + Duration::from_secs(at), Action::Work(work));
    }
}

fn run_body(world: &World, tenant: usize) -> Value {
    let dataset = world.tenants[tenant].dataset.clone().unwrap_or_default();
    world.rng.with(|r| {
        let fit = r.chance(600);
        let (method, params) =
            if fit { ("tabular.linear", json!({"y": "employed"})) } else { ("describe", json!({})) };
        let tasks = if r.chance(250) { r.between(2, 4) } else { 1 };
        let class = *r.pick(&["S", "S", "M"]);
        let timeout = r.between(300, 1800);
        json!({"method": method, "dataset": dataset, "params": params, "class": class, "timeout_s": timeout, "tasks": tasks})
    })
}

fn job_body(world: &World) -> Value {
    world.rng.with(|r| {
        let n = r.between(5, 40);
        let items: Vec<Value> =
            (0..n).map(|i| json!({"i": i, "text": format!("item {i} of the job")})).collect();
        let method = *r.pick(&["item.echo", "text.stats"]);
        json!({"method": method, "items": items})
    })
}

/// Does `work` now.
pub fn act(world: &mut World, work: Work) {
    match work {
        Work::SubmitRun { tenant, key, body, tries } => submit(world, tenant, key, body, tries, false),
        Work::SubmitJob { tenant, key, body, tries } => submit(world, tenant, key, body, tries, true),
        Work::CancelRun { tenant } => {
            let Some(id) = world.checker.pick_run(&world.rng, &world.tenants[tenant].id) else { return };
            tenant_call(world, tenant, Method::POST, &format!("/v1/runs/{id}/cancel"));
        }
        Work::CancelJob { tenant } => {
            let Some(id) = world.checker.pick_job(&world.rng, &world.tenants[tenant].id) else { return };
            tenant_call(world, tenant, Method::POST, &format!("/v1/jobs/{id}/cancel"));
        }
        Work::RetryFailed { tenant } => {
            let Some(id) = world.checker.pick_job(&world.rng, &world.tenants[tenant].id) else { return };
            if let Some((s, _)) =
                tenant_call(world, tenant, Method::POST, &format!("/v1/jobs/{id}/retry-failed"))
                && (200..300).contains(&s)
            {
                world.checker.job_round(&id);
            }
        }
        Work::SetQuota { tenant } => {
            let policy = world.rng.with(|r| {
                let mut p = serde_json::Map::new();
                p.insert("concurrent_runs".into(), json!(r.between(1, 6)));
                if r.chance(400) {
                    p.insert("vcpu_seconds_per_day".into(), json!(*r.pick(&[1800, 7200, 36_000])));
                }
                Value::Object(p)
            });
            let path = format!("/v1/admin/quotas/{}", world.tenants[tenant].id);
            operator(world, Method::PUT, &path, Some(policy));
        }
        Work::RemoveQuota { tenant } => {
            let path = format!("/v1/admin/quotas/{}", world.tenants[tenant].id);
            operator(world, Method::DELETE, &path, None);
        }
        Work::SpendCap => {
            let body = world.rng.with(|r| {
                let cap = *r.pick(&[0, 2_000, 50_000, 10_000_000]);
                let period = *r.pick(&["day", "month"]);
                json!({"spend_cap_micros": cap, "spend_cap_period": period, "reason": "simulated budget"})
            });
            operator(world, Method::PUT, "/v1/admin/kill-switches", Some(body));
        }
        Work::ExecutorSwitch { enabled } => {
            let path = format!("/v1/admin/executors/{}", crate::executor::NAME);
            let body = json!({"enabled": enabled, "reason": "simulated maintenance"});
            let answered = operator(world, Method::PUT, &path, Some(body));
            if !enabled {
                let back = world.rng.with(|r| r.between(60, 900));
                world.after(Duration::from_secs(back), Action::Work(Work::ExecutorSwitch { enabled: true }));
            } else if !answered.is_some_and(|s| (200..300).contains(&s)) {
                // The switch must come back on: an operator tries again.
                world.after(Duration::from_secs(30), Action::Work(Work::ExecutorSwitch { enabled: true }));
            }
        }
    }
}

fn submit(world: &mut World, tenant: usize, key: String, body: Value, tries: u32, job: bool) {
    let t = world.tenants[tenant].clone();
    let path = format!("{}/{}", t.project_path(), if job { "jobs" } else { "runs" });
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("json"));
    let headers = [("idempotency-key", key.clone())];
    let answer = world.call(Method::POST, &path, &t.token, Some(("application/json", bytes)), &headers);
    let what = format!("{} submits {key} (try {tries})", t.id);
    let retry = match &answer {
        None => {
            world.died(&what);
            true
        }
        Some((s, v)) if (200..300).contains(s) => {
            let id = v["id"].as_str().unwrap_or_default().to_owned();
            world.note(format!("{what}: {s} {id}"));
            if job {
                let items = body["items"].as_array().map_or(0, Vec::len);
                world.checker.ack_job(&t.id, &key, &id, items, world.steps);
            } else {
                // A 201 admitted the run now; a 200 replays an earlier admission.
                world.checker.ack_run(&t.id, &key, &id, *s == 201, world.steps);
            }
            false
        }
        Some((s, v)) => {
            world.note(format!("{what}: {s} {}", v["code"].as_str().unwrap_or("")));
            *s >= 500
        }
    };
    if retry && tries < 6 {
        let wait = world.rng.with(|r| r.between(2, 60));
        let work = if job {
            Work::SubmitJob { tenant, key, body, tries: tries + 1 }
        } else {
            Work::SubmitRun { tenant, key, body, tries: tries + 1 }
        };
        world.after(Duration::from_secs(wait), Action::Work(work));
    }
}

fn tenant_call(world: &mut World, tenant: usize, method: Method, path: &str) -> Option<(u16, Value)> {
    let token = world.tenants[tenant].token.clone();
    let answer = world.call(method, path, &token, None, &[]);
    match &answer {
        Some((s, v)) => world.note(format!("{path}: {s} {}", v["code"].as_str().unwrap_or(""))),
        None => world.died(path),
    }
    answer
}

fn operator(world: &mut World, method: Method, path: &str, body: Option<Value>) -> Option<u16> {
    let token = world.operator();
    let answer = match &body {
        Some(b) => world.json(method, path, &token, b),
        None => world.call(method, path, &token, None, &[]),
    };
    match &answer {
        Some((s, v)) => world.note(format!("{OPERATOR} {path}: {s} {}", v["code"].as_str().unwrap_or(""))),
        None => world.died(path),
    }
    answer.map(|(s, _)| s)
}

/// The incident is over: the operator lifts the spend cap and switches the
/// executor on, so whatever waited may finish.
pub fn all_clear(world: &mut World) {
    let lift = json!({"spend_cap_micros": 0, "reason": "the simulated incident is over"});
    operator(world, Method::PUT, "/v1/admin/kill-switches", Some(lift));
    let path = format!("/v1/admin/executors/{}", crate::executor::NAME);
    operator(
        world,
        Method::PUT,
        &path,
        Some(json!({"enabled": true, "reason": "the simulated incident is over"})),
    );
}
