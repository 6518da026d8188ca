//! Admission: checks a request against the three levels in the spec's
//! order (token, tenant, platform) and answers with the first limit it would
//! exceed, as a [`Refusal`] the API turns into 429 (or 403 for uploaded
//! code switched off) with a detail and a Retry-After.

use mapi_domain::{ResourceClass, Tier, Timestamp};
use serde::Serialize;

use crate::period::{minute_end, seconds_until};
use crate::{KillSwitches, Limits, Period};

/// What is in use now, read by the caller in the same transaction that will
/// reserve. vCPU amounts are in vCPU-milliseconds, charged plus reserved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// In the token budget's current period.
    pub token_vcpu_ms: u64,
    /// Requests of the tenant in the current UTC minute, before this one.
    pub tenant_requests_this_minute: u32,
    pub tenant_active_runs: u32,
    /// In the current UTC day.
    pub tenant_vcpu_ms_day: u64,
    /// In the current UTC month.
    pub tenant_vcpu_ms_month: u64,
    pub tenant_storage_bytes: u64,
    /// Bytes that left for the tenant in the current UTC month.
    pub tenant_egress_bytes_month: u64,
    pub platform_active_runs: u32,
    /// The platform's spend in the spend cap's current period.
    pub platform_spend_micros: i64,
}

/// A token's own compute budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBudget {
    pub vcpu_seconds: u64,
    pub period: Period,
}

/// What the request wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// A run: its class, task count, the vCPU-milliseconds its estimate
    /// reserves, and whether it runs tenant-uploaded plugin code.
    Run { class: ResourceClass, task_count: u32, vcpu_ms: u64, plugin: bool },
    /// An upload of this many bytes.
    Upload { bytes: u64 },
    /// An item job of this many items. Its compute is metered item by item
    /// and reserves nothing up front, so a vCPU limit refuses it once the
    /// limit is spent.
    Job { items: u64 },
    /// A score of a model endpoint. Its compute is metered when it has
    /// been answered, so, as a job, it reserves nothing and a vCPU limit
    /// refuses it once the limit is spent; so does its response's egress.
    /// `plugin`: the revision it goes to runs a plugin's `predict`
    /// (tenant-uploaded code).
    Score { plugin: bool },
    /// Data leaving the platform: a download link or an export of this
    /// many bytes, counted against the tenant's egress of the month.
    Egress { bytes: u64 },
    /// An endpoint made (or its model changed) on instances of `class`
    /// (`GPU` for an L4): the class limit gates it, and, as a job, a
    /// spent vCPU limit or the spend cap refuses it; its instances and
    /// scores are charged as they run.
    /// `instances`: the endpoint's `max_instances`; `held`: those of the
    /// tenant's other endpoints, which `endpoint_instances` limits with it.
    Endpoint { class: ResourceClass, instances: u32, held: u32 },
}

/// The level whose limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Token,
    Tenant,
    Platform,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Token => "token",
            Level::Tenant => "tenant",
            Level::Platform => "platform",
        }
    }
}

/// The answer's error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalCode {
    /// 429 QUOTA_EXCEEDED.
    QuotaExceeded,
    /// 429 RATE_LIMITED.
    RateLimited,
    /// 403 FORBIDDEN: uploaded code is switched off.
    Forbidden,
    /// 413 PAYLOAD_TOO_LARGE: the request itself is over a hard limit (a
    /// job's items), so it can never pass as it is and a retry is pointless.
    TooLarge,
    /// 400 INVALID_ARGUMENT: the request asks for more than its tenant may
    /// ever have at once (a larger class, more tasks): nothing frees up, so
    /// a 429 would have generic clients retry forever.
    OverLimit,
}

impl RefusalCode {
    /// The wire code of the problem answer.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::QuotaExceeded => "QUOTA_EXCEEDED",
            RefusalCode::RateLimited => "RATE_LIMITED",
            RefusalCode::Forbidden => "FORBIDDEN",
            RefusalCode::TooLarge => "PAYLOAD_TOO_LARGE",
            RefusalCode::OverLimit => "INVALID_ARGUMENT",
        }
    }
}

/// The first limit a request would exceed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct Refusal {
    pub level: Level,
    /// The limit's field name: `vcpu_seconds_per_day`, `concurrent_runs`,
    /// `requests_per_minute`, `max_resource_class`, `max_fanout_tasks`,
    /// `storage_bytes`, `budget_vcpu_seconds`, `spend_cap`, `untrusted_execution`
    /// (and `vcpu_seconds_per_month`).
    pub limit: &'static str,
    pub code: RefusalCode,
    /// Seconds until the limit resets; `None` when it never resets by itself
    /// (class, fan-out, storage, the uploaded-code switch) or is not knowable
    /// (a concurrent slot frees when a run ends).
    pub retry_after_s: Option<u64>,
    /// A sentence naming the level, the limit, its value and what is in use,
    /// and when it resets (or that it does not reset / is not knowable).
    pub detail: String,
}

/// Checks the three levels in the spec's order; the first limit the request
/// would exceed refuses it. A request exactly at a limit is admitted.
///
/// 1. Token: the budget, for a run or a job.
/// 2. Tenant (`tenant`, usually [`crate::effective`]): requests per minute;
///    for a run, the largest class, fan-out tasks, concurrent runs, vCPU-seconds
///    per day, then per month; for a job, items per job, then the same
///    vCPU-seconds; for a score, the vCPU-seconds and the egress of the
///    month (refused once spent); for an upload, storage; for a download
///    or an export, the egress of the month.
/// 3. Platform: for a job, items per job; for a run, the uploaded-code
///    switch and `platform.concurrent_runs`; for both, the spend cap, which
///    internal tenants pass.
///
/// Only the limits listed are checked: [`Usage`] carries no platform-wide
/// vCPU, storage or request counts, so the other fields of `platform` have
/// nothing to compare with here.
#[expect(clippy::too_many_arguments, reason = "the three levels' inputs are read separately by the caller")]
pub fn admit(
    now: Timestamp,
    tier: Tier,
    token: Option<&TokenBudget>,
    tenant: &Limits,
    platform: &Limits,
    switches: &KillSwitches,
    usage: &Usage,
    ask: &Ask,
) -> Result<(), Refusal> {
    check_token(now, token, usage, ask)?;
    check_tenant(now, tenant, usage, ask)?;
    check_platform(now, tier, platform, switches, usage, ask)
}

