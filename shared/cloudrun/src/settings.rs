//! The executor's settings: every variable it reads (`MAPI_ENV` and the
//! `MAPI_CLOUDRUN_*` ones), with its default and meaning.

use std::collections::BTreeMap;
use std::time::Duration;

use mapi_settings::{Env, Var};

/// The most `jobs.run` calls a minute one project and region allows
/// ([`crate::assumptions::JOBS_RUN_QUOTA_PER_MINUTE`]); the bucket may not
/// be set above it.
pub const MAX_SUBMITS_PER_MINUTE: u32 = crate::assumptions::JOBS_RUN_QUOTA_PER_MINUTE;

/// `MAPI_CLOUDRUN_PROJECT`.
pub const PROJECT: Var = Var::required(
    "MAPI_CLOUDRUN_PROJECT",
    "none (necessary)",
    "cloudrun-jobs: the exec project that holds the Job inventory",
);
/// `MAPI_CLOUDRUN_REGION`.
pub const REGION: Var =
    Var::new("MAPI_CLOUDRUN_REGION", "europe-west1", "cloudrun-jobs: region of the inventory");
/// `MAPI_ENV`.
pub const ENV: Var = Var::new("MAPI_ENV", "prod", "The `{env}` of Job names and buckets");
/// `MAPI_CLOUDRUN_JOB_TEMPLATE`.
pub const JOB_TEMPLATE: Var =
    Var::new("MAPI_CLOUDRUN_JOB_TEMPLATE", "mapi-{env}-{base}-{class}", "cloudrun-jobs: rule for Job ids");
/// `MAPI_CLOUDRUN_PLUGIN_BASES`.
pub const PLUGIN_BASES: Var = Var::new(
    "MAPI_CLOUDRUN_PLUGIN_BASES",
    "{\"mmm\":\"base-bayes\",\"sci\":\"base-bayes\",\"tabular\":\"base-bayes\",\"sklearn\":\"base-ml\",\"ts\":\"base-forecast\",\"causal\":\"base-forecast\",\"dl\":\"base-dl\"}",
    "cloudrun-jobs: method namespace to base image (JSON object)",
);
/// `MAPI_CLOUDRUN_DEFAULT_BASE`.
pub const DEFAULT_BASE: Var = Var::new(
    "MAPI_CLOUDRUN_DEFAULT_BASE",
    "base-bayes",
    "cloudrun-jobs: base for methods without a plugin base",
);
/// `MAPI_CLOUDRUN_GPU_JOBS`.
pub const GPU_JOBS: Var =
    Var::new("MAPI_CLOUDRUN_GPU_JOBS", "false", "cloudrun-jobs: the inventory has the GPU Job of base-dl");
/// `MAPI_CLOUDRUN_SUBMITS_PER_MINUTE`.
pub const SUBMITS_PER_MINUTE: Var = Var::new(
    "MAPI_CLOUDRUN_SUBMITS_PER_MINUTE",
    "150",
    "cloudrun-jobs: token bucket in front of jobs.run (at most 180)",
);
/// `MAPI_CLOUDRUN_SUBMIT_BURST`.
pub const SUBMIT_BURST: Var =
    Var::new("MAPI_CLOUDRUN_SUBMIT_BURST", "10", "cloudrun-jobs: the bucket's burst");
/// `MAPI_CLOUDRUN_MAX_429_RETRIES`.
pub const MAX_429_RETRIES: Var = Var::new(
    "MAPI_CLOUDRUN_MAX_429_RETRIES",
    "6",
    "cloudrun-jobs: 429 answers in a row before the run goes back to the queue",
);
/// `MAPI_CLOUDRUN_BACKOFF_BASE_S`.
pub const BACKOFF_BASE_S: Var = Var::new(
    "MAPI_CLOUDRUN_BACKOFF_BASE_S",
    "1",
    "cloudrun-jobs: first cool-down after a 429 (doubles per 429 in a row)",
);
/// `MAPI_CLOUDRUN_BACKOFF_CAP_S`.
pub const BACKOFF_CAP_S: Var =
    Var::new("MAPI_CLOUDRUN_BACKOFF_CAP_S", "64", "cloudrun-jobs: longest cool-down");
