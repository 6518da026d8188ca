//! A workflow run's life: every change is a method of [`WorkflowRun`],
//! a pure function of what the caller observed and the time; the caller
//! reads the documents, calls it, and stores the result in one commit.
//!
//! A node is `pending` until every node it needs has succeeded; then the
//! driver starts it ([`WorkflowRun::start`], with the ids of the runs or
//! the validation it is about to make, stored before anything is made so
//! a driver that dies midway makes the same ones again, never new ones).
//! What the driver then observes (a child run ended, a validation
//! decided, a promotion answered) is applied by [`WorkflowRun::observe`].
//! A failed node skips the nodes that need it, and the nodes that need
//! nothing of it go on; the run ends when no node can move.

use std::collections::BTreeMap;

use mapi_domain::{RunId, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::definition::{Definition, Goal, Kind};

/// Where a workflow run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = WorkflowRunState)]
pub enum RunState {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }

    pub fn is_final(self) -> bool {
        self != RunState::Running
    }
}

/// Where a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = WorkflowNodeState)]
pub enum NodeState {
    /// Waiting for the nodes it needs.
    Pending,
    Running,
    Succeeded,
    Failed,
    /// Never started: a node it needs failed, was skipped or cancelled.
    Skipped,
    Cancelled,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Pending => "pending",
            NodeState::Running => "running",
            NodeState::Succeeded => "succeeded",
            NodeState::Failed => "failed",
            NodeState::Skipped => "skipped",
            NodeState::Cancelled => "cancelled",
        }
    }

    fn ended(self) -> bool {
        !matches!(self, NodeState::Pending | NodeState::Running)
    }
}

/// A run a node made: its id (chosen before it is made), the grid's
/// combination it runs, and what it ended with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Child {
    pub run: RunId,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub combination: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
}

/// How a child run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    /// `succeeded`, `failed`, `cancelled` or `refused` (never admitted).
    pub state: String,
    /// The node's metric (a grid's), as the run reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<f64>,
    /// The model version the run made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    /// Why, when it did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One node's part of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRun {
    pub state: NodeState,
    /// How many times it was started (a resume starts a failed node again).
    #[serde(default)]
    pub tries: u32,
    /// `run` and `search.grid`: the runs of its latest try.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Child>,
    /// Runs of earlier tries, kept for the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<RunId>,
    /// `validate`: the validation it submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
    /// What it yields: the model version it made, picked, validated or deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    /// `search.grid`: the best child's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<RunId>,
    /// Why it failed, was skipped or cancelled; or a note on its success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
}

impl NodeRun {
    fn pending() -> NodeRun {
        NodeRun {
            state: NodeState::Pending,
            tries: 0,
            children: Vec::new(),
            earlier: Vec::new(),
            validation: None,
            model_version: None,
            best: None,
            detail: None,
            started_at: None,
            ended_at: None,
        }
    }

    fn end(&mut self, state: NodeState, detail: Option<String>, now: Timestamp) {
        self.state = state;
        self.detail = detail;
        self.ended_at = Some(now);
    }
}

/// What a node is given when it starts: the ids of what it will make.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// `run` (one) and `search.grid` (one per combination, in order).
    Runs(Vec<RunId>),
    /// `validate`: the id of the validation it submits.
    Validation(String),
    /// `deploy`: nothing to name; the promotion is answered at once.
    Deploy,
}

/// What the driver saw of a running node.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// A child run ended.
    Child { run: RunId, ended: Ended },
    /// The node's validation was decided: approved (`Ok`) or not (`Err`,
    /// with its state and reasons).
    Validation(Result<(), String>),
    /// The node's promotion was accepted (`Ok`) or refused (`Err`, the
    /// refusal's words).
    Deploy(Result<(), String>),
}

