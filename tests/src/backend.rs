//! One platform, two executors: the same run-level cases start the
//! platform on `local-process` or on `cloudrun-jobs` over FakeCloudRun
//! (configured through the environment, exactly as a deployment is).

use std::collections::BTreeMap;
use std::ops::Deref;

use crate::fake_cloudrun::{FakeCloudRun, PushTarget};
use crate::{Options, TestPlatform};

/// Where the platform runs attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    LocalProcess,
    /// The local host running each task in a gVisor sandbox (needs root and `runsc`).
    Gvisor,
    CloudRunJobs,
}

/// A platform and, on cloudrun-jobs, the fake Cloud Run behind it.
#[derive(Debug)]
pub struct Rig {
    pub platform: TestPlatform,
    pub fake: Option<FakeCloudRun>,
}

impl Deref for Rig {
    type Target = TestPlatform;
    fn deref(&self) -> &TestPlatform {
        &self.platform
    }
}

impl Rig {
    /// The fake, on cloudrun-jobs.
    pub fn fake(&self) -> &FakeCloudRun {
        self.fake.as_ref().expect("this case runs on cloudrun-jobs")
    }
}

pub const FAKE_PROJECT: &str = "fake-project";

/// Starts the platform on `backend` with `extra` settings. The local
/// executor's `MAPI_LOCAL_MEMORY_MIB` becomes the fake's per-class limits.
pub async fn start(backend: Backend, extra: &[(&str, &str)], options: Options) -> Rig {
    match backend {
        Backend::LocalProcess => Rig { platform: TestPlatform::start_with(extra, options).await, fake: None },
        Backend::Gvisor => {
            let vars = [extra, &[("MAPI_EXECUTOR", "gvisor")]].concat();
            Rig { platform: TestPlatform::start_with(&vars, options).await, fake: None }
        }
        Backend::CloudRunJobs => {
            let mut settings = mapi_cloudrun::Settings::new(FAKE_PROJECT);
            settings.env = "test".to_owned();
            let jobs = mapi_cloudrun::Inventory::new(&settings).jobs().iter().map(|j| j.id.clone()).collect();
            let fake = FakeCloudRun::start(
                FAKE_PROJECT,
                &settings.region,
                jobs,
                crate::worker(),
                options.clock.clone(),
            )
            .await;
            for (k, v) in extra {
                if *k == "MAPI_LOCAL_MEMORY_MIB" {
                    for pair in v.split(',') {
                        if let Some((class, mib)) = pair.split_once('=') {
                            fake.set_class_memory_limit_mib(class.trim(), mib.trim().parse().expect("MiB"));
                        }
                    }
                }
            }
            let mut vars: Vec<(&str, &str)> = extra.to_vec();
            vars.extend([
                ("MAPI_EXECUTOR", "cloudrun-jobs"),
                ("MAPI_CLOUDRUN_PROJECT", FAKE_PROJECT),
                ("MAPI_ENV", "test"),
                ("MAPI_CLOUDRUN_ENDPOINT", fake.url.as_str()),
                ("MAPI_CLOUDRUN_LOGGING_ENDPOINT", fake.logging.url.as_str()),
                ("MAPI_CLOUDRUN_TIMEOUT_MARGIN_S", "2"),
            ]);
            let platform = TestPlatform::start_with(&vars, options).await;
            fake.set_static_env(BTreeMap::from([(
                "MAPI_BOOTSTRAP_URL".to_owned(),
                platform.url("/o/bootstrap/{nonce}"),
            )]));
            fake.push_events_to(PushTarget {
                url: platform.url(mapi_push_events::EVENTS_PATH),
                token: platform.platform.state.config.secrets.internal_token.clone(),
            });
            Rig { platform, fake: Some(fake) }
        }
    }
}
