//! The run document. Every field is private: what was asked is read through
//! getters, and what changes (state, history, attempt, class, retries, the
//! reservation, the charge) changes only through the commands of
//! [`crate::commands`], so the state machine is held by the compiler, not
//! by a convention.

use std::collections::BTreeMap;

use mapi_cost::Charge;
use mapi_domain::{
    AttemptNo, DatasetId, ProjectId, Reason, ResourceClass, RunError, RunId, RunState, TenantId, Timestamp,
    Transition, TransitionError, UserId,
};
use mapi_quota::counters::{Bumps, Reservation};
use mapi_schema::Doc;
use serde::{Deserialize, Serialize};

/// What a new run is asked to do: everything [`crate::commands::admit`]
/// needs besides the clock and the reservation.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRun {
    pub id: RunId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub method: String,
    pub params: BTreeMap<String, serde_json::Value>,
    pub dataset: DatasetId,
    pub class: ResourceClass,
    pub timeout_s: u32,
    pub task_count: u32,
    pub created_by: UserId,
    /// The estimate shown at submit: one attempt of the class for the whole timeout.
    pub estimate: Charge,
    /// The token the run is submitted with (public id), if any.
    pub token: Option<String>,
    /// Its name, note and tags (a retry keeps those of the run it retries).
    pub labels: mapi_api::labels::RunLabels,
    /// The ended run this one was asked as a retry of.
    pub retry_of: Option<RunId>,
    /// The tenant's data residency when the run was asked (a later change
    /// applies to new runs only).
    pub residency: mapi_domain::Residency,
    /// The plugin version a run of a plugin method runs.
    pub plugin: Option<mapi_domain::PluginCode>,
}

/// A run: what was asked, where it is, and how it got there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunDoc {
    id: RunId,
    tenant: TenantId,
    project: ProjectId,
    method: String,
    params: BTreeMap<String, serde_json::Value>,
    dataset: DatasetId,
    /// The class of the current attempt (raised after an out-of-memory retry).
    class: ResourceClass,
    /// The class the caller asked for.
    requested_class: ResourceClass,
    timeout_s: u32,
    task_count: u32,
    state: RunState,
    /// The current attempt (1-based).
    attempt: AttemptNo,
    created_at: Timestamp,
    updated_at: Timestamp,
    created_by: UserId,
    history: Vec<Transition>,
    error: Option<RunError>,
    oom_retried: bool,
    infra_retries: u32,
    cancel_requested: bool,
    estimate: Charge,
    /// Sum of the ledger entries of this run, in micros.
    charged_micros: i64,
    /// No event arrived for a while although the execution runs (informational).
    #[serde(default)]
    stalled: bool,
    #[serde(default)]
    token: Option<String>,
    /// What the run holds until it ends (a concurrent slot, reserved vCPU-seconds).
    #[serde(default)]
    reservation: Option<Reservation>,
    /// Why a queued run is not placed yet, when something holds it
    /// (informational: cleared as it leaves `queued`).
    #[serde(default)]
    waiting: Option<Waiting>,
    /// What people call it (name, note, tags); nothing the run does reads it.
    #[serde(default)]
    labels: mapi_api::labels::RunLabels,
    /// The ended run this one retries, when it was asked as a retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_of: Option<RunId>,
    /// Where the run may execute: the tenant's residency when it was asked
    /// (runs stored before residency was recorded carry none and are
    /// placed as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    residency: Option<mapi_domain::Residency>,
    /// What the runs list finds it by: `name=value` of its scalar params
    /// ([`mapi_api::labels::param_key`]), indexed by element.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    param_keys: Vec<String>,
    /// When the run ended, as long as what its executions left may still exist: the run
    /// housekeeper's query finds it by this field, so it is removed once they are forgotten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    leftovers_since: Option<Timestamp>,
    /// When the run housekeeper had every execution of the run forgotten (their logs with them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    leftovers_forgotten_at: Option<Timestamp>,
    /// The plugin version a run of a plugin method runs (fixed at submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plugin: Option<mapi_domain::PluginCode>,
    /// For a fan-out parent's run that succeeded: what it folded from its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aggregate: Option<mapi_api::views::Aggregate>,
    /// How the current attempt runs other than asked (e.g. `GPU_UNAVAILABLE`), set at its placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<mapi_domain::RunWarning>,
}