/// A change that does not apply to the run as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the workflow run has ended ({0}); resume a failed or cancelled one instead")]
    Ended(&'static str),
    #[error("the workflow run is still running: cancel it, or wait for it to end, before resuming it")]
    Running,
    #[error("the workflow run succeeded: there is nothing to resume")]
    Succeeded,
    #[error("node `{0}` is not in this workflow run")]
    NoNode(String),
    #[error("node `{0}` cannot start now (it is {1})")]
    NotReady(String, &'static str),
    #[error("node `{node}` of kind {kind} cannot start with {given}")]
    WrongStart { node: String, kind: &'static str, given: &'static str },
}

/// A workflow run: the definition it runs (a copy of one version), each
/// node's part, and its state. Its fields change only through its methods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRun {
    definition: Definition,
    state: RunState,
    nodes: BTreeMap<String, NodeRun>,
    /// 1, and one more for each resume.
    attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended_at: Option<Timestamp>,
}

impl WorkflowRun {
    /// A new run of `definition`: every node pending.
    pub fn new(definition: Definition) -> WorkflowRun {
        let nodes = definition.nodes.iter().map(|n| (n.id.clone(), NodeRun::pending())).collect();
        WorkflowRun { definition, state: RunState::Running, nodes, attempt: 1, ended_at: None }
    }

    pub fn definition(&self) -> &Definition {
        &self.definition
    }

