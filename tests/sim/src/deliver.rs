//! What Google delivers: Cloud Tasks' deliveries (until a 2xx, with
//! back-off; some lost, some late, some twice, some answered and the answer
//! lost), Pub/Sub's pushes (until acknowledged), and Cloud Scheduler's
//! ticks (some skipped, some overlapping, and the clock jumping).

use std::time::Duration;

use bytes::Bytes;
use http::Method;

use crate::faults::Fault;
use crate::queue::SimQueue;
use crate::worker::Push;
use crate::world::{Action, DISPATCH_DEADLINE, World};

fn ok(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Delivers the first due task.
pub fn task(world: &mut World) {
    let now = world.now();
    let Some(task) = world.queue.take_due(now) else { return };
    let what = format!("task {}/{} #{}", task.queue.as_str(), task.name.as_str(), task.deliveries);
    if world.faults.roll(Fault::TaskDeliveryLost) {
        world.note(format!("{what}: the delivery was lost"));
        world.queue.again(task, now + DISPATCH_DEADLINE);
        return;
    }
    if world.faults.roll(Fault::TaskDelayed) {
        let late = world.rng.with(|r| r.between(5, 120));
        world.note(format!("{what}: delayed {late} s"));
        let mut task = task;
        task.deliveries = task.deliveries.saturating_sub(1);
        world.queue.again(task, now + Duration::from_secs(late));
        return;
    }
    let headers = [
        ("x-cloudtasks-queuename", task.queue.as_str().to_owned()),
        ("x-cloudtasks-taskname", task.name.as_str().to_owned()),
        ("x-cloudtasks-taskretrycount", task.deliveries.to_string()),
        ("x-cloudtasks-taskexecutioncount", task.deliveries.to_string()),
    ];
    let internal = world.internal();
    let body = Some(("application/json", task.body.clone()));
    let answer = world.drive(world.request(Method::POST, &task.path, &internal, body, &headers)).ok();
    match answer {
        None => {
            world.died(&what);
            world.queue.again(task, now + DISPATCH_DEADLINE);
        }
        Some((s, _, _)) if ok(s) => {
            if world.faults.roll(Fault::TaskAnswerLost) {
                world.note(format!("{what}: {s}, the answer lost"));
                let at = now + SimQueue::backoff(task.deliveries);
                world.queue.again(task, at);
            } else {
                world.note(format!("{what}: {s}"));
                if world.faults.roll(Fault::TaskDuplicated) {
                    let again = world.rng.with(|r| r.between(0, 20));
                    let mut copy = task;
                    copy.deliveries = copy.deliveries.saturating_sub(1);
                    world.queue.again(copy, now + Duration::from_secs(again));
                }
            }
        }
        Some((s, body, retry_after)) => {
            let code = body["code"].as_str().unwrap_or("").to_owned();
            let detail: String = body["detail"].as_str().unwrap_or("").chars().take(160).collect();
            world.note(format!("{what}: {s} {code} {detail}"));
            // A 429 or 503 with Retry-After sets the next try, as the
            // platform's own queue does; otherwise the back-off.
            let wait = match retry_after {
                Some(secs) if s == 429 || s == 503 => Duration::from_secs(secs),
                _ => SimQueue::backoff(task.deliveries),
            };
            world.queue.again(task, now + wait);
        }
    }
}

/// Delivers one push; Pub/Sub redelivers until a 2xx, backing off 10 s to 600 s.
pub fn push(world: &mut World, mut p: Push) {
    let internal = world.internal();
    let body = Some(("application/json", p.body.clone()));
    let answer = world.call(Method::POST, mapi_push_events::EVENTS_PATH, &internal, body, &[]);
    let what = format!("push {} #{}", p.label, p.deliveries);
    let redeliver = match answer {
        None => {
            world.died(&what);
            true
        }
        Some((s, v)) => {
            let lost = ok(s) && world.faults.roll(Fault::PushAnswerLost);
            let disposition = v["disposition"].as_str().unwrap_or("").to_owned();
            if ok(s)
                && disposition == "applied"
                && let Some(run) = p.label.split(':').next()
            {
                let now = world.now();
                world.last_applied.insert(run.to_owned(), now);
            }
            world.note(format!("{what}: {s} {disposition}{}", if lost { ", the answer lost" } else { "" }));
            !ok(s) || lost
        }
    };
    if redeliver {
        let wait = Duration::from_secs((10u64 << p.deliveries.min(6)).min(600));
        p.deliveries += 1;
        world.after(wait, Action::Push(p));
    }
}

fn internal_post(world: &World, path: &str) -> Option<(u16, serde_json::Value)> {
    world.call(
        Method::POST,
        path,
        &world.internal(),
        Some(("application/json", Bytes::from_static(b"{}"))),
        &[],
    )
}

/// Cloud Scheduler's tick: sometimes skipped, sometimes two at once, and
/// sometimes the clock jumps forward first.
pub fn tick(world: &mut World) {
    if world.faults.roll(Fault::ClockJump) {
        let hours = world.rng.with(|r| r.between(1, 6));
        jump(world, Duration::from_secs(hours * 3600));
    }
    if world.faults.roll(Fault::TickSkipped) {
        world.note("tick skipped".to_owned());
        return;
    }
    let path = mapi_reconcile_tick::TICK_PATH;
    if world.faults.roll(Fault::TickOverlapped) {
        let internal = world.internal();
        let body = || Some(("application/json", Bytes::from_static(b"{}")));
        let a = world.request(Method::POST, path, &internal, body(), &[]);
        let b = world.request(Method::POST, path, &internal, body(), &[]);
        world.faults.set_interleave(true);
        let both = world.drive(futures::future::join(a, b));
        world.faults.set_interleave(false);
        match both {
            Ok(((sa, va, _), (sb, vb, _))) => world.note(format!("ticks overlap: {sa} {va} | {sb} {vb}")),
            Err(_) => world.died("two overlapping ticks"),
        }
        return;
    }
    match internal_post(world, path) {
        Some((s, v)) => world.note(format!("tick: {s} {v}")),
        None => world.died("a tick"),
    }
}

/// The job housekeeper's schedule.
pub fn housekeep(world: &mut World) {
    match internal_post(world, mapi_tasks::housekeep::HOUSEKEEP_PATH) {
        Some((s, _)) => world.note(format!("housekeep: {s}")),
        None => world.died("housekeeping"),
    }
}

/// The clock jumps forward by `d`: everything due meanwhile is late, and
/// the tenants' own plans move with them.
fn jump(world: &mut World, d: Duration) {
    world.note(format!("the clock jumps {} h", d.as_secs() / 3600));
    let now = world.now();
    world.clock.set(now + d);
    world.jumped += d;
    let agenda = std::mem::take(&mut world.agenda);
    for ((at, seq), action) in agenda {
        let at = if matches!(action, Action::Work(_)) { at + d } else { at };
        world.agenda.insert((at, seq), action);
    }
}