/// `MAPI_CLOUDRUN_TIMEOUT_MARGIN_S`.
pub const TIMEOUT_MARGIN_S: Var =
    Var::new("MAPI_CLOUDRUN_TIMEOUT_MARGIN_S", "120", "cloudrun-jobs: task timeout = run timeout + margin");
/// `MAPI_CLOUDRUN_EGRESS_ENFORCED`.
pub const EGRESS_ENFORCED: Var =
    Var::new("MAPI_CLOUDRUN_EGRESS_ENFORCED", "true", "cloudrun-jobs: the exec network denies all egress");
/// `MAPI_CLOUDRUN_DNS_ENFORCED`.
pub const DNS_ENFORCED: Var = Var::new(
    "MAPI_CLOUDRUN_DNS_ENFORCED",
    "false",
    "cloudrun-jobs: the DNS response policy is verified for Jobs",
);
/// `MAPI_CLOUDRUN_ADOPT_LOOKBACK_S`.
pub const ADOPT_LOOKBACK_S: Var =
    Var::new("MAPI_CLOUDRUN_ADOPT_LOOKBACK_S", "93600", "cloudrun-jobs: how far back orphan adoption looks");
/// `MAPI_CLOUDRUN_ENDPOINT`.
pub const ENDPOINT: Var = Var::derived(
    "MAPI_CLOUDRUN_ENDPOINT",
    "Google's",
    "cloudrun-jobs: root of the Cloud Run Admin API (a fake's in tests)",
);
/// `MAPI_CLOUDRUN_LOGGING_ENDPOINT`.
pub const LOGGING_ENDPOINT: Var = Var::derived(
    "MAPI_CLOUDRUN_LOGGING_ENDPOINT",
    "Google's",
    "cloudrun-jobs: root of the Cloud Logging API the tasks' output is read from (a fake's in tests)",
);
/// `MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S`.
pub const MAX_SUBMIT_WAIT_S: Var = Var::new(
    "MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S",
    "60",
    "cloudrun-jobs: longest wait for a bucket slot before the run goes back to the queue",
);

/// Every variable the executor reads (the platform's README table is
/// built from this with the others).
pub const VARIABLES: &[Var] = &[
    PROJECT,
    REGION,
    ENV,
    JOB_TEMPLATE,
    PLUGIN_BASES,
    DEFAULT_BASE,
    GPU_JOBS,
    SUBMITS_PER_MINUTE,
    SUBMIT_BURST,
    MAX_429_RETRIES,
    BACKOFF_BASE_S,
    BACKOFF_CAP_S,
    TIMEOUT_MARGIN_S,
    EGRESS_ENFORCED,
    DNS_ENFORCED,
    ADOPT_LOOKBACK_S,
    ENDPOINT,
    LOGGING_ENDPOINT,
    MAX_SUBMIT_WAIT_S,
];

