//! The Cloud Tasks queue's settings (`MAPI_QUEUE=cloudtasks`), as the
//! environment gives them: the project and location of the queues, who
//! each queue delivers to and with which identity. The platform resolves
//! them into the adapter's [`Settings`](crate::Settings) with its route
//! table (which service serves which queue).

use mapi_settings::{Env, Var};

/// `MAPI_CLOUDTASKS_PROJECT`.
pub const PROJECT: Var = Var::required(
    "MAPI_CLOUDTASKS_PROJECT",
    "none (necessary for cloudtasks)",
    "cloudtasks: the project of the queues",
);
/// `MAPI_CLOUDTASKS_LOCATION`.
pub const LOCATION: Var =
    Var::new("MAPI_CLOUDTASKS_LOCATION", "europe-west1", "cloudtasks: the location of the queues");
/// `MAPI_CLOUDTASKS_TARGET_URL`.
pub const TARGET_URL: Var = Var::derived(
    "MAPI_CLOUDTASKS_TARGET_URL",
    "MAPI_PUBLIC_URL",
    "cloudtasks: the base URL tasks are delivered to, when one host serves every task route",
);
/// `MAPI_SUBMIT_TASKS_URL`.
pub const SUBMIT_TASKS_URL: Var = Var::derived(
    "MAPI_SUBMIT_TASKS_URL",
    "MAPI_CLOUDTASKS_TARGET_URL",
    "cloudtasks: the URL of the `submit-tasks` service, where the dispatch, job-fanout and job-items queues deliver",
);
/// `MAPI_METER_URL`.
pub const METER_URL: Var = Var::derived(
    "MAPI_METER_URL",
    "MAPI_CLOUDTASKS_TARGET_URL",
    "cloudtasks: the URL of the `meter` service, where the finalize queue delivers",
);
/// `MAPI_TICK_URL`.
pub const TICK_URL: Var = Var::derived(
    "MAPI_TICK_URL",
    "MAPI_CLOUDTASKS_TARGET_URL",
    "cloudtasks: the URL of the `reconcile-tick` service, where the tick queue delivers",
);
/// `MAPI_CLOUDTASKS_SERVICE_ACCOUNT`.
pub const SERVICE_ACCOUNT: Var = Var::required(
    "MAPI_CLOUDTASKS_SERVICE_ACCOUNT",
    "none (necessary for cloudtasks)",
    "cloudtasks: the service account whose OIDC token each delivery carries",
);
/// `MAPI_CLOUDTASKS_AUDIENCE`.
pub const AUDIENCE: Var = Var::derived(
    "MAPI_CLOUDTASKS_AUDIENCE",
    "MAPI_CLOUDTASKS_TARGET_URL",
    "cloudtasks: the audience of that token, one for every queue (with one service per queue, a custom audience of each)",
);
/// `MAPI_CLOUDTASKS_ENDPOINT`.
pub const ENDPOINT: Var = Var::derived(
    "MAPI_CLOUDTASKS_ENDPOINT",
    "https://cloudtasks.googleapis.com",
    "cloudtasks: the API endpoint (a plain `http://` one is a local fake, called without credentials)",
);

/// Every variable the Cloud Tasks queue reads (the platform's README table
/// is built from this with the others).
pub const VARIABLES: &[Var] = &[
    PROJECT,
    LOCATION,
    TARGET_URL,
    SUBMIT_TASKS_URL,
    METER_URL,
    TICK_URL,
    SERVICE_ACCOUNT,
    AUDIENCE,
    ENDPOINT,
];

/// Where the tasks go with `MAPI_QUEUE=cloudtasks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    pub project: String,
    pub location: String,
    /// The base URL tasks are delivered to when one host serves every task
    /// route; the platform's public URL when `None`.
    pub target: Option<String>,
    /// The `submit-tasks` service's URL; `target` when `None`.
    pub submit_tasks_url: Option<String>,
    /// The `meter` service's URL; `target` when `None`.
    pub meter_url: Option<String>,
    /// The `reconcile-tick` service's URL; `target` when `None`.
    pub tick_url: Option<String>,
    /// The service account whose OIDC token each delivery carries.
    pub service_account: String,
    /// The token's audience; the target URL when `None`.
    pub audience: Option<String>,
    /// Another endpoint than Google's (a fake, over plain HTTP).
    pub endpoint: Option<String>,
}

