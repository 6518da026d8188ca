//! API tokens: a person mints one in a project, acting as themselves,
//! limited by scopes; the secret is shown once and only its HMAC is kept.
//! Everyone lists and revokes their own; project admins everyone's.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource, Scope};
use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_identity::{Audit, Caller, Target, audit, authorize, new_token};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query};
use mapi_schema::{BudgetPeriod, Doc, Outcome, TokenBudget, TokenDoc, tx_create, tx_get, tx_put};
use mapi_store::{Op, transact};
use serde::{Deserialize, Serialize};

/// Expiry when none is asked for, and the longest allowed.
pub const DEFAULT_EXPIRY_DAYS: u32 = 90;
pub const MAX_EXPIRY_DAYS: u32 = 365;
/// The most distinct scopes a token holds: every request it makes reads them.
pub const MAX_SCOPES: usize = 64;

/// The body of `POST …/tokens`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// 1 to 200 characters, not all blank, without control characters.
    #[schema(
        pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\x00-\\x1F\\x7F-\\x9F \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00-\\x1F\\x7F-\\x9F]*$",
        max_length = 200
    )]
    pub name: String,
    /// 1 to 64: `admin`, `models:read`, `runs:create`, `score:*`, `score:<alias>`, …
    #[schema(min_items = 1, max_items = 64)]
    pub scopes: Vec<Scope>,
    /// 1 to 365; 90 when absent.
    #[schema(minimum = 1, maximum = 365)]
    pub expires_in_days: Option<u32>,
    /// Requests a minute, at least 1.
    #[schema(minimum = 1)]
    pub rate_limit_per_minute: Option<u32>,
    /// vCPU-seconds per `budget_period`, at least 1; given with `budget_period`.
    #[schema(minimum = 1)]
    pub budget_vcpu_seconds: Option<u64>,
    pub budget_period: Option<BudgetPeriod>,
}

/// A token, without its secret.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub user: UserId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub scopes: Vec<Scope>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub rate_limit_per_minute: Option<u32>,
    pub budget: Option<TokenBudget>,
}

impl From<&TokenDoc> for TokenView {
    fn from(t: &TokenDoc) -> Self {
        TokenView {
            id: t.public_id().to_owned(),
            name: t.name.clone(),
            user: t.user.clone(),
            tenant: t.tenant.clone(),
            project: t.project.clone(),
            scopes: t.scopes.clone(),
            created_at: t.created_at,
            expires_at: t.expires_at,
            revoked_at: t.revoked_at,
            rate_limit_per_minute: t.rate_limit_per_minute,
            budget: t.budget.clone(),
        }
    }
}

/// A new token: the secret, shown this once.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreatedToken {
    /// `mapi_…`: keep it; the platform cannot show it again.
    pub secret: String,
    pub token: TokenView,
}

/// What a valid request mints: its lifetime, budget and scopes (each once, in order).
struct Minted {
    lifetime: Duration,
    budget: Option<TokenBudget>,
    scopes: Vec<Scope>,
}

fn validate(body: &NewToken) -> Result<Minted, ApiError> {
    crate::tenants::check_name(&body.name, "name")?;
    if body.scopes.is_empty() {
        return Err(ApiError::invalid("give at least one scope, e.g. models:read, runs:create or admin"));
    }
    // Every request the token makes reads its scopes: at most 64 are
    // given, and one named twice is kept once.
    if body.scopes.len() > MAX_SCOPES {
        return Err(ApiError::invalid(format!(
            "{} scopes: a token holds at most {MAX_SCOPES} (use `score:*` rather than one `score:<alias>` each)",
            body.scopes.len()
        )));
    }
    let scopes: Vec<Scope> =
        body.scopes.iter().cloned().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let days = body.expires_in_days.unwrap_or(DEFAULT_EXPIRY_DAYS);
    if !(1..=MAX_EXPIRY_DAYS).contains(&days) {
        return Err(ApiError::invalid(format!(
            "expires_in_days {days} is out of range: use 1 to {MAX_EXPIRY_DAYS}"
        )));
    }
    if body.rate_limit_per_minute == Some(0) {
        return Err(ApiError::invalid("rate_limit_per_minute must be at least 1"));
    }
    let budget = match (body.budget_vcpu_seconds, body.budget_period) {
        (None, None) => None,
        (Some(s), Some(period)) if s > 0 => Some(TokenBudget { vcpu_seconds: s, period }),
        _ => {
            return Err(ApiError::invalid(
                "a budget needs both budget_vcpu_seconds (at least 1) and budget_period (day or month)",
            ));
        }
    };
    Ok(Minted { lifetime: Duration::from_secs(u64::from(days) * 86_400), budget, scopes })
}

