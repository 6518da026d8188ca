//! Usage: what a project or a tenant spent in a UTC day or month, from the
//! ledger (the one record of what was metered: run attempts' entries, item
//! jobs' per-item entries and endpoints' per-minute score entries) as its
//! daily rollups sum it (`mapi_schema::usage`), so a report reads a bounded
//! number of documents however long the ledgers are; grouped
//! by resource class (an endpoint's `endpoint-cpu` or `endpoint-l4`), kind
//! (`run`, `item` or `score`), token or day, with how near each quota is (warnings at 70 % and 90 %).
//! Amounts are estimates of compute cost at list prices, not an invoice.

use std::collections::BTreeMap;

use axum::extract::State;
use mapi_access::{Action, Resource};
use mapi_domain::{ProjectId, TenantId, Tier, Timestamp};
use mapi_identity::{Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query};
use mapi_quota::nearness::Nearness;
use mapi_quota::{Limits, Period, effective};
use mapi_schema::usage::{self, Line, ROLLUP_COLLECTION, ROLLUP_SHARDS, RollupsSince, Scope, lines_of};
use mapi_schema::{Doc, ItemLedgerEntry, LedgerEntry, QuotaPolicyDoc, ScoreLedgerEntry};
use mapi_store::{Direction, Op};
use serde::{Deserialize, Serialize};

/// How to group a usage report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    ResourceClass,
    /// `run` (run attempts), `item` (items of item jobs), `score` (endpoints' scores) or
    /// `instance` (instance-billed endpoints' idle instance time).
    Kind,
    Token,
    Day,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// `day` or `month` (UTC); `month` when absent.
    #[param(value_type = Option<String>, pattern = "^(day|month)$")]
    period: Option<Period>,
    /// An instant inside the period (RFC 3339); now when absent.
    at: Option<Timestamp>,
    /// Groups of the totals; none when absent.
    #[param(value_type = Option<GroupBy>)]
    group_by: Option<GroupBy>,
}

pub use mapi_schema::usage::Totals;

/// One group of a report.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Group {
    pub key: String,
    pub totals: Totals,
}

/// A usage report.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageReport {
    pub tenant: TenantId,
    pub project: Option<ProjectId>,
    pub period: Period,
    pub start: Timestamp,
    pub end: Timestamp,
    pub currency: String,
    pub totals: Totals,
    pub group_by: Option<GroupBy>,
    pub groups: Vec<Group>,
    pub quotas: Vec<Nearness>,
    pub note: String,
}

/// How near `tenant` is to each of its limits now.
async fn quotas(
    state: &AppState,
    tenant: &TenantId,
    tier: Tier,
    now: Timestamp,
) -> Result<Vec<Nearness>, ApiError> {
    let policy = mapi_schema::get::<QuotaPolicyDoc>(&*state.store, tenant.as_str()).await?.map(|p| p.policy);
    let limits: Limits = effective(tier, policy.as_ref());
    Ok(mapi_quota::nearness::of_tenant(&*state.store, tenant, &limits, now).await?)
}

/// Every entry `query` finds, decoded.
async fn entries<T: serde::de::DeserializeOwned>(
    store: &dyn mapi_store::Store,
    query: mapi_store::Query,
) -> Result<Vec<T>, ApiError> {
    Ok(store.query(&query, None).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?)
}

/// One line of one day (its [`Period::Day`] key).
type DayLine = (String, Line, Totals);

/// The lines of `scope` in the days from `start` to `end` (UTC midnights):
/// the rollups of those days, one batch read of at most 31 × 4 documents
/// (with the instant rollups start), and for the part of the period before
/// that instant, the ledger entries themselves.
async fn lines(
    store: &dyn mapi_store::Store,
    scope: Scope<'_>,
    start: Timestamp,
    end: Timestamp,
) -> Result<Vec<DayLine>, ApiError> {
    let mut days = Vec::new();
    let mut day = start;
    while day < end {
        days.push(Period::Day.key(day));
        day = Period::Day.end(day);
    }
    let shards = ROLLUP_SHARDS as usize;
    let mut keys = vec![mapi_schema::key::<RollupsSince>(RollupsSince::ID)?];
    for d in &days {
        for id in scope.doc_ids(d) {
            keys.push(mapi_store::DocKey::new(ROLLUP_COLLECTION, id)?);
        }
    }
    let docs = store.get(&keys, None).await?;
    // Not recorded yet: no process has written a rollup, so the ledgers
    // hold all there is.
    let since = match docs.first() {
        Some(Some(d)) => d.decode::<RollupsSince>()?.at,
        _ => end,
    };
    let mut out = Vec::new();
    for (i, doc) in docs.iter().skip(1).enumerate() {
        if let Some(doc) = doc {
            out.extend(lines_of(doc).into_iter().map(|(line, t)| (days[i / shards].clone(), line, t)));
        }
    }
    if since > start {
        out.extend(ledger_lines(store, scope, start, since.min(end)).await?);
    }
    Ok(out)
}

