//! What a caller submits: the run spec as it arrives on the wire, with the
//! checks that need no registry or store.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

use crate::{DatasetId, ResourceClass};

/// Allowed run timeouts in seconds (Cloud Run Jobs allows tasks up to 24 h).
pub const TIMEOUT_RANGE_S: RangeInclusive<u32> = 1..=86_400;

/// Timeout when the spec gives none.
pub const DEFAULT_TIMEOUT_S: u32 = 3_600;

/// Allowed task counts of one execution (Cloud Run Jobs allows 10,000).
pub const TASKS_RANGE: RangeInclusive<u32> = 1..=10_000;

/// The body of `POST …/runs`. Unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSpecInput {
    /// The method to run, e.g. `tabular.linear`.
    pub method: String,
    /// The dataset the method reads.
    pub dataset: DatasetId,
    /// The method's parameters, each named once.
    #[serde(default, deserialize_with = "crate::unique::btree")]
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// Resource class; `S` when absent.
    #[serde(default = "default_class")]
    pub class: ResourceClass,
    /// Timeout in seconds, 1 to 86400; 3600 when absent.
    #[serde(default = "default_timeout")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_s: u32,
    /// Homogeneous tasks of one execution (a fan-out), 1 to 10000; 1 when
    /// absent. Task `i` runs the method with the same parameters and
    /// writes its outputs under `tasks/{i}/`.
    #[serde(default = "default_tasks")]
    #[schema(minimum = 1, maximum = 10000)]
    pub tasks: u32,
}

fn default_tasks() -> u32 {
    1
}

fn default_class() -> ResourceClass {
    ResourceClass::S
}

fn default_timeout() -> u32 {
    DEFAULT_TIMEOUT_S
}

/// A spec that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("timeout_s {0} is out of range: use 1 to 86400 seconds")]
    TimeoutOutOfRange(u32),
    #[error("tasks {0} is out of range: use 1 to 10000 tasks")]
    TasksOutOfRange(u32),
}

impl RunSpecInput {
    /// Checks what needs no registry: the timeout range.
    pub fn check(&self) -> Result<(), SpecError> {
        if !TIMEOUT_RANGE_S.contains(&self.timeout_s) {
            return Err(SpecError::TimeoutOutOfRange(self.timeout_s));
        }
        if !TASKS_RANGE.contains(&self.tasks) {
            return Err(SpecError::TasksOutOfRange(self.tasks));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_unknown_fields() {
        let ok: RunSpecInput =
            serde_json::from_str(r#"{"method":"describe","dataset":"ds_01arz3ndektsv4rrffq69g5fav"}"#)
                .expect("valid spec");
        assert_eq!((ok.class, ok.timeout_s), (ResourceClass::S, DEFAULT_TIMEOUT_S));
        let unknown = serde_json::from_str::<RunSpecInput>(
            r#"{"method":"describe","dataset":"ds_01arz3ndektsv4rrffq69g5fav","clas":"M"}"#,
        );
        assert!(unknown.is_err());
    }

    #[test]
    fn timeout_range() {
        let mut s: RunSpecInput =
            serde_json::from_str(r#"{"method":"m","dataset":"ds_01arz3ndektsv4rrffq69g5fav","timeout_s":0}"#)
                .expect("parses");
        assert_eq!(s.check(), Err(SpecError::TimeoutOutOfRange(0)));
        s.timeout_s = 86_400;
        assert!(s.check().is_ok());
        s.tasks = 0;
        assert_eq!(s.check(), Err(SpecError::TasksOutOfRange(0)));
        s.tasks = 10_001;
        assert_eq!(s.check(), Err(SpecError::TasksOutOfRange(10_001)));
    }
}