    pub fn state(&self) -> RunState {
        self.state
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn ended_at(&self) -> Option<Timestamp> {
        self.ended_at
    }

    /// Each node's part, in the definition's order.
    pub fn nodes(&self) -> impl Iterator<Item = (&crate::Node, &NodeRun)> {
        self.definition.nodes.iter().filter_map(|n| self.nodes.get(&n.id).map(|r| (n, r)))
    }

    pub fn node(&self, id: &str) -> Option<&NodeRun> {
        self.nodes.get(id)
    }

    /// Whether a run, grid or deploy node is running: work the tick must
    /// follow (a node waiting on people is followed when they decide).
    pub fn driving(&self) -> bool {
        self.nodes().any(|(n, r)| r.state == NodeState::Running && n.kind != Kind::Validate)
    }

    /// The nodes that may start now: pending, with every node they need
    /// succeeded. Empty once the run has ended.
    pub fn ready(&self) -> Vec<String> {
        if self.state.is_final() {
            return Vec::new();
        }
        self.nodes()
            .filter(|(n, r)| {
                r.state == NodeState::Pending
                    && n.needs
                        .iter()
                        .all(|d| self.nodes.get(d).is_some_and(|d| d.state == NodeState::Succeeded))
            })
            .map(|(n, _)| n.id.clone())
            .collect()
    }

    /// The model version node `id`'s upstream yields (for `validate` and
    /// `deploy`).
    pub fn input_version(&self, id: &str) -> Option<&str> {
        let node = self.definition.node(id)?;
        let source = self.definition.model_source(node)?;
        self.nodes.get(&source.id)?.model_version.as_deref()
    }

    /// Starts node `id` with the ids of what it makes.
    pub fn start(&mut self, id: &str, start: Start, now: Timestamp) -> Result<(), Refused> {
        self.open()?;
        if !self.ready().iter().any(|r| r == id) {
            let state = self.nodes.get(id).ok_or_else(|| Refused::NoNode(id.to_owned()))?.state;
            return Err(Refused::NotReady(id.to_owned(), state.as_str()));
        }
        let node = self.definition.node(id).ok_or_else(|| Refused::NoNode(id.to_owned()))?;
        let specs = node.combinations();
        let input = self.input_version(id).map(str::to_owned);
        let kind = node.kind;
        let wrong = |given| Refused::WrongStart { node: id.to_owned(), kind: kind.as_str(), given };
        let run = self.nodes.get_mut(id).ok_or_else(|| Refused::NoNode(id.to_owned()))?;
        match (kind, start) {
            (Kind::Run | Kind::Grid, Start::Runs(ids)) => {
                let combos = specs.unwrap_or_default();
                if ids.len() != combos.len() {
                    return Err(wrong("another number of runs than its combinations"));
                }
                run.children = ids
                    .into_iter()
                    .zip(combos)
                    .map(|(run, combination)| Child { run, combination, ended: None })
                    .collect();
            }
            (Kind::Validate, Start::Validation(v)) => {
                run.validation = Some(v);
                run.model_version = input;
            }
            (Kind::Deploy, Start::Deploy) => run.model_version = input,
            (_, Start::Runs(_)) => return Err(wrong("runs")),
            (_, Start::Validation(_)) => return Err(wrong("a validation")),
            (_, Start::Deploy) => return Err(wrong("a promotion")),
        }
        run.state = NodeState::Running;
        run.tries += 1;
        run.started_at = Some(now);
        run.ended_at = None;
        run.detail = None;
        Ok(())
    }

    /// Applies what the driver saw of running node `id`, then settles the
    /// run. Seeing what was already applied (a redelivered observation)
    /// changes nothing.
    pub fn observe(&mut self, id: &str, seen: Seen, now: Timestamp) -> Result<(), Refused> {
        self.open()?;
        let node = self.definition.node(id).ok_or_else(|| Refused::NoNode(id.to_owned()))?.clone();
        let run = self.nodes.get_mut(id).ok_or_else(|| Refused::NoNode(id.to_owned()))?;
        if run.state != NodeState::Running {
            return Ok(());
        }
        match seen {
            Seen::Child { run: child, ended } => {
                if let Some(c) = run.children.iter_mut().find(|c| c.run == child && c.ended.is_none()) {
                    c.ended = Some(ended);
                }
                if run.children.iter().all(|c| c.ended.is_some()) {
                    conclude(run, node.kind, node.metric.as_deref(), node.goal.unwrap_or_default(), now);
                }
            }
            Seen::Validation(Ok(())) | Seen::Deploy(Ok(())) => run.end(NodeState::Succeeded, None, now),
            Seen::Validation(Err(why)) | Seen::Deploy(Err(why)) => run.end(NodeState::Failed, Some(why), now),
        }
        self.settle(now);
        Ok(())
    }

    /// Skips the pending nodes that can never start, and ends the run when
    /// no node is pending or running: succeeded when every node succeeded.
    pub fn settle(&mut self, now: Timestamp) {
        if self.state.is_final() {
            return;
        }
        loop {
            let blocked: Vec<(String, String)> = self
                .nodes()
                .filter(|(_, r)| r.state == NodeState::Pending)
                .filter_map(|(n, _)| {
                    n.needs
                        .iter()
                        .find(|d| {
                            self.nodes
                                .get(*d)
                                .is_some_and(|d| d.state.ended() && d.state != NodeState::Succeeded)
                        })
                        .map(|d| (n.id.clone(), d.clone()))
                })
                .collect();
            if blocked.is_empty() {
                break;
            }
            for (id, need) in blocked {
                let why = format!("`{need}` did not succeed");
                if let Some(r) = self.nodes.get_mut(&id) {
                    r.end(NodeState::Skipped, Some(why), now);
                }
            }
        }
        if self.nodes.values().all(|r| r.state.ended()) {
            let ok = self.nodes.values().all(|r| r.state == NodeState::Succeeded);
            self.state = if ok { RunState::Succeeded } else { RunState::Failed };
            self.ended_at = Some(now);
        }
    }

    /// Cancels the run: every node not ended is cancelled. Answers the
    /// child runs to cancel (those not known to have ended).
    pub fn cancel(&mut self, now: Timestamp) -> Result<Vec<RunId>, Refused> {
        self.open()?;
        let mut active = Vec::new();
        for r in self.nodes.values_mut().filter(|r| !r.state.ended()) {
            active.extend(r.children.iter().filter(|c| c.ended.is_none()).map(|c| c.run.clone()));
            r.end(NodeState::Cancelled, Some("the workflow run was cancelled".to_owned()), now);
        }
        self.state = RunState::Cancelled;
        self.ended_at = Some(now);
        Ok(active)
    }

    /// Resumes a failed or cancelled run: its failed, skipped and cancelled
    /// nodes are pending again (their runs kept as earlier tries), its
    /// succeeded nodes keep what they made and are not run again.
    pub fn resume(&mut self) -> Result<(), Refused> {
        match self.state {
            RunState::Running => return Err(Refused::Running),
            RunState::Succeeded => return Err(Refused::Succeeded),
            RunState::Failed | RunState::Cancelled => {}
        }
        for r in self.nodes.values_mut().filter(|r| r.state != NodeState::Succeeded) {
            let earlier: Vec<RunId> = r.children.drain(..).map(|c| c.run).collect();
            r.earlier.extend(earlier);
            r.state = NodeState::Pending;
            r.validation = None;
            r.model_version = None;
            r.best = None;
            r.detail = None;
            r.started_at = None;
            r.ended_at = None;
        }
        self.state = RunState::Running;
        self.attempt += 1;
        self.ended_at = None;
        Ok(())
    }

    fn open(&self) -> Result<(), Refused> {
        if self.state.is_final() { Err(Refused::Ended(self.state.as_str())) } else { Ok(()) }
    }
}

/// Ends a run or grid node whose children all ended: a run node as its
/// run did; a grid node with its best child that succeeded with the
/// metric (ties: the first in the grid's order), failed when none did.
fn conclude(run: &mut NodeRun, kind: Kind, metric: Option<&str>, goal: Goal, now: Timestamp) {
    let succeeded = |c: &&Child| c.ended.as_ref().is_some_and(|e| e.state == "succeeded");
    if kind == Kind::Run {
        let child = run.children.first().cloned();
        match child.as_ref().and_then(|c| c.ended.as_ref()) {
            Some(e) if e.state == "succeeded" => {
                run.model_version = e.model_version.clone();
                run.end(NodeState::Succeeded, None, now);
            }
            e => {
                let why = e.map_or_else(String::new, |e| {
                    format!("its run {}: {}", e.state, e.detail.clone().unwrap_or_default())
                });
                run.end(NodeState::Failed, Some(why.trim_end_matches(": ").to_owned()), now);
            }
        }
        return;
    }
    let metric = metric.unwrap_or_default();
    let better = |a: f64, b: f64| match goal {
        Goal::Maximize => a > b,
        Goal::Minimize => a < b,
    };
    let mut best: Option<(&Child, f64)> = None;
    for c in run.children.iter().filter(succeeded) {
        let Some(v) = c.ended.as_ref().and_then(|e| e.metric).filter(|v| v.is_finite()) else { continue };
        if best.is_none_or(|(_, b)| better(v, b)) {
            best = Some((c, v));
        }
    }
    let done = run.children.iter().filter(succeeded).count();
    let total = run.children.len();
    match best.map(|(c, v)| (c.run.clone(), c.ended.as_ref().and_then(|e| e.model_version.clone()), v)) {
        Some((id, version, value)) => {
            let note = format!("best of {done}/{total} succeeded runs: {id} with {metric} = {value}");
            run.best = Some(id);
            run.model_version = version;
            run.end(NodeState::Succeeded, Some(note), now);
        }
        None => {
            let why = if done == 0 {
                format!("none of its {total} runs succeeded")
            } else {
                format!("none of its {done} succeeded runs reported `{metric}`")
            };
            run.end(NodeState::Failed, Some(why), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::Definition;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_secs(1_800_000_000 + s)
    }

    fn def(text: &str) -> Definition {
        Definition::decode(&Definition::parse(text).expect("yaml")).expect("definition")
    }

    fn rid(n: u8) -> RunId {
        RunId::generate(t(0), [n; 10])
    }

    fn ended(state: &str, metric: Option<f64>, mv: Option<&str>) -> Ended {
        Ended { state: state.into(), metric, model_version: mv.map(Into::into), detail: None }
    }

    const PIPELINE: &str = "
nodes:
  - {id: sweep, kind: search.grid, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, metric: r2, goal: maximize,
     grid: {intercept: [true, false]}}
  - {id: stats, kind: run, method: describe, dataset: ds_01arz3ndektsv4rrffq69g5fav}
  - {id: check, kind: validate, needs: [sweep]}
  - {id: ship, kind: deploy, needs: [check], endpoint: e}
";

    #[test]
    fn a_pipeline_runs_in_order_and_the_best_child_is_its_output() {
        let mut w = WorkflowRun::new(def(PIPELINE));
        assert_eq!(w.ready(), ["sweep", "stats"]);
        w.start("sweep", Start::Runs(vec![rid(1), rid(2)]), t(1)).expect("sweep");
        w.start("stats", Start::Runs(vec![rid(3)]), t(1)).expect("stats");
        assert!(w.driving());
        assert_eq!(
            w.start("check", Start::Validation("v".into()), t(1)),
            Err(Refused::NotReady("check".into(), "pending"))
        );
        w.observe(
            "sweep",
            Seen::Child { run: rid(1), ended: ended("succeeded", Some(0.9), Some("mv_1")) },
            t(2),
        )
        .expect("1");
        assert_eq!(w.node("sweep").map(|n| n.state), Some(NodeState::Running));
        w.observe(
            "sweep",
            Seen::Child { run: rid(2), ended: ended("succeeded", Some(0.95), Some("mv_2")) },
            t(3),
        )
        .expect("2");
        let sweep = w.node("sweep").expect("sweep");
        assert_eq!(
            (sweep.state, sweep.best.clone(), sweep.model_version.as_deref()),
            (NodeState::Succeeded, Some(rid(2)), Some("mv_2"))
        );
        assert_eq!(w.ready(), ["check"]);
        assert_eq!(w.input_version("check"), Some("mv_2"));
        w.start("check", Start::Validation("val_1".into()), t(4)).expect("check");
        w.observe("stats", Seen::Child { run: rid(3), ended: ended("succeeded", None, None) }, t(4))
            .expect("stats");
        assert!(!w.driving(), "only a validation is open: people, not the tick, move it");
        w.observe("check", Seen::Validation(Ok(())), t(5)).expect("approved");
        assert_eq!(w.input_version("ship"), Some("mv_2"));
        w.start("ship", Start::Deploy, t(6)).expect("ship");
        w.observe("ship", Seen::Deploy(Ok(())), t(6)).expect("deployed");
        assert_eq!((w.state(), w.ended_at()), (RunState::Succeeded, Some(t(6))));
        assert!(w.ready().is_empty());
    }

    #[test]
    fn a_failed_node_skips_its_dependants_and_independent_branches_go_on() {
        let mut w = WorkflowRun::new(def(PIPELINE));
        w.start("sweep", Start::Runs(vec![rid(1), rid(2)]), t(1)).expect("sweep");
        w.start("stats", Start::Runs(vec![rid(3)]), t(1)).expect("stats");
        w.observe("sweep", Seen::Child { run: rid(1), ended: ended("failed", None, None) }, t(2)).expect("1");
        w.observe("sweep", Seen::Child { run: rid(2), ended: ended("cancelled", None, None) }, t(2))
            .expect("2");
        let states: Vec<_> = w.nodes().map(|(n, r)| (n.id.as_str(), r.state)).collect();
        assert_eq!(
            states,
            [
                ("sweep", NodeState::Failed),
                ("stats", NodeState::Running),
                ("check", NodeState::Skipped),
                ("ship", NodeState::Skipped)
            ]
        );
        assert_eq!(w.node("ship").and_then(|n| n.detail.as_deref()), Some("`check` did not succeed"));
        assert_eq!(w.state(), RunState::Running, "stats still runs");
        w.observe("stats", Seen::Child { run: rid(3), ended: ended("succeeded", None, None) }, t(3))
            .expect("stats");
        assert_eq!(w.state(), RunState::Failed);

        // Resumed: only what did not succeed runs again.
        w.resume().expect("resume");
        assert_eq!((w.state(), w.attempt()), (RunState::Running, 2));
        assert_eq!(w.ready(), ["sweep"]);
        assert_eq!(w.node("stats").map(|n| (n.state, n.tries)), Some((NodeState::Succeeded, 1)));
        assert_eq!(w.node("sweep").map(|n| n.earlier.clone()), Some(vec![rid(1), rid(2)]));
        w.start("sweep", Start::Runs(vec![rid(4), rid(5)]), t(4)).expect("again");
        assert_eq!(w.node("sweep").map(|n| n.tries), Some(2));
        assert_eq!(w.resume(), Err(Refused::Running));
    }

    #[test]
    fn a_grid_without_the_metric_fails_and_redelivered_observations_change_nothing() {
        let mut w = WorkflowRun::new(def(PIPELINE));
        w.start("sweep", Start::Runs(vec![rid(1), rid(2)]), t(1)).expect("sweep");
        let seen = Seen::Child { run: rid(1), ended: ended("succeeded", None, Some("mv_1")) };
        w.observe("sweep", seen.clone(), t(2)).expect("1");
        let before = w.clone();
        w.observe("sweep", seen, t(3)).expect("again");
        assert_eq!(w, before);
        w.observe(
            "sweep",
            Seen::Child { run: rid(2), ended: ended("succeeded", Some(f64::NAN), Some("mv_2")) },
            t(3),
        )
        .expect("2");
        let sweep = w.node("sweep").expect("sweep");
        assert_eq!(sweep.state, NodeState::Failed);
        assert_eq!(sweep.detail.as_deref(), Some("none of its 2 succeeded runs reported `r2`"));
    }

    #[test]
    fn cancel_ends_everything_and_names_the_runs_to_stop() {
        let mut w = WorkflowRun::new(def(PIPELINE));
        w.start("sweep", Start::Runs(vec![rid(1), rid(2)]), t(1)).expect("sweep");
        w.observe("sweep", Seen::Child { run: rid(1), ended: ended("succeeded", Some(1.0), None) }, t(2))
            .expect("1");
        assert_eq!(w.cancel(t(3)), Ok(vec![rid(2)]));
        assert_eq!(w.state(), RunState::Cancelled);
        assert!(w.nodes().all(|(_, r)| r.state == NodeState::Cancelled));
        assert_eq!(w.cancel(t(4)), Err(Refused::Ended("cancelled")));
        assert_eq!(w.observe("sweep", Seen::Deploy(Ok(())), t(4)), Err(Refused::Ended("cancelled")));
        assert_eq!(w.start("x", Start::Deploy, t(4)), Err(Refused::Ended("cancelled")));
        w.resume().expect("a cancelled run resumes");
        assert_eq!(w.ready(), ["sweep", "stats"]);
    }

    #[test]
    fn a_node_starts_only_with_what_its_kind_makes() {
        let mut w = WorkflowRun::new(def(PIPELINE));
        assert!(matches!(w.start("sweep", Start::Runs(vec![rid(1)]), t(1)), Err(Refused::WrongStart { .. })));
        assert!(matches!(w.start("stats", Start::Deploy, t(1)), Err(Refused::WrongStart { .. })));
        assert_eq!(w.start("nope", Start::Deploy, t(1)), Err(Refused::NoNode("nope".into())));
        assert_eq!(w.node("sweep").map(|n| n.state), Some(NodeState::Pending));
    }
}