/// What a request asks of a vCPU limit, and how the refusal says it: a
/// run its reservation; a job the least compute there is (one
/// millisecond), so it is refused exactly when the limit is spent.
fn vcpu_ask(ask: &Ask) -> Option<(u64, String)> {
    match ask {
        Ask::Run { vcpu_ms, .. } => {
            Some((*vcpu_ms, format!("this run would reserve {} more", vcpu_s(*vcpu_ms))))
        }
        Ask::Job { .. } => Some((1, "this job needs compute and none is left".to_owned())),
        Ask::Score { .. } => Some((1, "this score needs compute and none is left".to_owned())),
        Ask::Endpoint { .. } => Some((1, "this endpoint needs compute and none is left".to_owned())),
        Ask::Upload { .. } | Ask::Egress { .. } => None,
    }
}

fn check_token(now: Timestamp, token: Option<&TokenBudget>, usage: &Usage, ask: &Ask) -> Result<(), Refusal> {
    let (Some(budget), Some((vcpu_ms, wants))) = (token, vcpu_ask(ask)) else { return Ok(()) };
    if over_vcpu(usage.token_vcpu_ms, vcpu_ms, budget.vcpu_seconds) {
        return Err(refuse(
            Level::Token,
            "budget_vcpu_seconds",
            RefusalCode::QuotaExceeded,
            format!(
                "is {} vCPU-seconds per {}; {} are charged or reserved in this {} (UTC) and {wants}",
                budget.vcpu_seconds,
                budget.period,
                vcpu_s(usage.token_vcpu_ms),
                budget.period,
            ),
            Reset::At { now, boundary: budget.period.end(now) },
        ));
    }
    Ok(())
}

fn check_tenant(now: Timestamp, tenant: &Limits, usage: &Usage, ask: &Ask) -> Result<(), Refusal> {
    let quota = |limit, what, reset| refuse(Level::Tenant, limit, RefusalCode::QuotaExceeded, what, reset);
    if let Some(limit) = tenant.requests_per_minute
        && over(u64::from(usage.tenant_requests_this_minute), 1, u64::from(limit))
    {
        return Err(refuse(
            Level::Tenant,
            "requests_per_minute",
            RefusalCode::RateLimited,
            format!("is {limit}; {} requests were made in this minute", usage.tenant_requests_this_minute),
            Reset::At { now, boundary: minute_end(now) },
        ));
    }
    match ask {
        Ask::Run { class, task_count, .. } => {
            check_class(tenant, *class, "the run asks for")?;
            if let Some(max) = tenant.max_fanout_tasks
                && *task_count > max
            {
                return Err(refuse(
                    Level::Tenant,
                    "max_fanout_tasks",
                    RefusalCode::OverLimit,
                    format!("is {max} and the run has {task_count} tasks"),
                    Reset::Never("use fewer tasks or ask an operator for a larger limit"),
                ));
            }
            if let Some(limit) = tenant.concurrent_runs
                && over(u64::from(usage.tenant_active_runs), 1, u64::from(limit))
            {
                return Err(quota(
                    "concurrent_runs",
                    format!("is {limit} and {} of the tenant's runs are active", usage.tenant_active_runs),
                    Reset::Unknowable("a slot frees when one of the tenant's runs ends"),
                ));
            }
            check_vcpu(now, tenant, usage, ask)?;
        }
        Ask::Job { items } => {
            if let Some(max) = tenant.max_items_per_job
                && *items > max
            {
                return Err(refuse(
                    Level::Tenant,
                    "max_items_per_job",
                    RefusalCode::TooLarge,
                    format!("is {max} and the job has {items} items"),
                    Reset::Never("split the job or ask an operator for a larger limit"),
                ));
            }
            check_vcpu(now, tenant, usage, ask)?;
        }
        Ask::Score { .. } => {
            check_vcpu(now, tenant, usage, ask)?;
            check_egress(now, tenant, usage, 1, "this score's answer would leave more")?;
        }
        Ask::Endpoint { class, instances, held } => {
            check_class(tenant, *class, "the endpoint's instances are")?;
            if let Some(limit) = tenant.endpoint_instances
                && over(u64::from(*held), u64::from(*instances), u64::from(limit))
            {
                return Err(refuse(
                    Level::Tenant,
                    "endpoint_instances",
                    RefusalCode::OverLimit,
                    format!(
                        "is {limit}: the tenant's endpoints hold {held} instances and this one asks for up to {instances}"
                    ),
                    Reset::Never(
                        "lower --max-instances, delete an endpoint, or ask an operator for a larger limit",
                    ),
                ));
            }
            check_vcpu(now, tenant, usage, ask)?;
        }
        Ask::Egress { bytes } => {
            check_egress(now, tenant, usage, *bytes, &format!("this would send {bytes} more"))?;
        }
        Ask::Upload { bytes } => {
            if let Some(limit) = tenant.storage_bytes
                && over(usage.tenant_storage_bytes, *bytes, limit)
            {
                return Err(quota(
                    "storage_bytes",
                    format!(
                        "is {limit} bytes; {} bytes are stored and the upload would add {bytes}",
                        usage.tenant_storage_bytes
                    ),
                    Reset::Never("delete data or ask an operator for a larger limit"),
                ));
            }
        }
    }
    Ok(())
}

