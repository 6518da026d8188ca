//! Operators' quota overrides and kill switches. Both are audited; kill
//! switches need a reason.

use axum::extract::State;

use mapi_access::{Action, Resource};
use mapi_domain::{TenantId, Tier};
use mapi_identity::{Audit, Caller, Target, authorize, authorize_operator};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path};
use mapi_quota::{KillSwitches, Limits, Period, Policy, effective, platform_limits};
use mapi_schema::{Doc, KillSwitchDoc, QuotaPolicyDoc, TenantDoc, tx_create, tx_get, tx_put};
use mapi_store::transact;
use serde::{Deserialize, Serialize};

/// A tenant's limits: its tier, the operator's override if any, and the limits in force.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantLimits {
    pub tenant: TenantId,
    pub tier: Tier,
    pub policy: Option<Policy>,
    pub effective: Limits,
    /// Days the tenant's jobs are kept: the policy's, else the platform's
    /// `MAPI_JOB_RETENTION_DAYS`.
    pub job_retention_days: u64,
    /// Days after a run ended that its executions' leftovers (logs included) are kept: the
    /// policy's, else the platform's `MAPI_RUN_RETENTION_DAYS`.
    pub run_retention_days: u64,
    /// Days the tenant's audit entries are kept: the policy's, else the platform's
    /// `MAPI_AUDIT_RETENTION_DAYS`.
    pub audit_retention_days: u64,
    /// Days the tenant's webhook messages and their delivery logs are kept: the policy's, else
    /// the platform's `MAPI_DELIVERY_RETENTION_DAYS`.
    pub delivery_retention_days: u64,
    /// Days after its upload a dataset no run reads is kept: the policy's, else the platform's
    /// `MAPI_DATASET_RETENTION_DAYS`; `null`: until deleted.
    pub dataset_retention_days: Option<u64>,
    /// Days after its creation a model version serving no endpoint keeps its bytes: the
    /// policy's, else the platform's `MAPI_MODEL_VERSION_RETENTION_DAYS`; `null`: kept.
    pub model_version_retention_days: Option<u64>,
    /// Days a run is kept once its executions were forgotten: the policy's, else the
    /// platform's `MAPI_RUN_RECORD_RETENTION_DAYS`; `null`: kept.
    pub run_record_retention_days: Option<u64>,
}

impl TenantLimits {
    fn of(state: &AppState, tenant: TenantId, tier: Tier, policy: Option<Policy>) -> TenantLimits {
        let days = |own: Option<u32>, platform: std::time::Duration| {
            own.map_or(platform.as_secs() / 86_400, u64::from)
        };
        let own = |f: fn(&Policy) -> Option<u32>| policy.as_ref().and_then(f);
        let job_retention_days = days(own(|p| p.job_retention_days), state.config.jobs.retention);
        let run_retention_days = days(own(|p| p.run_retention_days), state.config.run_retention);
        let audit_retention_days = days(own(|p| p.audit_retention_days), state.config.audit_retention);
        let delivery_retention_days =
            days(own(|p| p.delivery_retention_days), state.config.delivery_retention);
        let kept = |own: Option<u32>, platform: Option<std::time::Duration>| {
            own.map(u64::from).or(platform.map(|d| d.as_secs() / 86_400))
        };
        let dataset_retention_days = kept(own(|p| p.dataset_retention_days), state.config.dataset_retention);
        let model_version_retention_days =
            kept(own(|p| p.model_version_retention_days), state.config.model_version_retention);
        let run_record_retention_days =
            kept(own(|p| p.run_record_retention_days), state.config.run_record_retention);
        TenantLimits {
            effective: effective(tier, policy.as_ref()),
            tenant,
            tier,
            policy,
            job_retention_days,
            run_retention_days,
            audit_retention_days,
            delivery_retention_days,
            dataset_retention_days,
            model_version_retention_days,
            run_record_retention_days,
        }
    }
}