/// What the runs list finds a run by: `name=value` of its scalar params.
fn param_keys(params: &BTreeMap<String, serde_json::Value>) -> Vec<String> {
    params
        .iter()
        .filter_map(|(name, value)| mapi_api::labels::param_key(name, value))
        .take(mapi_api::labels::MAX_PARAM_KEYS)
        .collect()
}

/// What holds a queued run back, and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// A sentence: what holds the run and what would let it go.
    pub reason: String,
    pub since: Timestamp,
}

impl Doc for RunDoc {
    const COLLECTION: &'static str = "runs";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

macro_rules! by_ref {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),+ $(,)?) => {
        $($(#[$doc])* pub fn $name(&self) -> &$ty { &self.$name })+
    };
}

macro_rules! by_value {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),+ $(,)?) => {
        $($(#[$doc])* pub fn $name(&self) -> $ty { self.$name })+
    };
}

impl RunDoc {
    /// A new run in `queued`, its history opened by the `submitted` entry.
    pub(crate) fn new(new: NewRun, reservation: Option<Reservation>, at: Timestamp) -> RunDoc {
        let first = Transition {
            from: None,
            to: RunState::Queued,
            at,
            reason: Reason::Submitted,
            attempt: AttemptNo::FIRST,
        };
        let param_keys = param_keys(&new.params);
        RunDoc {
            param_keys,
            id: new.id,
            tenant: new.tenant,
            project: new.project,
            method: new.method,
            params: new.params,
            dataset: new.dataset,
            class: new.class,
            requested_class: new.class,
            timeout_s: new.timeout_s,
            task_count: new.task_count,
            state: RunState::Queued,
            attempt: AttemptNo::FIRST,
            created_at: at,
            updated_at: at,
            created_by: new.created_by,
            history: vec![first],
            error: None,
            oom_retried: false,
            infra_retries: 0,
            cancel_requested: false,
            estimate: new.estimate,
            charged_micros: 0,
            stalled: false,
            token: new.token,
            reservation,
            waiting: None,
            labels: new.labels,
            retry_of: new.retry_of,
            residency: Some(new.residency),
            leftovers_since: None,
            leftovers_forgotten_at: None,
            plugin: new.plugin,
            aggregate: None,
            warnings: Vec::new(),
        }
    }

    by_ref!(
        id: RunId,
        tenant: TenantId,
        project: ProjectId,
        method: str,
        params: BTreeMap<String, serde_json::Value>,
        dataset: DatasetId,
        created_by: UserId,
        /// The transitions so far, oldest first; the first is `submitted`.
        history: [Transition],
        estimate: Charge,
        reservation: Option<Reservation>,
    );

    by_value!(
        /// The class of the current attempt (raised after an out-of-memory retry).
        class: ResourceClass,
        /// The class the caller asked for.
        requested_class: ResourceClass,
        timeout_s: u32,
        task_count: u32,
        state: RunState,
        /// The current attempt (1-based).
        attempt: AttemptNo,
        created_at: Timestamp,
        updated_at: Timestamp,
        oom_retried: bool,
        infra_retries: u32,
        cancel_requested: bool,
        /// Sum of the ledger entries of this run, in micros.
        charged_micros: i64,
        /// No event arrived for a while although the execution runs (informational).
        stalled: bool,
    );

    /// The error a failed run carries.
    pub fn error(&self) -> Option<&RunError> {
        self.error.as_ref()
    }

    /// Why the queued run waits, if something holds it.
    pub fn waiting(&self) -> Option<&Waiting> {
        self.waiting.as_ref()
    }

    /// The ended run this one retries, if it was asked as a retry.
    pub fn retry_of(&self) -> Option<&RunId> {
        self.retry_of.as_ref()
    }

    /// When the run ended, while what its executions left may still exist.
    pub fn leftovers_since(&self) -> Option<Timestamp> {
        self.leftovers_since
    }

    /// When what the run's executions left was forgotten (their logs are gone).
    pub fn leftovers_forgotten_at(&self) -> Option<Timestamp> {
        self.leftovers_forgotten_at
    }

    pub(crate) fn forget_leftovers(&mut self, at: Timestamp) {
        self.leftovers_since = None;
        self.leftovers_forgotten_at = Some(at);
    }

    /// The plugin version the run runs, for a run of a plugin method.
    pub fn plugin(&self) -> Option<&mapi_domain::PluginCode> {
        self.plugin.as_ref()
    }

    /// What a fan-out parent's run folded from its children, once it succeeded.
    pub fn aggregate(&self) -> Option<&mapi_api::views::Aggregate> {
        self.aggregate.as_ref()
    }

    /// How the current attempt runs other than asked.
    pub fn warnings(&self) -> &[mapi_domain::RunWarning] {
        &self.warnings
    }

    /// Records where attempt `attempt` runs: its warnings replace the last
    /// attempt's, and a parameter that records the backend used (`dl.backend`)
    /// is rewritten to it.
    pub(crate) fn placed(
        &mut self,
        placed: &mapi_methods::registry::dl::Placed,
        attempt: mapi_domain::AttemptNo,
    ) {
        use mapi_methods::registry::dl::PlacementWarning;
        self.warnings = placed
            .warning
            .map(|w| match w {
                PlacementWarning::GpuUnavailable => mapi_domain::RunWarning {
                    code: mapi_domain::WarningCode::GpuUnavailable,
                    message: format!(
                        "class {} has a GPU, and this executor has none to give (no GPU on its machine, or a \
                         sandbox without devices): attempt {attempt} runs on the CPU with the class's {} vCPUs \
                         and {} GiB, and is charged no accelerator time",
                        self.class,
                        self.class.vcpu(),
                        self.class.memory_gib()
                    ),
                    attempt,
                },
            })
            .into_iter()
            .collect();
        if let Some((name, value)) = &placed.param {
            self.params.insert((*name).to_owned(), value.clone());
            self.param_keys = param_keys(&self.params);
        }
    }

    pub(crate) fn set_aggregate(&mut self, aggregate: mapi_api::views::Aggregate) {
        self.aggregate = Some(aggregate);
    }

    /// The data residency the run was asked under, where one is recorded.
    pub fn residency(&self) -> Option<&mapi_domain::Residency> {
        self.residency.as_ref()
    }

    pub fn labels(&self) -> &mapi_api::labels::RunLabels {
        &self.labels
    }

    pub(crate) fn set_labels(&mut self, labels: mapi_api::labels::RunLabels) {
        self.labels = labels;
    }

    pub(crate) fn set_waiting(&mut self, waiting: Option<Waiting>) {
        self.waiting = waiting;
    }

    /// The token the run was submitted with (public id), if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Whether `attempt` is the run's current one and the run has not ended.
    pub fn is_current(&self, attempt: AttemptNo) -> bool {
        self.attempt == attempt && !self.state.is_terminal()
    }

    /// Moves the run to `to`, if the state machine allows it, and records
    /// the transition in its history; a refused move changes nothing.
    pub(crate) fn transition(
        &mut self,
        to: RunState,
        reason: Reason,
        at: Timestamp,
    ) -> Result<Transition, TransitionError> {
        self.state.check(to, reason)?;
        let t = Transition { from: Some(self.state), to, at, reason, attempt: self.attempt };
        self.history.push(t.clone());
        self.state = to;
        self.updated_at = at;
        if to.is_terminal() {
            self.leftovers_since = Some(at);
        }
        if to != RunState::Queued {
            self.waiting = None;
        }
        Ok(t)
    }

    /// Takes the reservation of a run that is ending: the increments that
    /// give it back (none when it held nothing).
    pub(crate) fn end_reservation(&mut self) -> Bumps {
        self.reservation.take().map(|r| Bumps::release(&r)).unwrap_or_default()
    }

    pub(crate) fn set_error(&mut self, error: Option<RunError>) {
        self.error = error;
    }

    pub(crate) fn request_cancel(&mut self) {
        self.cancel_requested = true;
    }

    pub(crate) fn add_charge(&mut self, micros: i64) {
        self.charged_micros += micros;
    }

    pub(crate) fn set_stalled(&mut self, stalled: bool) {
        self.stalled = stalled;
    }

    /// Opens the next attempt on `class`, counting the retry it spends.
    pub(crate) fn next_attempt(&mut self, class: ResourceClass, infra: bool) {
        self.attempt = self.attempt.next();
        self.class = class;
        if infra {
            self.infra_retries += 1;
        } else {
            self.oom_retried = true;
        }
    }

    pub(crate) fn reservation_mut(&mut self) -> Option<&mut Reservation> {
        self.reservation.as_mut()
    }
}