/// The tenant's largest class: `class` above it is refused (it never resets by itself).
fn check_class(tenant: &Limits, class: ResourceClass, asks: &str) -> Result<(), Refusal> {
    match tenant.max_resource_class {
        Some(max) if class > max => Err(refuse(
            Level::Tenant,
            "max_resource_class",
            RefusalCode::OverLimit,
            format!("is {max} and {asks} {class}"),
            Reset::Never("use a smaller class or ask an operator for a larger limit"),
        )),
        _ => Ok(()),
    }
}

/// The tenant's egress of the month: `bytes` more would pass it.
fn check_egress(
    now: Timestamp,
    tenant: &Limits,
    usage: &Usage,
    bytes: u64,
    wants: &str,
) -> Result<(), Refusal> {
    let used = usage.tenant_egress_bytes_month;
    match tenant.egress_bytes_per_month {
        Some(limit) if over(used, bytes, limit) => Err(refuse(
            Level::Tenant,
            "egress_bytes_per_month",
            RefusalCode::QuotaExceeded,
            format!("is {limit} bytes; {used} bytes left the platform in this UTC month and {wants}"),
            Reset::At { now, boundary: Period::Month.end(now) },
        )),
        _ => Ok(()),
    }
}

/// The tenant's vCPU-seconds per day, then per month.
fn check_vcpu(now: Timestamp, tenant: &Limits, usage: &Usage, ask: &Ask) -> Result<(), Refusal> {
    let Some((vcpu_ms, wants)) = vcpu_ask(ask) else { return Ok(()) };
    let periods = [
        ("vcpu_seconds_per_day", tenant.vcpu_seconds_per_day, usage.tenant_vcpu_ms_day, Period::Day),
        ("vcpu_seconds_per_month", tenant.vcpu_seconds_per_month, usage.tenant_vcpu_ms_month, Period::Month),
    ];
    for (name, limit, used, period) in periods {
        if let Some(limit) = limit
            && over_vcpu(used, vcpu_ms, limit)
        {
            return Err(refuse(
                Level::Tenant,
                name,
                RefusalCode::QuotaExceeded,
                format!(
                    "is {limit}; {} vCPU-seconds are charged or reserved in this UTC {period} and {wants}",
                    vcpu_s(used)
                ),
                Reset::At { now, boundary: period.end(now) },
            ));
        }
    }
    Ok(())
}

fn check_platform(
    now: Timestamp,
    tier: Tier,
    platform: &Limits,
    switches: &KillSwitches,
    usage: &Usage,
    ask: &Ask,
) -> Result<(), Refusal> {
    if let Ask::Job { items } = ask
        && let Some(max) = platform.max_items_per_job
        && *items > max
    {
        return Err(refuse(
            Level::Platform,
            "max_items_per_job",
            RefusalCode::TooLarge,
            format!("is {max} and the job has {items} items"),
            Reset::Never("split the job"),
        ));
    }
    let plugin = match ask {
        Ask::Run { plugin, .. } | Ask::Score { plugin } => *plugin,
        Ask::Job { .. } | Ask::Endpoint { .. } => false,
        Ask::Upload { .. } | Ask::Egress { .. } => return Ok(()),
    };
    if plugin && !switches.untrusted_execution_enabled {
        return Err(refuse(
            Level::Platform,
            "untrusted_execution",
            RefusalCode::Forbidden,
            "is off: the platform does not run plugin code that a tenant uploaded (runs of plugin methods, \
             scores of plugins' models); built-in methods and models keep working"
                .to_owned(),
            Reset::Never("an operator switches it back on"),
        ));
    }
    if let Some(limit) = platform.concurrent_runs
        && matches!(ask, Ask::Run { .. })
        && over(u64::from(usage.platform_active_runs), 1, u64::from(limit))
    {
        return Err(refuse(
            Level::Platform,
            "concurrent_runs",
            RefusalCode::QuotaExceeded,
            format!("is {limit} and {} runs are active on the platform", usage.platform_active_runs),
            Reset::Unknowable("a slot frees when a run on the platform ends"),
        ));
    }
    if let Some(cap) = switches.spend_cap_micros
        && tier != Tier::Internal
        && usage.platform_spend_micros >= cap
    {
        let period = switches.spend_cap_period;
        return Err(refuse(
            Level::Platform,
            "spend_cap",
            RefusalCode::QuotaExceeded,
            format!(
                "is {cap} micros per UTC {period} and the platform has spent {} micros in this {period}: \
                 no new compute starts",
                usage.platform_spend_micros
            ),
            Reset::At { now, boundary: period.end(now) },
        ));
    }
    Ok(())
}