/// The first retention of `policy` set to 0 days, refused in words: 0 would
/// delete at the next housekeeping what the tenant means to keep.
fn zero_retention(policy: &Policy) -> Option<String> {
    let days = [
        (
            "job_retention_days",
            policy.job_retention_days,
            "delete the tenant's jobs at the next housekeeping",
        ),
        (
            "run_retention_days",
            policy.run_retention_days,
            "remove the logs of the tenant's runs as soon as they end",
        ),
        (
            "audit_retention_days",
            policy.audit_retention_days,
            "delete the tenant's audit entries at the next housekeeping",
        ),
        (
            "dataset_retention_days",
            policy.dataset_retention_days,
            "delete the tenant's datasets at the next housekeeping",
        ),
        (
            "delivery_retention_days",
            policy.delivery_retention_days,
            "delete the tenant's webhook messages at the next housekeeping",
        ),
        (
            "model_version_retention_days",
            policy.model_version_retention_days,
            "delete the bytes of the tenant's model versions at the next housekeeping",
        ),
        (
            "run_record_retention_days",
            policy.run_record_retention_days,
            "delete the tenant's runs as soon as their executions are forgotten",
        ),
    ];
    let (name, _, would) = days.into_iter().find(|(_, d, _)| *d == Some(0))?;
    Some(format!("{name} must be at least 1 (0 would {would}); omit it for the platform's default"))
}

/// Every tenant's limits, and the platform's.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaList {
    pub tenants: Vec<TenantLimits>,
    pub platform: Limits,
}

/// Every tenant's quotas (operators).
#[utoipa::path(get, path = "/v1/admin/quotas", tag = "admin", responses((status = 200, body = QuotaList)), security(("session" = [])))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<QuotaList>, ApiError> {
    authorize_operator(&state, &caller, Resource::Quota, Action::Read, "quotas").await?;
    let tenants: Vec<TenantDoc> = state
        .store
        .query(&mapi_store::Query::new(TenantDoc::COLLECTION), None)
        .await?
        .iter()
        .map(|d| d.decode())
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for t in tenants {
        let policy =
            mapi_schema::get::<QuotaPolicyDoc>(&*state.store, t.id.as_str()).await?.map(|p| p.policy);
        out.push(TenantLimits::of(&state, t.id, t.tier, policy));
    }
    Ok(Json(QuotaList { tenants: out, platform: platform_limits() }))
}

/// Replace a tenant's quota policy (operators): the limits given replace
/// the tier's, the others fall back to the tier default.
#[utoipa::path(put, path = "/v1/admin/quotas/{tenant}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)), request_body = Policy,
    responses((status = 200, body = TenantLimits)), security(("session" = [])))]
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Json(policy): Json<Policy>,
) -> Result<Json<TenantLimits>, ApiError> {
    let what = format!("tenant {tenant}");
    let granted =
        authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Quota, Action::Update).await?;
    if let Some(refused) = zero_retention(&policy) {
        return Err(ApiError::invalid(refused));
    }
    let now = state.clock.now();
    let doc = QuotaPolicyDoc {
        tenant: tenant.clone(),
        policy: policy.clone(),
        set_by: caller.user().clone(),
        set_at: now,
    };
    let record = Audit::by(&caller, "quota.set", format!("quotas/{tenant}"))
        .tenant(&tenant)
        .operator(true)
        .detail(serde_json::to_string(&policy).unwrap_or_default())
        .into_doc(now, &*state.entropy);
    let (doc_ref, record) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx_put(&mut tx, doc_ref)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    let tier = granted.tenant.tier;
    Ok(Json(TenantLimits::of(&state, tenant, tier, Some(policy))))
}

/// Remove a tenant's override: its tier's defaults apply again (operators).
#[utoipa::path(delete, path = "/v1/admin/quotas/{tenant}", tag = "admin", params(("tenant" = mapi_domain::TenantId, Path)),
    responses((status = 200, body = TenantLimits)), security(("session" = [])))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
) -> Result<Json<TenantLimits>, ApiError> {
    let what = format!("tenant {tenant}");
    let granted =
        authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Quota, Action::Delete).await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "quota.remove", format!("quotas/{tenant}"))
        .tenant(&tenant)
        .operator(true)
        .into_doc(now, &*state.entropy);
    let key = mapi_schema::key::<QuotaPolicyDoc>(tenant.as_str())?;
    let (key, record) = (&key, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx.delete(key);
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    let tier = granted.tenant.tier;
    Ok(Json(TenantLimits::of(&state, tenant, tier, None)))
}