impl QueueSettings {
    /// Reads the settings through `env`.
    pub fn from_env(env: Env<'_>) -> Result<QueueSettings, String> {
        let need = |v: &Var| v.require(env, "MAPI_QUEUE=cloudtasks").map_err(|e| e.0);
        let url = |v: &Var| {
            let u = v.get(env);
            match &u {
                Some(s) if !(s.starts_with("https://") || s.starts_with("http://")) => {
                    Err(format!("{} `{s}` must start with https:// (or http:// for a local fake)", v.name))
                }
                _ => Ok(u),
            }
        };
        Ok(QueueSettings {
            project: need(&PROJECT)?,
            location: LOCATION.raw(env).unwrap_or_default(),
            target: url(&TARGET_URL)?,
            submit_tasks_url: url(&SUBMIT_TASKS_URL)?,
            meter_url: url(&METER_URL)?,
            tick_url: url(&TICK_URL)?,
            service_account: need(&SERVICE_ACCOUNT)?,
            audience: AUDIENCE.get(env),
            endpoint: url(&ENDPOINT)?,
        })
    }

    /// The base URL tasks are delivered to when one host serves them all.
    pub fn target_url(&self, public_url: &str) -> String {
        self.target.as_deref().unwrap_or(public_url).trim_end_matches('/').to_owned()
    }

    /// Where the `submit-tasks` service's queues deliver.
    pub fn submit_tasks_url(&self, public_url: &str) -> String {
        self.own_or_target(self.submit_tasks_url.as_deref(), public_url)
    }

    /// Where the `meter` service's queue delivers.
    pub fn meter_url(&self, public_url: &str) -> String {
        self.own_or_target(self.meter_url.as_deref(), public_url)
    }

    /// Where the `reconcile-tick` service's queue delivers.
    pub fn tick_url(&self, public_url: &str) -> String {
        self.own_or_target(self.tick_url.as_deref(), public_url)
    }

    fn own_or_target(&self, own: Option<&str>, public_url: &str) -> String {
        own.map_or_else(|| self.target_url(public_url), |u| u.trim_end_matches('/').to_owned())
    }

    /// The audience of the ID tokens deliveries carry, which the task
    /// routes check: the configured one, else the target URL (one audience
    /// for every queue, so a service split off keeps accepting them as a
    /// custom audience).
    pub fn token_audience(&self, public_url: &str) -> String {
        self.audience.clone().unwrap_or_else(|| self.target_url(public_url))
    }
}

#[cfg(test)]
mod tests {
    use mapi_settings::env_of as env;

    use super::*;

    const NEEDED: [(&str, &str); 2] = [
        ("MAPI_CLOUDTASKS_PROJECT", "mapi-prod"),
        ("MAPI_CLOUDTASKS_SERVICE_ACCOUNT", "tasks@mapi-prod.iam.gserviceaccount.com"),
    ];

    #[test]
    fn each_queue_service_has_its_url_else_the_target_else_the_public_url() {
        let s = QueueSettings::from_env(&env(&NEEDED)).expect("settings");
        assert_eq!(s.location, "europe-west1");
        let public = "https://api.example/";
        let trimmed = "https://api.example".to_owned();
        assert_eq!((s.submit_tasks_url(public), s.meter_url(public)), (trimmed.clone(), trimmed));
        assert_eq!(s.token_audience(public), "https://api.example");
        let mut pairs = NEEDED.to_vec();
        pairs.extend([
            ("MAPI_CLOUDTASKS_TARGET_URL", "https://tasks.example"),
            ("MAPI_METER_URL", "https://meter.example/"),
        ]);
        let s = QueueSettings::from_env(&env(&pairs)).expect("settings");
        assert_eq!(s.submit_tasks_url(public), "https://tasks.example");
        assert_eq!(s.meter_url(public), "https://meter.example");
        assert_eq!(s.token_audience(public), "https://tasks.example");
        mapi_settings::assert_reads_exactly(VARIABLES, &env(&NEEDED), |e| {
            QueueSettings::from_env(e).expect("settings");
        });
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = QueueSettings::from_env(&env(&NEEDED[..1])).expect_err("no account");
        assert!(e.contains("MAPI_CLOUDTASKS_SERVICE_ACCOUNT"), "{e}");
        let mut pairs = NEEDED.to_vec();
        pairs.push(("MAPI_METER_URL", "meter.internal"));
        let e = QueueSettings::from_env(&env(&pairs)).expect_err("no scheme");
        assert!(e.contains("MAPI_METER_URL `meter.internal`"), "{e}");
    }
}
