//! Usage: what a project or a tenant spent in a UTC day or month, from the
//! ledger (the one record of what was metered: run attempts' entries, item
//! jobs' per-item entries and endpoints' per-minute score entries), grouped
//! by resource class (an endpoint's `endpoint-cpu` or `endpoint-l4`), kind
//! (`run`, `item` or `score`), token or day, with how near each quota is (warnings at 70 % and 90 %).
//! Amounts are estimates of compute cost at list prices, not an invoice.

use std::collections::BTreeMap;

use axum::extract::State;
use mapi_access::{Action, Resource};
use mapi_cost::Charge;
use mapi_domain::{ProjectId, TenantId, Tier, Timestamp};
use mapi_identity::{Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query};
use mapi_quota::nearness::Nearness;
use mapi_quota::{Limits, Period, effective};
use mapi_schema::{Doc, ItemLedgerEntry, LedgerEntry, QuotaPolicyDoc, ScoreLedgerEntry};
use mapi_store::{Direction, Op};
use serde::{Deserialize, Serialize};

/// How to group a usage report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    ResourceClass,
    /// `run` (run attempts), `item` (items of item jobs) or `score` (endpoints' scores).
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

/// Sums over ledger entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Totals {
    pub cost_micros: i64,
    pub vcpu_ms: u64,
    /// Memory: GiB-milliseconds.
    pub gib_ms: u64,
    pub accelerator_ms: u64,
    /// Distinct runs metered.
    pub runs: u64,
    /// Attempts metered.
    pub attempts: u64,
    /// Items of item jobs metered (one per item and round).
    #[serde(default)]
    pub items: u64,
    /// Scores of endpoints metered.
    #[serde(default)]
    pub scores: u64,
}

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

/// One metered entry of any ledger.
#[derive(Clone, Copy, Debug)]
pub enum Entry<'a> {
    Run(&'a LedgerEntry),
    Item(&'a ItemLedgerEntry),
    Score(&'a ScoreLedgerEntry),
}

impl Entry<'_> {
    fn token(&self) -> Option<&str> {
        match self {
            Entry::Run(e) => e.token.as_deref(),
            Entry::Item(e) => e.token.as_deref(),
            Entry::Score(e) => e.token.as_deref(),
        }
    }
    fn at(&self) -> Timestamp {
        match self {
            Entry::Run(e) => e.at,
            Entry::Item(e) => e.at,
            Entry::Score(e) => e.at,
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            Entry::Run(_) => "run",
            Entry::Item(_) => "item",
            Entry::Score(_) => "score",
        }
    }
    /// The resource class, or for scores the endpoint's hardware.
    fn class(&self) -> String {
        match self {
            Entry::Run(e) => e.charge.class.to_string(),
            Entry::Item(e) => e.charge.class.to_string(),
            Entry::Score(e) => format!("endpoint-{}", e.accelerator),
        }
    }
    fn currency(&self) -> &str {
        match self {
            Entry::Run(e) => &e.charge.currency,
            Entry::Item(e) => &e.charge.currency,
            Entry::Score(_) => mapi_cost::CURRENT.currency,
        }
    }
    /// Amount, vCPU-ms, GiB-ms and accelerator-ms.
    fn amounts(&self) -> (i64, u64, u64, u64) {
        let of = |c: &Charge| (c.amount_micros, c.vcpu_ms, c.gib_ms, c.accelerator_ms);
        match self {
            Entry::Run(e) => of(&e.charge),
            Entry::Item(e) => of(&e.charge),
            Entry::Score(e) => (e.cost_micros(), e.vcpu_ms, e.gib_ms, e.accelerator_ms),
        }
    }
}

/// Totals of `entries`, counting each run once.
pub fn totals(entries: &[Entry<'_>]) -> Totals {
    let mut t = Totals::default();
    let mut runs = std::collections::BTreeSet::new();
    for e in entries {
        let (micros, vcpu_ms, gib_ms, accelerator_ms) = e.amounts();
        t.cost_micros += micros;
        t.vcpu_ms += vcpu_ms;
        t.gib_ms += gib_ms;
        t.accelerator_ms += accelerator_ms;
        match e {
            Entry::Run(r) => {
                t.attempts += 1;
                runs.insert(r.run.clone());
            }
            Entry::Item(_) => t.items += 1,
            Entry::Score(s) => t.scores += s.requests,
        }
    }
    t.runs = runs.len() as u64;
    t
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
    let query_of = |collection: &'static str| {
        let mut query = mapi_store::Query::new(collection).filter("tenant", Op::Eq, tenant.as_str());
        if let Some(p) = &project {
            query = query.filter("project", Op::Eq, p.as_str());
        }
        query
            .filter("at", Op::Ge, start.to_rfc3339())
            .filter("at", Op::Lt, end.to_rfc3339())
            .order_by("at", Direction::Asc)
    };
    let (store, query_of) = (&*state.store, &query_of);
    let runs: Vec<LedgerEntry> = entries(store, query_of(LedgerEntry::COLLECTION)).await?;
    let items: Vec<ItemLedgerEntry> = entries(store, query_of(ItemLedgerEntry::COLLECTION)).await?;
    let scores: Vec<ScoreLedgerEntry> = entries(store, query_of(ScoreLedgerEntry::COLLECTION)).await?;
    let mut all: Vec<Entry<'_>> = runs
        .iter()
        .map(Entry::Run)
        .chain(items.iter().map(Entry::Item))
        .chain(scores.iter().map(Entry::Score))
        .collect();
    all.sort_by_key(|e| e.at());
    let mut groups: BTreeMap<String, Vec<Entry<'_>>> = BTreeMap::new();
    if let Some(g) = q.group_by {
        for e in &all {
            let key = match g {
                GroupBy::ResourceClass => e.class(),
                GroupBy::Kind => e.kind().to_owned(),
                GroupBy::Token => e.token().map_or_else(|| "(session)".to_owned(), str::to_owned),
                GroupBy::Day => Period::Day.key(e.at()),
            };
            groups.entry(key).or_default().push(*e);
        }
    }
    Ok(UsageReport {
        currency: all.first().map_or(mapi_cost::CURRENT.currency, |e| e.currency()).to_owned(),
        totals: totals(&all),
        groups: groups.into_iter().map(|(key, es)| Group { key, totals: totals(&es) }).collect(),
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
