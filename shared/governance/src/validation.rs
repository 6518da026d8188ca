//! A validation: one submission of a model version against the policy in
//! force. Its automatic checks run at submission; then reviewers decide.
//!
//! Rules:
//! - **Checks first.** A failed automatic check fails the validation at
//!   once; nobody is asked to approve a version that cannot pass.
//! - **Who decides.** Only a person (never an API token), with the reviewer
//!   capability, who did not submit it; each person once; every decision
//!   carries a reason.
//! - **Outcome.** One rejection rejects it. Approved once the policy's
//!   count of approvals is reached (at once when it asks for none); it
//!   then admits promotions until it expires.
//! - **Policy changes.** A validation admits a promotion only if the
//!   policy it was checked against asks at least what the policy in force
//!   asks now; a stricter policy needs a new validation.

use mapi_domain::{Timestamp, UserId};
use serde::{Deserialize, Serialize};

use crate::policy::{CheckOutcome, Policy};

/// Where a validation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Its checks passed; it waits for reviewers.
    Pending,
    Approved,
    Rejected,
    /// An automatic check failed.
    Failed,
    /// Withdrawn by a runner before it was decided.
    Cancelled,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Rejected => "rejected",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
        }
    }

    /// No decision changes it any more.
    pub fn is_final(self) -> bool {
        !matches!(self, State::Pending)
    }
}

/// One reviewer's decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Decision {
    pub by: UserId,
    pub approve: bool,
    pub reason: String,
    #[schema(value_type = String)]
    pub at: Timestamp,
}

/// Who is deciding, as the caller's credentials say.
#[derive(Clone, Copy, Debug)]
pub struct Decider<'a> {
    pub user: &'a UserId,
    /// Through an API token rather than a signed-in session.
    pub via_token: bool,
    /// Holds the reviewer capability where the version lives.
    pub reviewer: bool,
}

/// Why a decision is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a validation is decided by a signed-in person: API tokens cannot approve or reject")]
    Token,
    #[error("{0} submitted this validation: another reviewer must decide it")]
    SelfApproval(UserId),
    #[error("deciding a validation needs the reviewer capability in its project")]
    NotReviewer,
    #[error("{0} has decided this validation already")]
    AlreadyDecided(UserId),
    #[error("the validation is {}: only a pending one is decided or cancelled", .0.as_str())]
    NotPending(State),
    #[error("say why: a decision needs a reason (1 to 1000 characters)")]
    NoReason,
}

/// Why a validation does not admit a promotion now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error("its validation is {}", .0.as_str())]
    NotApproved(State),
    #[error("its validation expired")]
    Expired,
    #[error("the policy now asks {}: submit it for validation again", .0.join(", "))]
    StricterPolicy(Vec<String>),
}

/// A model version's submission against a policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Validation {
    /// The policy in force when it was submitted.
    pub policy: Policy,
    pub submitted_by: UserId,
    #[schema(value_type = String)]
    pub submitted_at: Timestamp,
    pub checks: Vec<CheckOutcome>,
    pub decisions: Vec<Decision>,
    pub state: State,
    #[schema(value_type = Option<String>)]
    pub decided_at: Option<Timestamp>,
    /// When an approval stops admitting promotions.
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Timestamp>,
}

const DAY_S: i64 = 86_400;

impl Validation {
    /// Submits against `policy`, whose automatic checks gave `checks`.
    pub fn submit(policy: Policy, by: UserId, checks: Vec<CheckOutcome>, now: Timestamp) -> Validation {
        let mut v = Validation {
            policy,
            submitted_by: by,
            submitted_at: now,
            checks,
            decisions: Vec::new(),
            state: State::Pending,
            decided_at: None,
            expires_at: None,
        };
        if v.checks.iter().any(|c| !c.passed) {
            v.settle(State::Failed, now);
        } else if v.policy.approvals == 0 {
            v.settle(State::Approved, now);
        }
        v
    }

    fn settle(&mut self, state: State, now: Timestamp) {
        self.state = state;
        self.decided_at = Some(now);
        if state == State::Approved {
            self.expires_at = self
                .policy
                .expires_after_days
                .map(|d| Timestamp::from_secs(now.as_secs() + i64::from(d) * DAY_S));
        }
    }

    /// Records `who`'s decision (an approval or a rejection, with `reason`).
    pub fn decide(
        &self,
        who: Decider<'_>,
        approve: bool,
        reason: &str,
        now: Timestamp,
    ) -> Result<Validation, Refusal> {
        if who.via_token {
            return Err(Refusal::Token);
        }
        if self.state != State::Pending {
            return Err(Refusal::NotPending(self.state));
        }
        if who.user == &self.submitted_by {
            return Err(Refusal::SelfApproval(who.user.clone()));
        }
        if !who.reviewer {
            return Err(Refusal::NotReviewer);
        }
        if self.decisions.iter().any(|d| &d.by == who.user) {
            return Err(Refusal::AlreadyDecided(who.user.clone()));
        }
        let reason = reason.trim();
        if reason.is_empty() || reason.chars().count() > 1000 {
            return Err(Refusal::NoReason);
        }
        let mut next = self.clone();
        next.decisions.push(Decision { by: who.user.clone(), approve, reason: reason.to_owned(), at: now });
        if !approve {
            next.settle(State::Rejected, now);
        } else if next.approvals() >= next.policy.approvals {
            next.settle(State::Approved, now);
        }
        Ok(next)
    }

