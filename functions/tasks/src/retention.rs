//! Retention by kind: the platform's setting, and each tenant's own from
//! its quota policy; [`Retention::expired`] finds what is past it with
//! bounded reads. The housekeepers (jobs, runs' executions, records) all
//! ask it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use mapi_domain::{TenantId, Timestamp};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{Doc, QuotaPolicyDoc};
use mapi_store::{Direction, Document, Op, Query};

/// Documents of the platform's query looked at per call (some belong to a
/// tenant with its own, longer retention, and are passed over), a page at
/// a time.
const SCAN_PER_CALL: u32 = 2_000;
const SCAN_PAGE: u32 = 200;

/// The tenants' quota policies, read once per housekeeping call.
#[derive(Debug)]
pub struct Policies(Vec<QuotaPolicyDoc>);

impl Policies {
    /// Reads every tenant's quota policy (one query; only tenants an
    /// operator gave a policy have one).
    pub async fn read(state: &AppState) -> Result<Policies, ApiError> {
        let docs = state.store.query(&Query::new(QuotaPolicyDoc::COLLECTION), None).await?;
        Ok(Policies(docs.iter().map(|d| d.decode()).collect::<Result<_, _>>()?))
    }

    /// Each tenant's retention that its policy sets, in days by `days`
    /// (`job_retention_days`, `run_retention_days`, `audit_retention_days`,
    /// `delivery_retention_days`, `dataset_retention_days`).
    pub fn own(&self, days: fn(&mapi_quota::Policy) -> Option<u32>) -> HashMap<TenantId, Duration> {
        self.0
            .iter()
            .filter_map(|p| {
                days(&p.policy).map(|d| (p.tenant.clone(), Duration::from_secs(u64::from(d) * 86_400)))
            })
            .collect()
    }
}

/// The query of `collection`'s documents whose `field` (a time) is before a cutoff, oldest
/// first: what [`Retention::expired`] asks at each cutoff. The store indexes (`field`) and
/// (`tenant`, `field`).
pub fn aged(collection: &'static str, field: &'static str) -> impl Fn(Timestamp) -> Query {
    move |cutoff| {
        Query::new(collection).filter(field, Op::Lt, cutoff.to_rfc3339()).order_by(field, Direction::Asc)
    }
}

/// One kind's retention: the platform's, and the tenants' own.
#[derive(Debug, Clone, Copy)]
pub struct Retention<'a> {
    /// The tenants whose quota policy sets their own ([`Policies::own`]).
    pub own: &'a HashMap<TenantId, Duration>,
    /// The platform's (`None`: kept, unless a tenant's own says otherwise).
    pub default: Option<Duration>,
    pub now: Timestamp,
}

impl Retention<'_> {
    /// Documents past their retention, at most `budget`: for each tenant
    /// with its own retention, `aged(cutoff)` narrowed to the tenant; then
    /// `aged` at the platform's cutoff, passing over those tenants'
    /// documents (at most [`SCAN_PER_CALL`] looked at, a page at a time).
    /// `aged` orders by the age field, oldest first; the documents carry a
    /// `tenant` field (one without, e.g. a platform audit entry, is under
    /// the platform's retention) and the store indexes (`tenant`, age).
    pub async fn expired(
        &self,
        state: &AppState,
        budget: u32,
        aged: impl Fn(Timestamp) -> Query,
    ) -> Result<Vec<Document>, ApiError> {
        let mut out = Vec::new();
        for (tenant, keep) in self.own {
            let left = budget.saturating_sub(len(&out));
            if left == 0 {
                return Ok(out);
            }
            let q = aged(self.now - *keep).filter("tenant", Op::Eq, tenant.as_str()).limit(left);
            out.extend(state.store.query(&q, None).await?);
        }
        let Some(default) = self.default else { return Ok(out) };
        let q = aged(self.now - default);
        let passed_over: HashSet<&str> = self.own.keys().map(TenantId::as_str).collect();
        let (mut token, mut scanned) = (None::<String>, 0);
        while len(&out) < budget {
            let (docs, next) = q.page(&*state.store, SCAN_PAGE, token.as_deref()).await?;
            for d in docs {
                scanned += 1;
                let tenant = d.fields.get("tenant").and_then(|t| t.as_str());
                if tenant.is_some_and(|t| passed_over.contains(t)) {
                    continue;
                }
                out.push(d);
                if len(&out) == budget {
                    break;
                }
            }
            match next {
                Some(t) if scanned < SCAN_PER_CALL => token = Some(t),
                _ => break,
            }
        }
        Ok(out)
    }
}

fn len(docs: &[Document]) -> u32 {
    u32::try_from(docs.len()).unwrap_or(u32::MAX)
}