/// Settings of the cloudrun-jobs executor.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `MAPI_CLOUDRUN_PROJECT`: the exec project that holds the Job inventory.
    pub project: String,
    /// `MAPI_CLOUDRUN_REGION`.
    pub region: String,
    /// `MAPI_ENV`: the `{env}` of Job names.
    pub env: String,
    /// `MAPI_CLOUDRUN_JOB_TEMPLATE`.
    pub job_template: String,
    /// `MAPI_CLOUDRUN_PLUGIN_BASES`: method namespace to base image.
    pub plugin_bases: BTreeMap<String, String>,
    /// `MAPI_CLOUDRUN_DEFAULT_BASE`.
    pub default_base: String,
    /// `MAPI_CLOUDRUN_GPU_JOBS`.
    pub gpu_jobs: bool,
    /// `MAPI_CLOUDRUN_SUBMITS_PER_MINUTE`.
    pub submits_per_minute: u32,
    /// `MAPI_CLOUDRUN_SUBMIT_BURST`.
    pub submit_burst: u32,
    /// `MAPI_CLOUDRUN_MAX_429_RETRIES`.
    pub max_429_retries: u32,
    /// `MAPI_CLOUDRUN_BACKOFF_BASE_S`.
    pub backoff_base: Duration,
    /// `MAPI_CLOUDRUN_BACKOFF_CAP_S`.
    pub backoff_cap: Duration,
    /// `MAPI_CLOUDRUN_TIMEOUT_MARGIN_S`.
    pub timeout_margin: Duration,
    /// `MAPI_CLOUDRUN_EGRESS_ENFORCED`.
    pub egress_enforced: bool,
    /// `MAPI_CLOUDRUN_DNS_ENFORCED`.
    pub dns_enforced: bool,
    /// `MAPI_CLOUDRUN_ADOPT_LOOKBACK_S`.
    pub adopt_lookback: Duration,
    /// `MAPI_CLOUDRUN_ENDPOINT`: the Admin API's root (a fake's in tests).
    pub endpoint: Option<String>,
    /// `MAPI_CLOUDRUN_LOGGING_ENDPOINT`: the Cloud Logging API's root (a fake's in tests), where
    /// `logs` reads what the tasks printed.
    pub logging_endpoint: Option<String>,
    /// `MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S`: the longest a dispatcher waits
    /// for its slot in the bucket; a longer wait goes back to the queue
    /// (keep it below the dispatch queue's dispatch deadline).
    pub max_submit_wait: Duration,
}

impl Settings {
    /// The declared defaults for `project`.
    ///
    /// # Panics
    /// Never: every declared default parses (a test holds it).
    pub fn new(project: impl Into<String>) -> Settings {
        let project = project.into();
        let env = |k: &str| (k == PROJECT.name).then(|| project.clone());
        Settings::from_env(&env).expect("the declared defaults are valid settings")
    }

    /// Reads the settings through `get` (the environment in production).
    pub fn from_env(env: Env<'_>) -> Result<Settings, String> {
        let project = PROJECT.require(env, "MAPI_EXECUTOR=cloudrun-jobs").map_err(|e| e.0)?;
        let text = |v: &Var| v.raw(env).unwrap_or_default();
        let plugin_bases = serde_json::from_str(&text(&PLUGIN_BASES)).map_err(|_| {
            format!(
                "{} is not a JSON object of namespace to base, e.g. {{\"mmm\":\"base-bayes\"}}",
                PLUGIN_BASES.name
            )
        })?;
        let e = |e: mapi_settings::Invalid| e.0;
        let s = Settings {
            project,
            region: text(&REGION),
            env: text(&ENV),
            job_template: text(&JOB_TEMPLATE),
            plugin_bases,
            default_base: text(&DEFAULT_BASE),
            gpu_jobs: GPU_JOBS.flag(env).map_err(e)?,
            submits_per_minute: SUBMITS_PER_MINUTE.parse(env).map_err(e)?,
            submit_burst: SUBMIT_BURST.parse(env).map_err(e)?,
            max_429_retries: MAX_429_RETRIES.parse(env).map_err(e)?,
            backoff_base: BACKOFF_BASE_S.seconds(env).map_err(e)?,
            backoff_cap: BACKOFF_CAP_S.seconds(env).map_err(e)?,
            timeout_margin: TIMEOUT_MARGIN_S.seconds(env).map_err(e)?,
            egress_enforced: EGRESS_ENFORCED.flag(env).map_err(e)?,
            dns_enforced: DNS_ENFORCED.flag(env).map_err(e)?,
            adopt_lookback: ADOPT_LOOKBACK_S.seconds(env).map_err(e)?,
            endpoint: ENDPOINT.get(env),
            logging_endpoint: LOGGING_ENDPOINT.get(env),
            max_submit_wait: MAX_SUBMIT_WAIT_S.seconds(env).map_err(e)?,
        };
        s.validate()?;
        Ok(s)
    }