/// The lines of the ledger entries of `scope` from `start` to `end`: the
/// history written before rollups started.
async fn ledger_lines(
    store: &dyn mapi_store::Store,
    scope: Scope<'_>,
    start: Timestamp,
    end: Timestamp,
) -> Result<Vec<DayLine>, ApiError> {
    let query_of = |collection: &'static str| {
        let query = match scope {
            Scope::Tenant(t) => mapi_store::Query::new(collection).filter("tenant", Op::Eq, t.as_str()),
            Scope::Project(t, p) => mapi_store::Query::new(collection)
                .filter("tenant", Op::Eq, t.as_str())
                .filter("project", Op::Eq, p.as_str()),
        };
        query
            .filter("at", Op::Ge, start.to_rfc3339())
            .filter("at", Op::Lt, end.to_rfc3339())
            .order_by("at", Direction::Asc)
    };
    let day = |at: Timestamp| Period::Day.key(at);
    let mut out = Vec::new();
    for e in entries::<LedgerEntry>(store, query_of(LedgerEntry::COLLECTION)).await? {
        let (line, t) = usage::of_run(&e);
        out.push((day(e.at), line, t));
    }
    for e in entries::<ItemLedgerEntry>(store, query_of(ItemLedgerEntry::COLLECTION)).await? {
        let (line, t) = usage::of_item(&e);
        out.push((day(e.at), line, t));
    }
    for e in entries::<ScoreLedgerEntry>(store, query_of(ScoreLedgerEntry::COLLECTION)).await? {
        let (line, t) = usage::of_score_entry(&e);
        out.push((day(e.at), line, t));
    }
    Ok(out)
}

/// The group a line of a day falls in.
fn group_key(g: GroupBy, (day, line, _): &DayLine) -> String {
    match g {
        GroupBy::ResourceClass => line.class.clone(),
        GroupBy::Kind => line.kind.as_str().to_owned(),
        GroupBy::Token => line.token.clone().unwrap_or_else(|| "(session)".to_owned()),
        GroupBy::Day => day.clone(),
    }
}

async fn report(
    state: &AppState,
    tenant: TenantId,
    project: Option<ProjectId>,
    tier: Tier,
    q: UsageQuery,
) -> Result<UsageReport, ApiError> {
    let now = state.clock.now();
    let period = q.period.unwrap_or(Period::Month);
    let at = q.at.unwrap_or(now);
    let (start, end) = (period.start(at), period.end(at));
    let scope = project.as_ref().map_or(Scope::Tenant(&tenant), |p| Scope::Project(&tenant, p));
    let lines = lines(&*state.store, scope, start, end).await?;
    let mut totals = Totals::default();
    let mut groups: BTreeMap<String, Totals> = BTreeMap::new();
    for l in &lines {
        totals.add(&l.2);
        if let Some(g) = q.group_by {
            groups.entry(group_key(g, l)).or_default().add(&l.2);
        }
    }
    Ok(UsageReport {
        currency: mapi_cost::CURRENT.currency.to_owned(),
        totals,
        groups: groups.into_iter().map(|(key, totals)| Group { key, totals }).collect(),
        quotas: quotas(state, &tenant, tier, now).await?,
        tenant,
        project,
        period,
        start,
        end,
        group_by: q.group_by,
        note: "Amounts are estimates of compute cost at list prices; they are not an invoice.".to_owned(),
    })
}

/// A project's usage (everyone in the project).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/usage", tag = "usage", params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), UsageQuery),
    responses((status = 200, body = UsageReport)), security(("session" = []), ("token" = [])))]
pub async fn project_usage(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<UsageQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    let what = format!("project {tenant}/{project}");
    let granted =
        authorize(&state, &caller, Target::project(&tenant, &project, &what), Resource::Usage, Action::Read)
            .await?;
    Ok(Json(report(&state, tenant, Some(project), granted.tenant.tier, q).await?))
}

/// The whole tenant's usage (tenant admins, tenant-wide; operators).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/usage", tag = "usage", params(("tenant" = mapi_domain::TenantId, Path), UsageQuery),
    responses((status = 200, body = UsageReport)), security(("session" = [])))]
pub async fn tenant_usage(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<TenantId>,
    Query(q): Query<UsageQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    let what = format!("tenant {tenant}");
    let granted =
        authorize(&state, &caller, Target::tenant(&tenant, &what), Resource::Billing, Action::Read).await?;
    Ok(Json(report(&state, tenant, None, granted.tenant.tier, q).await?))
}