/// When a refused limit lets the request through again.
enum Reset {
    /// At the end of its period.
    At { now: Timestamp, boundary: Timestamp },
    /// Never by itself; the text says what does.
    Never(&'static str),
    /// When something happens whose time is not knowable; the text says what.
    Unknowable(&'static str),
}

fn refuse(level: Level, limit: &'static str, code: RefusalCode, what: String, reset: Reset) -> Refusal {
    let (retry_after_s, when) = match reset {
        Reset::At { now, boundary } => {
            let s = seconds_until(now, boundary);
            (Some(s), format!("It resets at {boundary}, in {s} s."))
        }
        Reset::Never(what_does) => (None, format!("It does not reset by itself: {what_does}.")),
        Reset::Unknowable(what_does) => {
            (None, format!("It does not reset at a set time: {what_does}, which is not knowable in advance."))
        }
    };
    let detail = format!("The {} limit {limit} {what}. {when}", level.as_str());
    Refusal { level, limit, code, retry_after_s, detail }
}

/// `used + asked > limit`, without overflow.
fn over(used: u64, asked: u64, limit: u64) -> bool {
    u128::from(used) + u128::from(asked) > u128::from(limit)
}

/// `used_ms + asked_ms > limit_s * 1000`, without overflow.
fn over_vcpu(used_ms: u64, asked_ms: u64, limit_s: u64) -> bool {
    u128::from(used_ms) + u128::from(asked_ms) > u128::from(limit_s) * 1_000
}

/// vCPU-milliseconds as vCPU-seconds: `3599.5`, `2`.
fn vcpu_s(ms: u64) -> String {
    let (s, frac) = (ms / 1_000, ms % 1_000);
    if frac == 0 { s.to_string() } else { format!("{s}.{frac:03}").trim_end_matches('0').to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{platform_limits, tier_defaults};

    /// The last UTC day of November, 30 s before both the day and the month end.
    const LAST_SECONDS: &str = "2026-11-30T23:59:30Z";
    /// Mid-month, mid-day.
    const MID: &str = "2026-11-15T12:00:35Z";

    fn at(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).expect("valid RFC 3339")
    }

    fn run(class: ResourceClass, vcpu_ms: u64) -> Ask {
        Ask::Run { class, task_count: 1, vcpu_ms, plugin: false }
    }

    /// The inputs of one admission, defaulting to a verified tenant with
    /// nothing in use, the platform defaults and the switches' defaults.
    struct Case {
        now: Timestamp,
        tier: Tier,
        token: Option<TokenBudget>,
        tenant: Limits,
        platform: Limits,
        switches: KillSwitches,
        usage: Usage,
    }

    impl Case {
        fn new(now: &str) -> Case {
            Case {
                now: at(now),
                tier: Tier::Verified,
                token: None,
                tenant: tier_defaults(Tier::Verified),
                platform: platform_limits(),
                switches: KillSwitches::default(),
                usage: Usage::default(),
            }
        }

        fn tier(mut self, tier: Tier) -> Case {
            self.tier = tier;
            self.tenant = tier_defaults(tier);
            self
        }

        fn admit(&self, ask: &Ask) -> Result<(), Refusal> {
            admit(
                self.now,
                self.tier,
                self.token.as_ref(),
                &self.tenant,
                &self.platform,
                &self.switches,
                &self.usage,
                ask,
            )
        }

        /// The same usage and switches, for a tenant of another tier.
        fn clone_tier(&self, tier: Tier) -> Case {
            Case {
                now: self.now,
                tier,
                token: self.token.clone(),
                tenant: tier_defaults(tier),
                platform: self.platform.clone(),
                switches: self.switches.clone(),
                usage: self.usage.clone(),
            }
        }

        fn refusal(&self, ask: &Ask) -> Refusal {
            self.admit(ask).expect_err("refused")
        }
    }

    fn shape(r: &Refusal) -> (Level, &'static str, RefusalCode, Option<u64>) {
        (r.level, r.limit, r.code, r.retry_after_s)
    }

    use Level::{Platform, Tenant, Token};
    use RefusalCode::{Forbidden, OverLimit, QuotaExceeded, RateLimited, TooLarge};

    #[test]
    fn token_budget_refuses_at_the_token_level_until_its_period_ends() {
        let mut c = Case::new(LAST_SECONDS);
        c.token = Some(TokenBudget { vcpu_seconds: 3_600, period: Period::Day });
        c.usage.token_vcpu_ms = 3_599_000;
        assert_eq!(c.admit(&run(ResourceClass::S, 1_000)), Ok(()), "exactly at the budget");
        let r = c.refusal(&run(ResourceClass::S, 1_001));
        assert_eq!(shape(&r), (Token, "budget_vcpu_seconds", QuotaExceeded, Some(30)));
        assert_eq!(
            r.detail,
            "The token limit budget_vcpu_seconds is 3600 vCPU-seconds per day; 3599 are charged or reserved \
             in this day (UTC) and this run would reserve 1.001 more. It resets at 2026-12-01T00:00:00.000000Z, in 30 s."
        );

        c.token = Some(TokenBudget { vcpu_seconds: 3_600, period: Period::Month });
        assert_eq!(c.refusal(&run(ResourceClass::S, 1_001)).retry_after_s, Some(30));
        c.now = at("2026-12-31T23:00:00Z");
        assert_eq!(c.refusal(&run(ResourceClass::S, 1_001)).retry_after_s, Some(3_600));
        c.now = at(MID);
        assert_eq!(c.refusal(&run(ResourceClass::S, 1_001)).retry_after_s, Some(15 * 86_400 + 43_165));

        // An upload uses no compute.
        assert_eq!(c.admit(&Ask::Upload { bytes: 1 }), Ok(()));
    }

    #[test]
    fn requests_per_minute_are_rate_limited_until_the_next_minute() {
        let mut c = Case::new(MID);
        c.usage.tenant_requests_this_minute = 599;
        assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()), "the 600th request of 600");
        c.usage.tenant_requests_this_minute = 600;
        let r = c.refusal(&run(ResourceClass::S, 1));
        assert_eq!(shape(&r), (Tenant, "requests_per_minute", RateLimited, Some(25)));
        assert!(
            r.detail.contains("is 600; 600 requests") && r.detail.contains("2026-11-15T12:01:00.000000Z")
        );
        assert_eq!(shape(&c.refusal(&Ask::Upload { bytes: 1 })).1, "requests_per_minute");
        c.now = at("2026-11-15T12:00:59.999Z");
        assert_eq!(c.refusal(&Ask::Upload { bytes: 1 }).retry_after_s, Some(1));
        c.now = at("2026-11-15T12:00:00Z");
        assert_eq!(c.refusal(&Ask::Upload { bytes: 1 }).retry_after_s, Some(60));
    }

