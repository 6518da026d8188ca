//! The port of a section a function does not use: its settings were not
//! read and no adapter was built, so the process holds no client, file or
//! credential for it. Every call answers an error that names the port; a handler that reaches one was routed to the wrong
//! service, which the route table's test rules out.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_domain::{ExecutionHandle, ResourceClass, Timestamp};
use mapi_executor::{
    AttemptSubmit, Capabilities, ExecutionInfo, Executor, ExecutorError, Forgot, Isolation, SubmitError,
};
use mapi_hosting::{HostingError, RevisionSpec, Route, Scaling, ServiceSpec, ServiceState, Traffic};
use mapi_objects::{
    Generation, IfGeneration, ListPage, ObjectError, ObjectKey, ObjectMeta, ObjectStore, SignedMethod,
};
use mapi_queue::{NewTask, QueueError, QueueName, TaskInfo, TaskName, TaskQueue};
use mapi_signer::{SignError, Signature, Signer, TrustedKeys, VerifyError};

/// A port the process does not use: `port` names it ("object store").
#[derive(Clone, Copy, Debug)]
pub struct Absent {
    pub port: &'static str,
}

impl Absent {
    fn why(&self) -> String {
        format!("this function does not use the {}: its settings were not read", self.port)
    }
}

#[async_trait]
impl ObjectStore for Absent {
    fn bucket(&self) -> &str {
        ""
    }

    async fn put(
        &self,
        _: &ObjectKey,
        _: Bytes,
        _: &str,
        _: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        Err(ObjectError::Internal(self.why().into()))
    }

    async fn get(&self, _: &ObjectKey, _: Option<Generation>) -> Result<(ObjectMeta, Bytes), ObjectError> {
        Err(ObjectError::Internal(self.why().into()))
    }

    async fn head(&self, _: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        Err(ObjectError::Internal(self.why().into()))
    }

    async fn delete(&self, _: &ObjectKey, _: IfGeneration) -> Result<(), ObjectError> {
        Err(ObjectError::Internal(self.why().into()))
    }

    async fn list(&self, _: &str, _: Option<&str>, _: u32) -> Result<ListPage, ObjectError> {
        Err(ObjectError::Internal(self.why().into()))
    }

    async fn signed_url(&self, _: SignedMethod, _: &ObjectKey, _: Duration) -> Result<String, ObjectError> {
        Err(ObjectError::Internal(self.why().into()))
    }
}

#[async_trait]
impl TaskQueue for Absent {
    async fn create(&self, _: NewTask) -> Result<TaskInfo, QueueError> {
        Err(QueueError::Internal(self.why().into()))
    }

    async fn delete(&self, _: &QueueName, _: &TaskName) -> Result<(), QueueError> {
        Err(QueueError::Internal(self.why().into()))
    }

    async fn depth(&self, _: &QueueName) -> Result<u64, QueueError> {
        Err(QueueError::Internal(self.why().into()))
    }
}

#[async_trait]
impl Executor for Absent {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            executor: "none".to_owned(),
            isolation: Isolation::Process,
            classes: Vec::new(),
            enforces_memory_limit: false,
            egress_enforced: false,
            dns_enforced: false,
            remote_control_api: false,
            max_task_count: 0,
            regions: Vec::new(),
            gpus: 0,
        }
    }

    fn check_placement(&self, _: ResourceClass, _: &str) -> Result<(), String> {
        Err(self.why())
    }

    async fn submit(&self, _: &AttemptSubmit) -> Result<ExecutionHandle, SubmitError> {
        Err(SubmitError::Refused(self.why()))
    }

    async fn status(&self, _: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError> {
        Err(ExecutorError::Internal(self.why().into()))
    }

    async fn list_recent(&self, _: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        Err(ExecutorError::Internal(self.why().into()))
    }

    async fn cancel(&self, _: &ExecutionHandle) -> Result<(), ExecutorError> {
        Err(ExecutorError::Internal(self.why().into()))
    }

    async fn forget(&self, _: &ExecutionHandle) -> Result<Forgot, ExecutorError> {
        Err(ExecutorError::Internal(self.why().into()))
    }

    async fn logs(
        &self,
        _: &ExecutionHandle,
        _: Option<&str>,
        _: usize,
    ) -> Result<mapi_executor::LogPage, ExecutorError> {
        Err(ExecutorError::Internal(self.why().into()))
    }

    fn backstop_margin(&self) -> Duration {
        Duration::ZERO
    }
}

#[async_trait]
impl Signer for Absent {
    fn key_version(&self) -> &str {
        ""
    }

    async fn sign(&self, _: &[u8]) -> Result<Signature, SignError> {
        Err(SignError::Config(self.why()))
    }

    fn verify(&self, _: &[u8], signature: &Signature) -> Result<(), VerifyError> {
        Err(VerifyError::UntrustedKey(signature.key_version.clone()))
    }

    fn trusted_keys(&self) -> &TrustedKeys {
        static NONE: TrustedKeys = TrustedKeys::EMPTY;
        &NONE
    }
}

#[async_trait]
impl mapi_hosting::Hosting for Absent {
    fn name(&self) -> &'static str {
        "absent"
    }

    async fn create(&self, _: &ServiceSpec, _: &RevisionSpec) -> Result<(), HostingError> {
        Err(self.hosting())
    }

    async fn add_revision(&self, _: &str, _: &RevisionSpec) -> Result<(), HostingError> {
        Err(self.hosting())
    }

    async fn set_traffic(&self, _: &str, _: &[Traffic]) -> Result<(), HostingError> {
        Err(self.hosting())
    }

    async fn set_scaling(&self, _: &str, _: Scaling) -> Result<(), HostingError> {
        Err(self.hosting())
    }

    async fn get(&self, _: &str) -> Result<ServiceState, HostingError> {
        Err(self.hosting())
    }

    async fn list(&self) -> Result<Vec<ServiceState>, HostingError> {
        Err(self.hosting())
    }

    async fn delete(&self, _: &str) -> Result<(), HostingError> {
        Err(self.hosting())
    }

    async fn route(&self, _: &str, _: Option<&str>) -> Result<Route, HostingError> {
        Err(self.hosting())
    }
}

impl Absent {
    fn hosting(&self) -> HostingError {
        HostingError::Invalid(self.why())
    }
}
