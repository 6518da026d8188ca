//! The platform's services (one Cloud Run service each) and which of them
//! serves each queue's route, so every queue delivers to the service that
//! handles its tasks. The route table (docs/routes.md) names the same services;
//! the `routes` suite checks that table against the routers and this one.

use mapi_jobs::tasks::{FANOUT_PATH, FANOUT_QUEUE, ITEM_PATH, ITEMS_QUEUE};
use mapi_schema::tasks::{
    ADVANCE_PATH, DELIVER_PATH, DISPATCH_PATH, EXPORT_PATH, FINALIZE_PATH, PURGE_PATH, TICK_PATH,
};
use mapi_schema::{
    DISPATCH_QUEUE, EXPORT_QUEUE, FINALIZE_QUEUE, PURGE_QUEUE, TICK_QUEUE, WEBHOOKS_QUEUE, WORKFLOWS_QUEUE,
};

use crate::config::{CloudTasksConfig, Section, Uses};

/// A deployed service: one function crate each. The task routes are a
/// service of their own (`mapi-tasks`, deployed under its first name,
/// `submit-tasks`, so queues and URLs stay put), so item work never takes
/// the API's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    Submit,
    Tasks,
    PushEvents,
    ReconcileTick,
    Meter,
    Admin,
}

impl Service {
    pub const ALL: &'static [Service] = &[
        Service::Submit,
        Service::Tasks,
        Service::PushEvents,
        Service::ReconcileTick,
        Service::Meter,
        Service::Admin,
    ];

    /// The service's name, as the deployment and the route table write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Submit => "submit",
            Service::Tasks => "submit-tasks",
            Service::PushEvents => "push-events",
            Service::ReconcileTick => "reconcile-tick",
            Service::Meter => "meter",
            Service::Admin => "admin",
        }
    }

    /// The configuration sections the service reads (and so the ports it
    /// wires): what its handlers use, no more.
    pub fn uses(self) -> Uses {
        use Section::*;
        match self {
            // Everything but Pub/Sub push authentication.
            Service::Submit => Uses::only(&[
                Api, Lifecycle, Sessions, Objects, Queue, Executor, Signer, Jobs, Hosting, Webhooks,
            ]),
            // No sessions, no API limits, no signer, no endpoints' host.
            Service::Tasks => Uses::only(&[Lifecycle, Objects, Queue, Executor, Jobs, Webhooks]),
            Service::PushEvents => Uses::only(&[Push]),
            // Webhooks: the sweep paces each receiver's messages.
            Service::ReconcileTick => Uses::only(&[Lifecycle, Queue, Executor, Hosting, Webhooks]),
            Service::Meter => Uses::only(&[Lifecycle, Objects, Queue, Executor, Signer]),
            // The queue: a tenant's export and purge are tasks admin pushes. Jobs and Lifecycle:
            // the retentions a tenant's limits show.
            Service::Admin => Uses::only(&[Sessions, Lifecycle, Queue, Executor, Jobs]),
        }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One queue: its name, the route its tasks are POSTed to, and the service
/// that serves that route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRoute {
    pub queue: &'static str,
    pub path: &'static str,
    pub service: Service,
}

/// Every queue the platform pushes to, and where its tasks go.
pub const QUEUE_ROUTES: &[QueueRoute] = &[
    QueueRoute { queue: DISPATCH_QUEUE, path: DISPATCH_PATH, service: Service::Tasks },
    QueueRoute { queue: FINALIZE_QUEUE, path: FINALIZE_PATH, service: Service::Meter },
    QueueRoute { queue: FANOUT_QUEUE, path: FANOUT_PATH, service: Service::Tasks },
    QueueRoute { queue: ITEMS_QUEUE, path: ITEM_PATH, service: Service::Tasks },
    QueueRoute { queue: WEBHOOKS_QUEUE, path: DELIVER_PATH, service: Service::Tasks },
    QueueRoute { queue: EXPORT_QUEUE, path: EXPORT_PATH, service: Service::Tasks },
    QueueRoute { queue: PURGE_QUEUE, path: PURGE_PATH, service: Service::Tasks },
    QueueRoute { queue: TICK_QUEUE, path: TICK_PATH, service: Service::ReconcileTick },
    QueueRoute { queue: WORKFLOWS_QUEUE, path: ADVANCE_PATH, service: Service::Submit },
];

/// Where the queues `service` serves deliver with Cloud Tasks.
pub fn service_url(ct: &CloudTasksConfig, service: Service, public_url: &str) -> String {
    match service {
        Service::Tasks => ct.submit_tasks_url(public_url),
        Service::Meter => ct.meter_url(public_url),
        Service::ReconcileTick => ct.tick_url(public_url),
        Service::Submit | Service::PushEvents | Service::Admin => ct.target_url(public_url),
    }
}

/// The service that serves `queue`'s tasks.
pub fn service_of_queue(queue: &str) -> Option<Service> {
    QUEUE_ROUTES.iter().find(|q| q.queue == queue).map(|q| q.service)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(submit_tasks: Option<&str>, meter: Option<&str>) -> CloudTasksConfig {
        CloudTasksConfig {
            project: "p".into(),
            location: "europe-west1".into(),
            target: Some("https://all.example/".into()),
            submit_tasks_url: submit_tasks.map(str::to_owned),
            meter_url: meter.map(str::to_owned),
            tick_url: meter.map(|_| "https://tick.example".to_owned()),
            service_account: "tasks@p.iam.gserviceaccount.com".into(),
            audience: None,
            endpoint: None,
        }
    }

    #[test]
    fn each_queue_delivers_to_the_service_that_serves_its_route() {
        let ct = config(Some("https://submit-tasks.example"), Some("https://meter.example/"));
        let settings = crate::cloudtasks_settings(&ct, "http://public.example").expect("settings");
        let by_hand = [
            ("dispatch", "https://submit-tasks.example"),
            ("finalize", "https://meter.example"),
            ("job-fanout", "https://submit-tasks.example"),
            ("job-items", "https://submit-tasks.example"),
            ("tenant-export", "https://submit-tasks.example"),
            ("tenant-purge", "https://submit-tasks.example"),
            ("webhooks", "https://submit-tasks.example"),
            ("tick", "https://tick.example"),
            ("workflows", "https://all.example"),
        ];
        assert_eq!(settings.targets.len(), by_hand.len(), "{:?}", settings.targets);
        for (queue, url) in by_hand {
            assert_eq!(settings.targets.get(queue).map(String::as_str), Some(url), "{queue}");
        }
        let configured: Vec<&str> = settings.queues.iter().map(|q| q.name.as_str()).collect();
        for q in QUEUE_ROUTES {
            assert!(configured.contains(&q.queue), "{} has a target but no queue config", q.queue);
        }
        assert_eq!(configured.len(), QUEUE_ROUTES.len(), "every configured queue has a route");
        assert_eq!(settings.audience, "https://all.example", "one audience: the shared target's");
    }

    #[test]
    fn one_host_serves_every_queue_unless_services_are_named() {
        let settings =
            crate::cloudtasks_settings(&config(None, None), "http://public.example").expect("settings");
        assert!(settings.targets.values().all(|t| t == "https://all.example"), "{:?}", settings.targets);
        let mut ct = config(None, None);
        ct.target = None;
        let settings = crate::cloudtasks_settings(&ct, "http://public.example/").expect("settings");
        assert!(settings.targets.values().all(|t| t == "http://public.example"), "{:?}", settings.targets);
    }
}
