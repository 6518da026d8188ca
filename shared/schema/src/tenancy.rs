//! Tenancy: tenants, projects, people and their memberships, API tokens
//! and the tenant's quota policy.

use mapi_access::{Role, Scope};
use mapi_domain::{ProjectId, Residency, TenantId, TenantStatus, Tier, Timestamp, UserId};
use serde::{Deserialize, Serialize};

use crate::Doc;

/// A tenant (organisation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantDoc {
    pub id: TenantId,
    pub name: String,
    pub tier: Tier,
    pub status: TenantStatus,
    pub residency: Residency,
    /// Invited as tenant admin; claims the invitation at first sign-in.
    pub admin_email: Option<UserId>,
    /// Why the status was last changed to suspended or deleting.
    pub status_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Doc for TenantDoc {
    const COLLECTION: &'static str = "tenants";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

/// A project inside a tenant. Id: `{tenant}:{project}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub created_at: Timestamp,
}

impl ProjectDoc {
    pub fn id_of(tenant: &TenantId, project: &ProjectId) -> String {
        format!("{tenant}:{project}")
    }
}

impl Doc for ProjectDoc {
    const COLLECTION: &'static str = "projects";
    fn doc_id(&self) -> String {
        ProjectDoc::id_of(&self.tenant, &self.project)
    }
}

/// A person who has signed in at least once. Id: the e-mail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserDoc {
    pub email: UserId,
    pub first_sign_in: Timestamp,
    pub last_sign_in: Timestamp,
}

impl Doc for UserDoc {
    const COLLECTION: &'static str = "users";
    fn doc_id(&self) -> String {
        self.email.to_string()
    }
}

/// One grant: a role in one project, or tenant-wide (`project: None`). Id:
/// `{tenant}:{project or *}:{email}`. Read at every request, so removing it
/// stops the person's sessions and tokens at once. For an e-mail that has not
/// signed in yet it is an invitation, claimed at the first sign-in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MembershipDoc {
    pub tenant: TenantId,
    pub project: Option<ProjectId>,
    pub email: UserId,
    pub role: Role,
    /// The reviewer capability (never for viewers; admins have it implicitly).
    pub reviewer: bool,
    /// The person has signed in since the grant was made.
    pub claimed: bool,
    pub created_at: Timestamp,
    pub created_by: UserId,
}

impl MembershipDoc {
    pub fn id_of(tenant: &TenantId, project: Option<&ProjectId>, email: &UserId) -> String {
        match project {
            Some(p) => format!("{tenant}:{p}:{email}"),
            None => format!("{tenant}:*:{email}"),
        }
    }
}

impl Doc for MembershipDoc {
    const COLLECTION: &'static str = "memberships";
    fn doc_id(&self) -> String {
        MembershipDoc::id_of(&self.tenant, self.project.as_ref(), &self.email)
    }
}

/// A vCPU-second budget of a token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenBudget {
    pub vcpu_seconds: u64,
    /// `day` or `month` (UTC).
    pub period: BudgetPeriod,
}

mapi_domain::wire_enum!(
    /// A budget's period.
    BudgetPeriod {
        Day => "day",
        Month => "month",
    }
);

/// An API token, stored only as the HMAC of its secret (the id). It acts as
/// its owner in one project, limited by its scopes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenDoc {
    /// Hex HMAC-SHA256 of the token under the platform's pepper.
    pub hash: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub user: UserId,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub revoked_by: Option<UserId>,
    /// Requests a minute this token may make.
    pub rate_limit_per_minute: Option<u32>,
    /// Compute this token may spend (enforced with quotas).
    pub budget: Option<TokenBudget>,
}

impl TokenDoc {
    /// The public name of a token: the first 12 hex characters of its hash.
    pub fn public_id(&self) -> &str {
        self.hash.get(..12).unwrap_or(&self.hash)
    }
}

impl Doc for TokenDoc {
    const COLLECTION: &'static str = "tokens";
    fn doc_id(&self) -> String {
        self.hash.clone()
    }
}

/// A person signed in to the web console, kept only as the HMAC of the
/// session's secret (the id), like a token. The secret lives in the
/// browser's HttpOnly cookie and is the bearer the console calls the API
/// with; signing out deletes this document, which ends the session at once
/// wherever the secret is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsoleSessionDoc {
    /// Hex HMAC-SHA256 of the secret under the platform's pepper.
    pub hash: String,
    pub user: UserId,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

impl Doc for ConsoleSessionDoc {
    const COLLECTION: &'static str = "console_sessions";
    fn doc_id(&self) -> String {
        self.hash.clone()
    }
}

/// A console sign-in under way: what one authorization request must be
/// answered with. Id: the HMAC of its `state`. The callback deletes it in
/// the transaction that reads it, so a code is exchanged at most once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsoleLoginDoc {
    pub state_hash: String,
    /// The PKCE code verifier (RFC 7636): only its S256 challenge left.
    pub verifier: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The console path to go back to once signed in.
    pub return_to: String,
    pub expires_at: Timestamp,
}

impl Doc for ConsoleLoginDoc {
    const COLLECTION: &'static str = "console_logins";
    fn doc_id(&self) -> String {
        self.state_hash.clone()
    }
}

/// Requests one token made in one UTC minute. Id: `{token public id}:{minute}`.
/// Each token's minutes are separate documents, so no document is shared
/// by two tokens or written past its minute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenMinuteDoc {
    pub token: String,
    pub minute: i64,
    pub requests: u32,
}

impl Doc for TokenMinuteDoc {
    const COLLECTION: &'static str = "token_minutes";
    fn doc_id(&self) -> String {
        format!("{}:{}", self.token, self.minute)
    }
}

/// A tenant's quota override (operators). Id: the tenant. The limits given
/// replace the tier's; the others fall back to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaPolicyDoc {
    pub tenant: TenantId,
    pub policy: mapi_quota::Policy,
    pub set_by: UserId,
    pub set_at: Timestamp,
}

impl Doc for QuotaPolicyDoc {
    const COLLECTION: &'static str = "quota_policies";
    fn doc_id(&self) -> String {
        self.tenant.to_string()
    }
}
