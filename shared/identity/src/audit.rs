//! The audit log: who did what to what, when, and how it ended.

use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_entropy::Entropy;
use mapi_problem::ProblemCode;
use mapi_schema::{AuditDoc, Doc, Outcome};

use crate::{Caller, IdentityState, Principal, RequestMeta};

/// An entry being built.
#[derive(Clone, Debug, PartialEq)]
pub struct Audit {
    pub action: String,
    pub resource: String,
    pub tenant: Option<TenantId>,
    pub project: Option<ProjectId>,
    pub actor: Option<UserId>,
    pub actor_kind: &'static str,
    pub token: Option<String>,
    pub operator: bool,
    pub outcome: Outcome,
    pub problem: Option<ProblemCode>,
    pub detail: Option<String>,
    pub meta: RequestMeta,
}

impl Audit {
    fn new(action: &str, resource: String, actor_kind: &'static str) -> Audit {
        Audit {
            action: action.to_owned(),
            resource,
            tenant: None,
            project: None,
            actor: None,
            actor_kind,
            token: None,
            operator: false,
            outcome: Outcome::Success,
            problem: None,
            detail: None,
            meta: RequestMeta::default(),
        }
    }

    /// An action of `caller` (a success unless told otherwise).
    pub fn by(caller: &Caller, action: &str, resource: impl Into<String>) -> Audit {
        let (kind, token) = match &caller.principal {
            Principal::Session { .. } => ("session", None),
            Principal::Token(t) => ("token", Some(t.public_id().to_owned())),
            Principal::Anonymous => ("anonymous", None),
        };
        Audit {
            actor: (!caller.is_anonymous()).then(|| caller.user().clone()),
            token,
            meta: caller.meta.clone(),
            ..Audit::new(action, resource.into(), kind)
        }
    }

    /// An action by someone not (yet) authenticated.
    pub fn anonymous(action: &str, resource: impl Into<String>) -> Audit {
        Audit::new(action, resource.into(), "anonymous")
    }

    /// An action of the platform's own services.
    pub fn internal(action: &str, resource: impl Into<String>) -> Audit {
        Audit::new(action, resource.into(), "internal")
    }

    pub fn tenant(mut self, tenant: &TenantId) -> Audit {
        self.tenant = Some(tenant.clone());
        self
    }

    pub fn project(mut self, project: &ProjectId) -> Audit {
        self.project = Some(project.clone());
        self
    }

    /// The person acting, where no [`Caller`] exists yet (signing in).
    pub fn actor(mut self, user: &mapi_domain::UserId) -> Audit {
        self.actor = Some(user.clone());
        self
    }

    pub fn operator(mut self, operator: bool) -> Audit {
        self.operator = operator;
        self
    }

    pub fn outcome(mut self, outcome: Outcome, problem: ProblemCode) -> Audit {
        self.outcome = outcome;
        self.problem = Some(problem);
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Audit {
        self.detail = Some(detail.into());
        self
    }

    /// The document, stamped `at`, its id's random suffix drawn from
    /// `entropy` (the caller's state's source, so a seeded platform replays
    /// its audit ids).
    pub fn into_doc(self, at: Timestamp, entropy: &dyn Entropy) -> AuditDoc {
        // Uniqueness only: when `entropy` fails the suffix is zeros, and the
        // time in micros still orders the entries.
        let suffix: [u8; 4] = mapi_entropy::bytes(entropy).unwrap_or_default();
        AuditDoc {
            id: format!("{:020}-{}", at.as_micros().max(0), hex::encode(suffix)),
            at,
            tenant: self.tenant,
            project: self.project,
            actor: self.actor,
            actor_kind: self.actor_kind.to_owned(),
            token: self.token,
            operator: self.operator,
            action: self.action,
            resource: self.resource,
            outcome: self.outcome,
            problem: self.problem.map(|p| p.as_str().to_owned()),
            detail: self.detail,
            ip_hash: self.meta.ip_hash,
            user_agent_hash: self.meta.user_agent_hash,
        }
    }
}

/// Writes an entry, its id made from `state`'s clock and entropy. The write
/// is awaited; if it fails the failure is logged at ERROR (the action it
/// records has already been decided).
pub async fn audit<S: IdentityState + ?Sized>(state: &S, entry: Audit) {
    let doc = entry.into_doc(state.clock().now(), state.entropy());
    let result = match (doc.key(), mapi_store::encode(&doc)) {
        (Ok(key), Ok(fields)) => mapi_store::StoreExt::create(state.store(), &key, fields).await.map(|_| ()),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    if let Err(e) = result {
        tracing::error!(action = %doc.action, resource = %doc.resource, error = %e, "could not write an audit entry");
    }
}

#[cfg(test)]
mod tests {
    use mapi_entropy::{EntropyError, SeededEntropy};

    use super::*;

    /// A source that has no randomness to give.
    #[derive(Debug)]
    struct NoEntropy;

    impl Entropy for NoEntropy {
        fn fill(&self, _buf: &mut [u8]) -> Result<(), EntropyError> {
            Err(EntropyError("none".into()))
        }
    }

    #[test]
    fn ids_are_the_time_then_a_suffix_from_the_callers_entropy() {
        let at = Timestamp::parse_rfc3339("2026-12-01T08:00:00Z").expect("time");
        let id = |entropy: &dyn Entropy| Audit::internal("test.action", "tests/x").into_doc(at, entropy).id;
        let (a, b) = (SeededEntropy::new(7), SeededEntropy::new(7));
        let first = id(&a);
        assert_eq!(first, id(&b), "the same seed, the same id");
        assert_ne!(first, id(&a), "the stream moves on");
        let time = format!("{:020}-", at.as_micros());
        assert!(first.starts_with(&time) && first.len() == time.len() + 8, "{first}");
        assert_eq!(id(&NoEntropy), format!("{time}00000000"), "no randomness: a zero suffix");
    }
}
