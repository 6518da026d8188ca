//! A [`Harness`] on the platform's own ports: the executor under test, the
//! data bucket (datasets and outputs through signed URLs) and the bootstrap
//! bucket. The suites' attempts are prepared exactly as the platform
//! prepares a run's: a dataset, signed URLs for each output and the
//! checkpoint, and a bootstrap per task under the task's nonce. Used by the
//! suites' tests and by `POST /v1/admin/executors/{name}/verify`, which runs
//! them against the live platform's executor.
//!
//! Its attempts live under tenant `dev`, project `suites`
//! (`t/dev/p/suites/…`), and are removed with the project's objects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_clock::Clock;
use mapi_domain::{BOOTSTRAP_VERSION, Bootstrap, ProjectId, RunId, TenantId, Timestamp};
use mapi_objects::{IfGeneration, ObjectKey, ObjectStore, SignedMethod};
use serde_json::{Value, json};

use super::{Behaviour, Harness, Stored, Throttling};
use crate::{AttemptSubmit, Executor};

/// Where the suites' objects live.
pub const PREFIX: &str = "t/dev/p/suites";

/// How long the suites' signed URLs live.
const TTL: Duration = Duration::from_secs(600);

/// Where the suites' runs are noted before their attempts start (the platform keeps them, so
/// their executions' events are known as the suites').
#[async_trait]
pub trait SuiteLedger: Send + Sync {
    /// Notes `run` as a suite's.
    ///
    /// # Panics
    ///
    /// When it cannot: the suite does not start an attempt it could not note.
    async fn note(&self, run: &RunId);
}

/// The suites' harness on the platform's ports.
#[derive(Clone)]
pub struct PortsHarness {
    pub executor: Arc<dyn Executor>,
    pub data: Arc<dyn ObjectStore>,
    pub bootstrap: Arc<dyn ObjectStore>,
    pub clock: Arc<dyn Clock>,
    /// The memory limit the executor applies to class S, in MiB.
    pub class_s_mib: u64,
    /// Where each attempt's run is noted first, if anywhere.
    pub ledger: Option<Arc<dyn SuiteLedger>>,
}

impl std::fmt::Debug for PortsHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortsHarness")
            .field("executor", &self.executor.capabilities().executor)
            .field("class_s_mib", &self.class_s_mib)
            .finish_non_exhaustive()
    }
}

fn key(s: &str) -> ObjectKey {
    ObjectKey::parse(s).unwrap_or_else(|e| panic!("the suites' object key {s}: {e}"))
}

impl PortsHarness {
    fn task_dir(a: &AttemptSubmit, task: u32) -> String {
        format!("{PREFIX}/runs/{}/a{}/tasks/{task}", a.run, a.attempt)
    }

    async fn sign(&self, method: SignedMethod, k: &ObjectKey) -> String {
        self.data.signed_url(method, k, TTL).await.unwrap_or_else(|e| panic!("signing {k}: {e}"))
    }

    /// The method, params and outputs of a behaviour.
    fn method(behaviour: Behaviour) -> (String, Value, Vec<String>) {
        let outputs_of = |m: &str| {
            mapi_methods::find(m)
                .map(|s| s.outputs.iter().map(|o| o.name.to_owned()).collect())
                .unwrap_or_default()
        };
        let (method, params) = match behaviour {
            Behaviour::Succeed => ("describe", json!({})),
            Behaviour::Fail => ("diag.fail", json!({"message": "asked to fail"})),
            Behaviour::Sleep { seconds, checkpoint } if checkpoint => {
                ("diag.sleep", json!({"seconds": seconds, "checkpoint_every_s": 0.2}))
            }
            Behaviour::Sleep { seconds, .. } => ("diag.sleep", json!({"seconds": seconds})),
            Behaviour::Silent { seconds } => {
                ("diag.sleep", json!({"seconds": seconds, "progress_every_s": 3600}))
            }
            Behaviour::Allocate { mib } => ("diag.alloc", json!({"mib": mib, "hold_s": 5})),
            Behaviour::Resume { seconds, .. } => ("diag.sleep", json!({"seconds": seconds})),
            Behaviour::Probe(plan) => {
                let params = serde_json::to_value(plan).unwrap_or_else(|e| panic!("the probes' plan: {e}"));
                return (
                    crate::security::PROBE_METHOD.to_owned(),
                    params,
                    vec![crate::security::REPORT.to_owned()],
                );
            }
        };
        (method.to_owned(), params, outputs_of(method))
    }
}