    #[test]
    fn max_resource_class_refuses_larger_classes_and_never_resets() {
        let c = Case::new(MID);
        assert_eq!(c.admit(&run(ResourceClass::L, 1)), Ok(()));
        for class in [ResourceClass::XL, ResourceClass::GPU] {
            let r = c.refusal(&run(class, 1));
            assert_eq!(shape(&r), (Tenant, "max_resource_class", OverLimit, None));
            assert!(r.detail.contains(&format!("is L and the run asks for {class}")), "{}", r.detail);
            assert!(r.detail.contains("does not reset by itself"), "{}", r.detail);
        }
        let public = Case::new(MID).tier(Tier::Public);
        assert_eq!(public.admit(&run(ResourceClass::S, 1)), Ok(()));
        assert_eq!(public.refusal(&run(ResourceClass::M, 1)).limit, "max_resource_class");
        assert_eq!(Case::new(MID).tier(Tier::Internal).admit(&run(ResourceClass::GPU, 1)), Ok(()));
    }

    #[test]
    fn an_l4_endpoint_is_the_gpu_class_under_the_same_limit() {
        let l4 = Ask::Endpoint { class: ResourceClass::GPU, instances: 1, held: 0 };
        let public = Case::new(MID).tier(Tier::Public);
        assert_eq!(public.admit(&Ask::Endpoint { class: ResourceClass::S, instances: 1, held: 0 }), Ok(()));
        let r = public.refusal(&l4);
        assert_eq!(shape(&r), (Tenant, "max_resource_class", OverLimit, None));
        assert!(r.detail.contains("is S and the endpoint's instances are GPU"), "{}", r.detail);
        assert_eq!(Case::new(MID).tier(Tier::Internal).admit(&l4), Ok(()));
    }

    #[test]
    fn endpoint_instances_counts_what_the_tenants_endpoints_may_scale_to() {
        let ask = |instances, held| Ask::Endpoint { class: ResourceClass::S, instances, held };
        let public = Case::new(MID).tier(Tier::Public);
        assert_eq!(public.admit(&ask(3, 0)), Ok(()));
        assert_eq!(public.admit(&ask(1, 2)), Ok(()));
        let r = public.refusal(&ask(2, 2));
        assert_eq!(shape(&r), (Tenant, "endpoint_instances", OverLimit, None));
        assert!(
            r.detail.contains("is 3: the tenant's endpoints hold 2 instances and this one asks for up to 2")
        );
        assert!(r.detail.contains("lower --max-instances"), "{}", r.detail);
        assert_eq!(Case::new(MID).admit(&ask(20, 0)), Ok(()), "verified: 20");
        assert_eq!(Case::new(MID).refusal(&ask(1, 20)).limit, "endpoint_instances");
        assert_eq!(Case::new(MID).tier(Tier::SelfHostedTrusted).admit(&ask(1000, 1000)), Ok(()), "no limit");
    }

    #[test]
    fn max_fanout_tasks_refuses_more_tasks() {
        let c = Case::new(MID);
        let fan = |task_count| Ask::Run { class: ResourceClass::S, task_count, vcpu_ms: 1, plugin: false };
        assert_eq!(c.admit(&fan(256)), Ok(()));
        let r = c.refusal(&fan(257));
        assert_eq!(shape(&r), (Tenant, "max_fanout_tasks", OverLimit, None));
        assert!(r.detail.contains("is 256 and the run has 257 tasks"), "{}", r.detail);
    }