    /// Refuses settings the executor cannot honour.
    pub fn validate(&self) -> Result<(), String> {
        if self.submits_per_minute == 0 || self.submits_per_minute > MAX_SUBMITS_PER_MINUTE {
            return Err(format!(
                "MAPI_CLOUDRUN_SUBMITS_PER_MINUTE={} must be between 1 and {MAX_SUBMITS_PER_MINUTE} (the jobs.run quota of a project and region; divide it between replicas)",
                self.submits_per_minute
            ));
        }
        if self.submit_burst == 0 {
            return Err("MAPI_CLOUDRUN_SUBMIT_BURST must be at least 1".to_owned());
        }
        if self.backoff_base.is_zero() || self.backoff_cap < self.backoff_base {
            return Err(
                "MAPI_CLOUDRUN_BACKOFF_BASE_S must be at least 1 and at most MAPI_CLOUDRUN_BACKOFF_CAP_S"
                    .to_owned(),
            );
        }
        for key in ["{base}", "{class}"] {
            if !self.job_template.contains(key) {
                return Err(format!(
                    "MAPI_CLOUDRUN_JOB_TEMPLATE `{}` must contain {key}: one Job per base and class",
                    self.job_template
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use mapi_settings::env_of as env;

    use super::*;

    #[test]
    fn defaults_are_the_seed_table() {
        let s = Settings::from_env(&env(&[("MAPI_CLOUDRUN_PROJECT", "p")])).expect("settings");
        assert_eq!(s.region, "europe-west1");
        assert_eq!(s.job_template, "mapi-{env}-{base}-{class}");
        assert_eq!((s.submits_per_minute, s.submit_burst, s.max_429_retries), (150, 10, 6));
        assert_eq!((s.backoff_base.as_secs(), s.backoff_cap.as_secs()), (1, 64));
        assert_eq!(s.timeout_margin.as_secs(), 120);
        assert_eq!(s.adopt_lookback.as_secs(), 93_600);
        assert!(s.egress_enforced && !s.dns_enforced && !s.gpu_jobs);
        assert_eq!(s.plugin_bases["causal"], "base-forecast");
        assert_eq!(s.default_base, "base-bayes");
        mapi_settings::assert_reads_exactly(VARIABLES, &env(&[("MAPI_CLOUDRUN_PROJECT", "p")]), |e| {
            Settings::from_env(e).expect("settings");
        });
    }

    #[test]
    fn bad_settings_are_refused_with_the_variable_named() {
        let e = Settings::from_env(&env(&[])).expect_err("project is necessary");
        assert!(e.contains("MAPI_CLOUDRUN_PROJECT"), "{e}");
        let e = Settings::from_env(&env(&[
            ("MAPI_CLOUDRUN_PROJECT", "p"),
            ("MAPI_CLOUDRUN_SUBMITS_PER_MINUTE", "181"),
        ]))
        .expect_err("above the quota");
        assert!(e.contains("180"), "{e}");
        let e = Settings::from_env(&env(&[
            ("MAPI_CLOUDRUN_PROJECT", "p"),
            ("MAPI_CLOUDRUN_PLUGIN_BASES", "[1]"),
        ]))
        .expect_err("not a map");
        assert!(e.contains("MAPI_CLOUDRUN_PLUGIN_BASES"), "{e}");
        let e = Settings::from_env(&env(&[
            ("MAPI_CLOUDRUN_PROJECT", "p"),
            ("MAPI_CLOUDRUN_JOB_TEMPLATE", "mapi-{base}"),
        ]))
        .expect_err("no class");
        assert!(e.contains("{class}"), "{e}");
    }
}
