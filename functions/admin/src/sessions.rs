//! Signing in, and who the caller is.

use axum::extract::State;
use mapi_access::Role;
use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_identity::{Audit, Caller, Principal, audit};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::{Doc, MembershipDoc, UserDoc, tx_get, tx_put};
use mapi_store::{Op, Query, transact};
use serde::{Deserialize, Serialize};

/// One grant of the caller.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Grant {
    pub tenant: TenantId,
    /// Absent for a tenant-wide grant.
    pub project: Option<ProjectId>,
    pub role: Role,
    pub reviewer: bool,
}

/// The token a request used.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub scopes: Vec<String>,
    pub expires_at: Timestamp,
}

/// The caller, as the platform sees it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoAmI {
    pub user: UserId,
    /// `session` or `token`.
    pub kind: String,
    /// A platform operator (sessions only: a token never has operator powers).
    pub operator: bool,
    pub token: Option<TokenInfo>,
    pub grants: Vec<Grant>,
}

async fn grants_of(state: &AppState, user: &UserId) -> Result<Vec<Grant>, ApiError> {
    let q = Query::new(MembershipDoc::COLLECTION).filter("email", Op::Eq, user.as_str());
    let docs = state.store.query(&q, None).await?;
    let mut grants: Vec<Grant> = docs
        .iter()
        .map(|d| d.decode::<MembershipDoc>())
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|m| Grant { tenant: m.tenant, project: m.project, role: m.role, reviewer: m.reviewer })
        .collect();
    grants.sort_by(|a, b| (&a.tenant, &a.project).cmp(&(&b.tenant, &b.project)));
    Ok(grants)
}

async fn who(state: &AppState, caller: &Caller) -> Result<WhoAmI, ApiError> {
    let (kind, operator, token) = match &caller.principal {
        Principal::Session { operator, .. } => ("session", *operator, None),
        Principal::Anonymous => ("anonymous", false, None),
        Principal::Token(t) => (
            "token",
            false,
            Some(TokenInfo {
                id: t.public_id().to_owned(),
                name: t.name.clone(),
                tenant: t.tenant.clone(),
                project: t.project.clone(),
                scopes: t.scopes.iter().map(ToString::to_string).collect(),
                expires_at: t.expires_at,
            }),
        ),
    };
    Ok(WhoAmI {
        user: caller.user().clone(),
        kind: kind.to_owned(),
        operator,
        token,
        grants: grants_of(state, caller.user()).await?,
    })
}

/// Sign in: present an ID token as the bearer. Records the sign-in and
/// claims the invitations made for this verified e-mail.
#[utoipa::path(post, path = "/v1/sessions", tag = "admin", responses((status = 200, body = WhoAmI), (status = 401, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn sign_in(State(state): State<AppState>, caller: Caller) -> Result<Json<WhoAmI>, ApiError> {
    caller.require_session("signing in")?;
    let now = state.clock.now();
    let user = caller.user().clone();
    let invitations = Query::new(MembershipDoc::COLLECTION).filter("email", Op::Eq, user.as_str()).filter(
        "claimed",
        Op::Eq,
        false,
    );
    let record = Audit::by(&caller, "auth.sign_in", format!("users/{user}"))
        .operator(caller.is_operator())
        .into_doc(now, &*state.entropy);
    let (user_ref, invitations, record) = (&user, &invitations, &record);
    let claimed = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let existing = tx_get::<UserDoc>(&mut tx, user_ref.as_str()).await?;
        let open: Vec<MembershipDoc> =
            tx.query(invitations).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
        let doc = match existing {
            Some(mut u) => {
                u.last_sign_in = now;
                u
            }
            None => UserDoc { email: user_ref.clone(), first_sign_in: now, last_sign_in: now },
        };
        tx_put(&mut tx, &doc)?;
        for mut m in open.iter().cloned() {
            m.claimed = true;
            tx_put(&mut tx, &m)?;
        }
        mapi_schema::tx_create(&mut tx, record)?;
        Ok(tx.finish(open.len()))
    })
    .await?;
    if claimed > 0 {
        tracing::info!(user = %user, claimed, "invitations claimed at sign-in");
        audit(
            &state,
            Audit::by(&caller, "membership.claim", format!("users/{user}"))
                .detail(format!("{claimed} invitation(s)")),
        )
        .await;
    }
    Ok(Json(who(&state, &caller).await?))
}

/// Who the caller is: the person, whether an operator, the token used, and every grant.
#[utoipa::path(get, path = "/v1/whoami", tag = "admin", responses((status = 200, body = WhoAmI), (status = 401, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn whoami(State(state): State<AppState>, caller: Caller) -> Result<Json<WhoAmI>, ApiError> {
    Ok(Json(who(&state, &caller).await?))
}

/// How `mapi login` signs a person in through the browser: the issuer and
/// the OAuth client it uses (a native client: PKCE and a loopback redirect).
/// Public: what a sign-in page would show anyone.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CliClient {
    pub issuer: String,
    pub client_id: String,
    /// Sent at the token endpoint when the issuer gave the client one
    /// (Google gives Desktop clients one and does not treat it as secret).
    pub client_secret: Option<String>,
}

/// The OAuth client of the CLI's browser sign-in.
#[utoipa::path(get, path = "/v1/sessions/cli-client", tag = "admin", responses((status = 200, body = CliClient), (status = 404, body = mapi_problem::Problem)))]
pub async fn cli_client(State(state): State<AppState>) -> Result<Json<CliClient>, ApiError> {
    let (issuer, client_id, client_secret) = state.config.cli_client().ok_or_else(|| {
        ApiError::not_found("this platform has no identity provider for people: sign in with an API token")
    })?;
    Ok(Json(CliClient { issuer, client_id, client_secret }))
}