/// Mint a token acting as you in this project (people only, any role).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/projects/{project}/tokens", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    request_body = NewToken, responses((status = 201, body = CreatedToken), (status = 400, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<NewToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let what = format!("project {tenant}/{project}");
    authorize(&state, &caller, Target::project(&tenant, &project, &what), Resource::Token, Action::Create)
        .await?;
    if let Err(e) = caller.require_session("minting a token") {
        let entry = Audit::by(&caller, "token.create", format!("projects/{tenant}/{project}"))
            .tenant(&tenant)
            .project(&project)
            .outcome(Outcome::Denied, ProblemCode::Forbidden)
            .detail("tokens are minted by a signed-in person");
        audit(&state, entry).await;
        return Err(e);
    }
    let Minted { lifetime, budget, scopes } = validate(&body)?;
    let now = state.clock.now();
    let secret = new_token().map_err(|e| ApiError::internal_from("token secret", e))?;
    let doc = TokenDoc {
        hash: state.pepper.hash(&secret),
        tenant: tenant.clone(),
        project: project.clone(),
        user: caller.user().clone(),
        name: body.name.trim().to_owned(),
        scopes,
        created_at: now,
        expires_at: now + lifetime,
        revoked_at: None,
        revoked_by: None,
        rate_limit_per_minute: body.rate_limit_per_minute,
        budget,
    };
    let scopes: Vec<String> = doc.scopes.iter().map(ToString::to_string).collect();
    let record = Audit::by(&caller, "token.create", format!("tokens/{}", doc.public_id()))
        .tenant(&tenant)
        .project(&project)
        .detail(format!("{} ({})", doc.name, scopes.join(" ")))
        .into_doc(now, &*state.entropy);
    let (doc_ref, record) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx_create(&mut tx, doc_ref)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(CreatedToken { secret, token: TokenView::from(&doc) })))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Everyone's tokens in the project (project admins).
    #[serde(default)]
    all: bool,
}

/// Tokens of a project.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// Your tokens in the project; with `all=true`, everyone's (project admins).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/tokens", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ListQuery),
    responses((status = 200, body = TokenList)), security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<ListQuery>,
) -> Result<Json<TokenList>, ApiError> {
    let what = format!("project {tenant}/{project}");
    let action = if q.all { Action::Manage } else { Action::Read };
    authorize(&state, &caller, Target::project(&tenant, &project, &what), Resource::Token, action).await?;
    let mut query = mapi_store::Query::new(TokenDoc::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str());
    if !q.all {
        query = query.filter("user", Op::Eq, caller.user().as_str());
    }
    let mut tokens: Vec<TokenView> = state
        .store
        .query(&query, None)
        .await?
        .iter()
        .map(|d| d.decode::<TokenDoc>().map(|t| TokenView::from(&t)))
        .collect::<Result<_, _>>()?;
    tokens.sort_by_key(|t| std::cmp::Reverse(t.created_at));
    Ok(Json(TokenList { tokens }))
}

/// Revoke a token: yours, or anyone's in the project (project admins).
/// Takes effect at the token's next request.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/tokens/{id}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = String, Path)),
    responses((status = 204), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): Path<(TenantId, ProjectId, String)>,
) -> Result<StatusCode, ApiError> {
    let what = format!("token {}", id.chars().take(64).collect::<String>());
    let project_what = format!("project {tenant}/{project}");
    // Visibility first: a caller who cannot see the project learns nothing.
    authorize(
        &state,
        &caller,
        Target::project(&tenant, &project, &project_what),
        Resource::Token,
        Action::Read,
    )
    .await?;
    let query = mapi_store::Query::new(TokenDoc::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str());
    let found: Option<TokenDoc> = state
        .store
        .query(&query, None)
        .await?
        .iter()
        .map(|d| d.decode::<TokenDoc>())
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .find(|t| id.len() == 12 && t.public_id() == id);
    let Some(token) = found else {
        return Err(ApiError::not_found(format!("{what} not found")));
    };
    let action = if &token.user == caller.user() { Action::Delete } else { Action::Manage };
    let granted = authorize(
        &state,
        &caller,
        Target::project(&tenant, &project, &project_what),
        Resource::Token,
        action,
    )
    .await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "token.revoke", format!("tokens/{}", token.public_id()))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("{} of {}", token.name, token.user))
        .into_doc(now, &*state.entropy);
    let (hash, record, by) = (token.hash.as_str(), &record, caller.user());
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(mut t) = tx_get::<TokenDoc>(&mut tx, hash).await? else {
            return Err(ApiError::not_found("token not found"));
        };
        if t.revoked_at.is_none() {
            t.revoked_at = Some(now);
            t.revoked_by = Some(by.clone());
            tx_put(&mut tx, &t)?;
            tx_create(&mut tx, record)?;
        }
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