    #[test]
    fn tenant_concurrent_runs_free_at_an_unknowable_time() {
        let mut c = Case::new(MID);
        c.usage.tenant_active_runs = 19;
        assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()), "19 of 20 active");
        c.usage.tenant_active_runs = 20;
        let r = c.refusal(&run(ResourceClass::S, 1));
        assert_eq!(shape(&r), (Tenant, "concurrent_runs", QuotaExceeded, None));
        assert_eq!(
            r.detail,
            "The tenant limit concurrent_runs is 20 and 20 of the tenant's runs are active. It does not reset \
             at a set time: a slot frees when one of the tenant's runs ends, which is not knowable in advance."
        );
        // Uploads start no run.
        assert_eq!(c.admit(&Ask::Upload { bytes: 1 }), Ok(()));
    }

    #[test]
    fn vcpu_seconds_per_day_resets_at_the_next_utc_midnight() {
        let mut c = Case::new(LAST_SECONDS);
        c.usage.tenant_vcpu_ms_day = 86_399_000;
        c.usage.tenant_vcpu_ms_month = 86_399_000;
        assert_eq!(c.admit(&run(ResourceClass::S, 1_000)), Ok(()), "exactly the day's limit");
        let r = c.refusal(&run(ResourceClass::S, 1_001));
        assert_eq!(shape(&r), (Tenant, "vcpu_seconds_per_day", QuotaExceeded, Some(30)));
        assert!(r.detail.contains("is 86400; 86399 vCPU-seconds") && r.detail.contains("1.001 more"));
        assert!(r.detail.contains("resets at 2026-12-01T00:00:00.000000Z, in 30 s"), "{}", r.detail);
        c.now = at(MID);
        assert_eq!(c.refusal(&run(ResourceClass::S, 1_001)).retry_after_s, Some(43_165));
        c.now = at("2026-11-15T00:00:00Z");
        assert_eq!(c.refusal(&run(ResourceClass::S, 1_001)).retry_after_s, Some(86_400));
    }

    #[test]
    fn vcpu_seconds_per_month_resets_on_the_first_of_next_month() {
        let mut c = Case::new(LAST_SECONDS);
        c.usage.tenant_vcpu_ms_month = 999_999_000;
        assert_eq!(c.admit(&run(ResourceClass::S, 1_000)), Ok(()), "exactly the month's limit");
        let r = c.refusal(&run(ResourceClass::S, 1_001));
        assert_eq!(shape(&r), (Tenant, "vcpu_seconds_per_month", QuotaExceeded, Some(30)));
        assert!(r.detail.contains("resets at 2026-12-01T00:00:00.000000Z, in 30 s"), "{}", r.detail);
        c.now = at(MID);
        assert_eq!(c.refusal(&run(ResourceClass::S, 1_001)).retry_after_s, Some(15 * 86_400 + 43_165));
        c.now = at("2026-12-31T23:00:00Z");
        let r = c.refusal(&run(ResourceClass::S, 1_001));
        assert_eq!(r.retry_after_s, Some(3_600));
        assert!(r.detail.contains("2027-01-01T00:00:00.000000Z"), "{}", r.detail);
    }

    #[test]
    fn egress_per_month_refuses_downloads_and_spent_scores_naming_the_limit() {
        // The public tier sends 5 GiB a month.
        let mut c = Case::new(LAST_SECONDS).tier(Tier::Public);
        let limit = 5 * (1u64 << 30);
        c.usage.tenant_egress_bytes_month = limit - 100;
        assert_eq!(c.admit(&Ask::Egress { bytes: 100 }), Ok(()), "exactly the month's egress");
        let r = c.refusal(&Ask::Egress { bytes: 101 });
        assert_eq!(shape(&r), (Tenant, "egress_bytes_per_month", QuotaExceeded, Some(30)));
        assert!(r.detail.contains(&format!("is {limit} bytes; {} bytes left", limit - 100)), "{}", r.detail);
        assert!(r.detail.contains("resets at 2026-12-01T00:00:00.000000Z"), "{}", r.detail);
        // A score is refused once the month's egress is spent, not before.
        assert_eq!(c.admit(&Ask::Score { plugin: false }), Ok(()));
        c.usage.tenant_egress_bytes_month = limit;
        assert_eq!(shape(&c.refusal(&Ask::Score { plugin: false })).1, "egress_bytes_per_month");
        // Uploads and runs bring data in: egress does not refuse them.
        assert_eq!(c.admit(&Ask::Upload { bytes: 1 }), Ok(()));
        assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()));
        // A tier without an egress limit never refuses it.
        let internal = c.clone_tier(Tier::Internal);
        assert_eq!(internal.admit(&Ask::Egress { bytes: u64::MAX }), Ok(()));
    }

    #[test]
    fn storage_bytes_refuse_uploads_only() {
        let mut c = Case::new(MID).tier(Tier::Public);
        c.usage.tenant_storage_bytes = 2 * (1 << 30) - 100;
        assert_eq!(c.admit(&Ask::Upload { bytes: 100 }), Ok(()), "exactly 2 GiB");
        let r = c.refusal(&Ask::Upload { bytes: 101 });
        assert_eq!(shape(&r), (Tenant, "storage_bytes", QuotaExceeded, None));
        assert!(r.detail.contains("is 2147483648 bytes; 2147483548 bytes are stored"), "{}", r.detail);
        c.usage.tenant_storage_bytes = u64::MAX;
        assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()), "a run is not an upload");
    }

    #[test]
    fn plugin_runs_are_forbidden_only_when_uploaded_code_is_off() {
        let mut c = Case::new(MID);
        let plugin = Ask::Run { class: ResourceClass::S, task_count: 1, vcpu_ms: 1, plugin: true };
        assert_eq!(c.admit(&plugin), Ok(()));
        c.switches.untrusted_execution_enabled = false;
        let r = c.refusal(&plugin);
        assert_eq!(shape(&r), (Platform, "untrusted_execution", Forbidden, None));
        assert!(r.detail.contains("built-in methods and models keep working"), "{}", r.detail);
        assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()), "built-in methods keep working");
        let score = c.refusal(&Ask::Score { plugin: true });
        assert_eq!(
            shape(&score),
            (Platform, "untrusted_execution", Forbidden, None),
            "a plugin's model stops"
        );
        assert_eq!(c.admit(&Ask::Score { plugin: false }), Ok(()), "built-in models keep serving");
        assert_eq!(
            Case { switches: c.switches.clone(), ..Case::new(MID).tier(Tier::Internal) }
                .refusal(&plugin)
                .code,
            Forbidden
        );
    }

    #[test]
    fn platform_concurrent_runs_free_at_an_unknowable_time() {
        let mut c = Case::new(MID).tier(Tier::SelfHostedTrusted);
        c.usage.platform_active_runs = 699;
        assert_eq!(c.admit(&run(ResourceClass::GPU, 1)), Ok(()));
        c.usage.platform_active_runs = 700;
        let r = c.refusal(&run(ResourceClass::GPU, 1));
        assert_eq!(shape(&r), (Platform, "concurrent_runs", QuotaExceeded, None));
        assert!(r.detail.contains("is 700 and 700 runs are active on the platform"), "{}", r.detail);
        assert!(r.detail.contains("not knowable"), "{}", r.detail);
        assert_eq!(c.admit(&Ask::Upload { bytes: 1 }), Ok(()));
    }

    #[test]
    fn spend_cap_stops_all_but_internal_tenants_until_its_period_ends() {
        for &tier in Tier::ALL {
            let mut c = Case::new(LAST_SECONDS).tier(tier);
            c.switches.spend_cap_micros = Some(1_000_000);
            c.usage.platform_spend_micros = 999_999;
            assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()), "{tier} below the cap");
            c.usage.platform_spend_micros = 1_000_000;
            if tier == Tier::Internal {
                assert_eq!(c.admit(&run(ResourceClass::S, 1)), Ok(()), "internal passes the cap");
                continue;
            }
            let r = c.refusal(&run(ResourceClass::S, 1));
            assert_eq!(shape(&r), (Platform, "spend_cap", QuotaExceeded, Some(30)), "{tier}");
            assert!(r.detail.contains("is 1000000 micros per UTC month"), "{}", r.detail);
            assert_eq!(c.admit(&Ask::Upload { bytes: 1 }), Ok(()), "an upload starts no compute");
            c.switches.spend_cap_period = Period::Day;
            c.now = at(MID);
            assert_eq!(c.refusal(&run(ResourceClass::S, 1)).retry_after_s, Some(43_165));
        }
        assert_eq!(Case::new(MID).admit(&run(ResourceClass::S, 1)), Ok(()), "no cap by default");
    }

    #[test]
    fn levels_and_limits_are_checked_in_the_spec_order() {
        let mut c = Case::new(LAST_SECONDS);
        c.token = Some(TokenBudget { vcpu_seconds: 1, period: Period::Day });
        c.switches = KillSwitches {
            untrusted_execution_enabled: false,
            spend_cap_micros: Some(0),
            spend_cap_period: Period::Month,
        };
        c.usage = Usage {
            token_vcpu_ms: 0,
            tenant_requests_this_minute: 600,
            tenant_active_runs: 20,
            tenant_vcpu_ms_day: 86_400_000,
            tenant_vcpu_ms_month: 1_000_000_000,
            tenant_storage_bytes: 0,
            tenant_egress_bytes_month: 0,
            platform_active_runs: 700,
            platform_spend_micros: 0,
        };
        let ask = Ask::Run { class: ResourceClass::GPU, task_count: 1_000, vcpu_ms: 2_000, plugin: true };
        let expected = [
            (Token, "budget_vcpu_seconds"),
            (Tenant, "requests_per_minute"),
            (Tenant, "max_resource_class"),
            (Tenant, "max_fanout_tasks"),
            (Tenant, "concurrent_runs"),
            (Tenant, "vcpu_seconds_per_day"),
            (Tenant, "vcpu_seconds_per_month"),
            (Platform, "untrusted_execution"),
            (Platform, "concurrent_runs"),
            (Platform, "spend_cap"),
        ];
        // Lift each limit once it has refused; the next one in the order answers.
        for (level, limit) in expected {
            let r = c.refusal(&ask);
            assert_eq!((r.level, r.limit), (level, limit));
            match (level, limit) {
                (Token, _) => c.token = None,
                (Tenant, "requests_per_minute") => c.tenant.requests_per_minute = None,
                (Tenant, "max_resource_class") => c.tenant.max_resource_class = None,
                (Tenant, "max_fanout_tasks") => c.tenant.max_fanout_tasks = None,
                (Tenant, "concurrent_runs") => c.tenant.concurrent_runs = None,
                (Tenant, "vcpu_seconds_per_day") => c.tenant.vcpu_seconds_per_day = None,
                (Tenant, "vcpu_seconds_per_month") => c.tenant.vcpu_seconds_per_month = None,
                (Platform, "untrusted_execution") => c.switches.untrusted_execution_enabled = true,
                (Platform, "concurrent_runs") => c.platform.concurrent_runs = None,
                _ => c.switches.spend_cap_micros = None,
            }
        }
        assert_eq!(c.admit(&ask), Ok(()));
    }

    #[test]
    fn token_before_tenant_and_tenant_before_platform() {
        let mut c = Case::new(LAST_SECONDS);
        c.token = Some(TokenBudget { vcpu_seconds: 10, period: Period::Month });
        c.usage.tenant_vcpu_ms_day = 86_400_000;
        assert_eq!(c.refusal(&run(ResourceClass::S, 20_000)).level, Token);

        let mut c = Case::new(MID);
        c.usage.tenant_active_runs = 20;
        c.usage.platform_active_runs = 700;
        let r = c.refusal(&run(ResourceClass::S, 1));
        assert_eq!((r.level, r.limit), (Tenant, "concurrent_runs"));
    }

    #[test]
    fn no_limits_admit_anything_without_overflow() {
        let mut c = Case::new(MID).tier(Tier::SelfHostedTrusted);
        c.platform = Limits::default();
        c.usage = Usage {
            token_vcpu_ms: u64::MAX,
            tenant_requests_this_minute: u32::MAX,
            tenant_active_runs: u32::MAX,
            tenant_vcpu_ms_day: u64::MAX,
            tenant_vcpu_ms_month: u64::MAX,
            tenant_storage_bytes: u64::MAX,
            tenant_egress_bytes_month: u64::MAX,
            platform_active_runs: u32::MAX,
            platform_spend_micros: i64::MAX,
        };
        let big =
            Ask::Run { class: ResourceClass::GPU, task_count: u32::MAX, vcpu_ms: u64::MAX, plugin: true };
        assert_eq!(c.admit(&big), Ok(()));
        assert_eq!(c.admit(&Ask::Upload { bytes: u64::MAX }), Ok(()));
        // The largest limits still refuse sums past them instead of wrapping.
        c.token = Some(TokenBudget { vcpu_seconds: u64::MAX / 1_000, period: Period::Day });
        assert_eq!(c.refusal(&big).limit, "budget_vcpu_seconds");
        c.token = None;
        c.tenant.storage_bytes = Some(u64::MAX);
        assert_eq!(c.refusal(&Ask::Upload { bytes: 1 }).limit, "storage_bytes");
        c.tenant.requests_per_minute = Some(u32::MAX);
        assert_eq!(c.refusal(&Ask::Upload { bytes: 1 }).limit, "requests_per_minute");
    }

    #[test]
    fn wire_names() {
        let codes = [QuotaExceeded, RateLimited, Forbidden, TooLarge].map(RefusalCode::as_str);
        assert_eq!(codes, ["QUOTA_EXCEEDED", "RATE_LIMITED", "FORBIDDEN", "PAYLOAD_TOO_LARGE"]);
        for level in [Token, Tenant, Platform] {
            assert_eq!(serde_json::to_string(&level).expect("json"), format!("\"{}\"", level.as_str()));
        }
        let r = Case::new(MID).tier(Tier::Public).refusal(&run(ResourceClass::GPU, 1));
        assert_eq!(r.to_string(), r.detail);
        assert_eq!(vcpu_s(3_599_500), "3599.5");
        assert_eq!(vcpu_s(2_000), "2");
        assert_eq!(vcpu_s(7), "0.007");
    }

    #[test]
    fn a_score_is_refused_by_the_request_rate_spent_compute_and_the_spend_cap_only() {
        let mut c = Case::new(MID).tier(Tier::Public);
        assert_eq!(c.admit(&Ask::Score { plugin: false }), Ok(()));
        c.usage.tenant_requests_this_minute = 60;
        assert_eq!(
            shape(&c.refusal(&Ask::Score { plugin: false })),
            (Tenant, "requests_per_minute", RateLimited, Some(25))
        );
        c.usage.tenant_requests_this_minute = 0;
        c.usage.tenant_vcpu_ms_day = 3_599_999;
        assert_eq!(c.admit(&Ask::Score { plugin: false }), Ok(()), "a millisecond is left today");
        c.usage.tenant_vcpu_ms_day = 3_600_000;
        let r = c.refusal(&Ask::Score { plugin: false });
        assert_eq!((r.level, r.limit, r.code), (Tenant, "vcpu_seconds_per_day", QuotaExceeded));
        assert!(r.detail.contains("this score needs compute and none is left"), "{}", r.detail);
        c.usage.tenant_vcpu_ms_day = 0;
        c.token = Some(TokenBudget { vcpu_seconds: 10, period: Period::Month });
        c.usage.token_vcpu_ms = 10_000;
        assert_eq!(c.refusal(&Ask::Score { plugin: false }).limit, "budget_vcpu_seconds");
        c.token = None;
        c.switches.spend_cap_micros = Some(100);
        c.usage.platform_spend_micros = 100;
        assert_eq!(c.refusal(&Ask::Score { plugin: false }).limit, "spend_cap");
        c.switches.spend_cap_micros = None;
        // Not a run: no slots, no class, no uploaded code.
        c.switches.untrusted_execution_enabled = false;
        (c.usage.platform_active_runs, c.usage.tenant_active_runs) = (700, 2);
        assert_eq!(c.admit(&Ask::Score { plugin: false }), Ok(()));
    }

    #[test]
    fn a_job_is_refused_by_each_limit_a_run_is_and_by_its_items() {
        let job = Ask::Job { items: 500 };
        let mut c = Case::new(MID).tier(Tier::Public);
        assert_eq!(c.admit(&job), Ok(()));
        assert_eq!(c.admit(&Ask::Job { items: 1_000 }), Ok(()), "exactly at the tier's items per job");
        let r = c.refusal(&Ask::Job { items: 1_001 });
        assert_eq!(shape(&r), (Tenant, "max_items_per_job", TooLarge, None));
        assert!(r.detail.contains("is 1000 and the job has 1001 items"), "{}", r.detail);

        c.usage.tenant_requests_this_minute = 60;
        assert_eq!(shape(&c.refusal(&job)), (Tenant, "requests_per_minute", RateLimited, Some(25)));
        c.usage.tenant_requests_this_minute = 0;

        // A job reserves nothing, so a vCPU limit refuses it once it is spent.
        c.usage.tenant_vcpu_ms_day = 3_599_999;
        assert_eq!(c.admit(&job), Ok(()), "a millisecond is left today");
        c.usage.tenant_vcpu_ms_day = 3_600_000;
        let r = c.refusal(&job);
        assert_eq!((r.level, r.limit, r.code), (Tenant, "vcpu_seconds_per_day", QuotaExceeded));
        assert!(r.detail.contains("this job needs compute and none is left"), "{}", r.detail);
        c.usage.tenant_vcpu_ms_day = 0;
        c.usage.tenant_vcpu_ms_month = 36_000_000;
        assert_eq!(c.refusal(&job).limit, "vcpu_seconds_per_month");
        c.usage.tenant_vcpu_ms_month = 0;

        c.token = Some(TokenBudget { vcpu_seconds: 10, period: Period::Month });
        c.usage.token_vcpu_ms = 10_000;
        assert_eq!(shape(&c.refusal(&job)).0, Token);
        assert_eq!(c.refusal(&job).limit, "budget_vcpu_seconds");
        c.token = None;

        c.switches.spend_cap_micros = Some(100);
        c.usage.platform_spend_micros = 100;
        assert_eq!(c.refusal(&job).limit, "spend_cap");
        assert_eq!(c.clone_tier(Tier::Internal).admit(&job), Ok(()), "internal tenants pass the spend cap");
        c.switches.spend_cap_micros = None;

        // Jobs are built-in methods: the uploaded-code switch and the
        // platform's concurrent runs do not apply.
        c.switches.untrusted_execution_enabled = false;
        c.usage.platform_active_runs = 700;
        c.usage.tenant_active_runs = 2;
        assert_eq!(c.admit(&job), Ok(()));
        c.platform.max_items_per_job = Some(400);
        assert_eq!(shape(&c.refusal(&job)), (Platform, "max_items_per_job", TooLarge, None));
    }
}