#[async_trait]
impl Harness for PortsHarness {
    fn executor(&self) -> &dyn Executor {
        &*self.executor
    }

    async fn prepare(&self, a: &AttemptSubmit, behaviour: Behaviour) {
        if let Some(ledger) = &self.ledger {
            ledger.note(&a.run).await;
        }
        let resume_from = match behaviour {
            Behaviour::Resume { from_s, .. } => Some(from_s),
            _ => None,
        };
        let (method, params, outputs_of) = Self::method(behaviour);
        let dataset = key(&format!("{PREFIX}/datasets/{}.csv", a.nonce));
        self.data
            .put(&dataset, Bytes::from_static(b"x,y\n1,2\n3,4\n"), "text/csv", IfGeneration::Any)
            .await
            .unwrap_or_else(|e| panic!("the suites' dataset: {e}"));
        let params: BTreeMap<String, Value> =
            serde_json::from_value(params).unwrap_or_else(|e| panic!("params are an object: {e}"));
        for task in 0..a.task_count {
            let dir = Self::task_dir(a, task);
            let mut outputs = BTreeMap::new();
            for name in &outputs_of {
                let url =
                    self.sign(SignedMethod::PutCreateOnly, &key(&format!("{dir}/outputs/{name}"))).await;
                outputs.insert(name.clone(), url);
            }
            // An earlier attempt's checkpoint, where the behaviour resumes from one.
            let resume_url = match resume_from {
                Some(from_s) => {
                    let k = key(&format!("{dir}/earlier-checkpoint.json"));
                    let state = Bytes::from(json!({"elapsed_s": from_s}).to_string());
                    self.data
                        .put(&k, state, "application/json", IfGeneration::Any)
                        .await
                        .unwrap_or_else(|e| panic!("the earlier checkpoint: {e}"));
                    Some(self.sign(SignedMethod::Get, &k).await)
                }
                None => None,
            };
            let boot = Bootstrap {
                v: BOOTSTRAP_VERSION,
                tenant: TenantId::parse("dev").unwrap_or_else(|e| panic!("{e}")),
                project: ProjectId::parse("suites").unwrap_or_else(|e| panic!("{e}")),
                run: a.run.clone(),
                attempt: a.attempt,
                task,
                task_count: a.task_count,
                method: method.clone(),
                params: params.clone(),
                timeout_s: u32::try_from(a.timeout.as_secs()).unwrap_or(u32::MAX),
                dataset_url: self.sign(SignedMethod::Get, &dataset).await,
                outputs,
                checkpoint_url: self.sign(SignedMethod::Put, &key(&format!("{dir}/checkpoint.json"))).await,
                resume_url,
                event_key: mapi_events::AttemptKey::from_bytes([7; 32]).to_hex(),
                plugin: None,
                reuse: None,
            };
            let name = key(a.nonce.for_task(task).as_str());
            let bytes = Bytes::from(serde_json::to_vec(&boot).unwrap_or_else(|e| panic!("bootstrap: {e}")));
            self.bootstrap
                .put(&name, bytes, "application/json", IfGeneration::ABSENT)
                .await
                .unwrap_or_else(|e| panic!("the bootstrap of {name}: {e}"));
        }
    }

    fn class_s_memory_mib(&self) -> u64 {
        self.class_s_mib
    }

    async fn bootstrap_present(&self, a: &AttemptSubmit, task: u32) -> bool {
        self.bootstrap.head(&key(a.nonce.for_task(task).as_str())).await.is_ok()
    }

    async fn written(&self, a: &AttemptSubmit) -> usize {
        let prefix = format!("{PREFIX}/runs/{}/", a.run);
        self.data.list(&prefix, None, 1000).await.map(|p| p.objects.len()).unwrap_or(0)
    }

    async fn output(&self, a: &AttemptSubmit, task: u32, name: &str) -> Option<Stored> {
        let k = key(&format!("{}/outputs/{name}", Self::task_dir(a, task)));
        let (meta, bytes) = self.data.get(&k, None).await.ok()?;
        Some(Stored { generation: meta.generation.0, bytes: bytes.to_vec() })
    }

    /// The platform's own executor: 429s come only from a real API here, which cannot be made to
    /// answer them; a local executor has no API to throttle it.
    fn throttling(&self) -> Throttling {
        if self.executor.capabilities().remote_control_api {
            Throttling::CannotInject
        } else {
            Throttling::NeverThrottles
        }
    }

    async fn throttle_next(&self, answers: u32) {
        panic!("{answers} 429s cannot be injected into the platform's own executor");
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }
}