    /// Withdraws a pending validation.
    pub fn cancel(&self, now: Timestamp) -> Result<Validation, Refusal> {
        if self.state != State::Pending {
            return Err(Refusal::NotPending(self.state));
        }
        let mut next = self.clone();
        next.settle(State::Cancelled, now);
        Ok(next)
    }

    /// Approvals so far.
    pub fn approvals(&self) -> u32 {
        u32::try_from(self.decisions.iter().filter(|d| d.approve).count()).unwrap_or(u32::MAX)
    }

    /// Whether it lets its version be promoted at `now` under `required`
    /// (the policy in force now).
    pub fn admits(&self, required: &Policy, now: Timestamp) -> Result<(), Missing> {
        if self.state != State::Approved {
            return Err(Missing::NotApproved(self.state));
        }
        if self.expires_at.is_some_and(|e| now >= e) {
            return Err(Missing::Expired);
        }
        let lacks = self.policy.lacks(required);
        if !lacks.is_empty() {
            return Err(Missing::StricterPolicy(lacks));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(s: &str) -> UserId {
        UserId::parse(s).expect("user")
    }

    fn passed(check: &str) -> CheckOutcome {
        CheckOutcome { check: check.into(), passed: true, detail: "ok".into() }
    }

    fn policy(approvals: u32) -> Policy {
        Policy {
            thresholds: vec!["r_squared >= 0.9".parse().expect("threshold")],
            approvals,
            expires_after_days: Some(30),
            ..Policy::default()
        }
    }

    const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

    fn reviewer(u: &UserId) -> Decider<'_> {
        Decider { user: u, via_token: false, reviewer: true }
    }

    #[test]
    fn two_reviewers_approve_and_the_approval_expires() {
        let (runner, ana, bo) = (user("runner@acme.test"), user("ana@acme.test"), user("bo@acme.test"));
        let v = Validation::submit(policy(2), runner, vec![passed("r_squared >= 0.9")], T0);
        assert_eq!(v.state, State::Pending);
        assert_eq!(v.admits(&policy(2), T0), Err(Missing::NotApproved(State::Pending)));
        let v = v.decide(reviewer(&ana), true, "residuals look fine", T0).expect("ana");
        assert_eq!((v.state, v.approvals()), (State::Pending, 1));
        assert_eq!(v.decide(reviewer(&ana), true, "again", T0), Err(Refusal::AlreadyDecided(ana.clone())));
        let v = v.decide(reviewer(&bo), true, "backtest holds", T0).expect("bo");
        assert_eq!(v.state, State::Approved);
        assert_eq!(v.admits(&policy(2), T0), Ok(()));
        let day_31 = Timestamp::from_secs(T0.as_secs() + 31 * DAY_S);
        assert_eq!(v.admits(&policy(2), day_31), Err(Missing::Expired));
        assert_eq!(
            v.decide(reviewer(&user("cy@acme.test")), false, "late", T0),
            Err(Refusal::NotPending(State::Approved))
        );
    }

    #[test]
    fn the_submitter_a_token_and_a_non_reviewer_cannot_decide() {
        let runner = user("runner@acme.test");
        let v = Validation::submit(policy(1), runner.clone(), vec![passed("r_squared >= 0.9")], T0);
        assert_eq!(v.decide(reviewer(&runner), true, "mine", T0), Err(Refusal::SelfApproval(runner.clone())));
        let ana = user("ana@acme.test");
        let token = Decider { user: &ana, via_token: true, reviewer: true };
        assert_eq!(v.decide(token, true, "ci", T0), Err(Refusal::Token));
        let plain = Decider { user: &ana, via_token: false, reviewer: false };
        assert_eq!(v.decide(plain, true, "ok", T0), Err(Refusal::NotReviewer));
        assert_eq!(v.decide(reviewer(&ana), true, "  ", T0), Err(Refusal::NoReason));
        let rejected = v.decide(reviewer(&ana), false, "leaks the target", T0).expect("reject");
        assert_eq!(rejected.state, State::Rejected);
        assert_eq!(rejected.admits(&policy(1), T0), Err(Missing::NotApproved(State::Rejected)));
        assert_eq!(v.cancel(T0).expect("cancel").state, State::Cancelled);
        assert_eq!(rejected.cancel(T0), Err(Refusal::NotPending(State::Rejected)));
    }

    #[test]
    fn a_failed_check_fails_at_once_and_no_approvals_approves_at_once() {
        let failed = CheckOutcome { check: "r_squared >= 0.9".into(), passed: false, detail: "0.8".into() };
        let v = Validation::submit(policy(1), user("runner@acme.test"), vec![failed], T0);
        assert_eq!((v.state, v.decided_at), (State::Failed, Some(T0)));
        let v = Validation::submit(policy(0), user("runner@acme.test"), vec![passed("r_squared >= 0.9")], T0);
        assert_eq!(v.state, State::Approved);
        assert_eq!(v.expires_at, Some(Timestamp::from_secs(T0.as_secs() + 30 * DAY_S)));
    }

    #[test]
    fn a_stricter_policy_needs_a_new_validation() {
        let v = Validation::submit(policy(0), user("runner@acme.test"), vec![passed("r_squared >= 0.9")], T0);
        let stricter = Policy { approvals: 1, ..policy(0) };
        match v.admits(&stricter, T0) {
            Err(Missing::StricterPolicy(what)) => assert_eq!(what, ["1 approvals (it had 0)"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(v.admits(&Policy::default(), T0), Ok(()), "a looser policy is met");
    }
}