/// The kill switches in force.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KillSwitchView {
    pub switches: KillSwitches,
    pub reason: Option<String>,
    pub set_by: Option<String>,
    pub set_at: Option<mapi_domain::Timestamp>,
}

/// The kill switches (operators).
#[utoipa::path(get, path = "/v1/admin/kill-switches", tag = "admin", responses((status = 200, body = KillSwitchView)), security(("session" = [])))]
pub async fn get_switches(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<KillSwitchView>, ApiError> {
    authorize_operator(&state, &caller, Resource::KillSwitch, Action::Read, "kill switches").await?;
    let doc = mapi_schema::get::<KillSwitchDoc>(&*state.store, KillSwitchDoc::ID).await?;
    Ok(Json(match doc {
        Some(d) => KillSwitchView {
            switches: d.switches,
            reason: Some(d.reason),
            set_by: Some(d.set_by.to_string()),
            set_at: Some(d.set_at),
        },
        None => {
            KillSwitchView { switches: KillSwitches::default(), reason: None, set_by: None, set_at: None }
        }
    }))
}

/// The body of `PUT /v1/admin/kill-switches`: the switches given change, the others stay.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSwitches {
    pub untrusted_execution_enabled: Option<bool>,
    /// The global spend cap in micros of the price table's currency; `0` removes it.
    #[schema(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    pub spend_cap_micros: Option<i64>,
    pub spend_cap_period: Option<Period>,
    /// Why (required): not blank.
    #[schema(
        pattern = "[^\\x09-\\x0D \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]"
    )]
    pub reason: String,
}

/// Set kill switches (operators, with a reason; audited).
#[utoipa::path(put, path = "/v1/admin/kill-switches", tag = "admin", request_body = SetSwitches,
    responses((status = 200, body = KillSwitchView), (status = 400, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn set_switches(
    State(state): State<AppState>,
    caller: Caller,
    Json(body): Json<SetSwitches>,
) -> Result<Json<KillSwitchView>, ApiError> {
    authorize_operator(&state, &caller, Resource::KillSwitch, Action::Update, "kill switches").await?;
    let reason = body.reason.trim();
    if reason.is_empty() {
        return Err(ApiError::invalid("setting a kill switch needs a reason"));
    }
    if body.spend_cap_micros.is_some_and(|c| c < 0) {
        return Err(ApiError::invalid("spend_cap_micros must be positive, or 0 to remove the cap"));
    }
    let now = state.clock.now();
    let (body_ref, user) = (&body, caller.user());
    let record = Audit::by(&caller, "kill_switch.set", "kill_switches/global")
        .operator(true)
        .detail(format!(
            "untrusted_execution {:?}, spend cap {:?} per {:?}; reason: {reason}",
            body.untrusted_execution_enabled,
            body.spend_cap_micros,
            body.spend_cap_period.map(|p| p.as_str())
        ))
        .into_doc(now, &*state.entropy);
    let record = &record;
    let doc = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut switches = tx_get::<KillSwitchDoc>(&mut tx, KillSwitchDoc::ID)
            .await?
            .map(|d| d.switches)
            .unwrap_or_default();
        if let Some(on) = body_ref.untrusted_execution_enabled {
            switches.untrusted_execution_enabled = on;
        }
        if let Some(cap) = body_ref.spend_cap_micros {
            switches.spend_cap_micros = (cap > 0).then_some(cap);
        }
        if let Some(p) = body_ref.spend_cap_period {
            switches.spend_cap_period = p;
        }
        let doc = KillSwitchDoc {
            switches,
            reason: body_ref.reason.trim().to_owned(),
            set_by: user.clone(),
            set_at: now,
        };
        tx_put(&mut tx, &doc)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(doc))
    })
    .await?;
    tracing::warn!(switches = ?doc.switches, reason = %doc.reason, "kill switches changed");
    Ok(Json(KillSwitchView {
        switches: doc.switches,
        reason: Some(doc.reason),
        set_by: Some(doc.set_by.to_string()),
        set_at: Some(doc.set_at),
    }))
}
