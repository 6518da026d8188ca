//! Policies: the checks a model version must pass before it serves traffic.
//!
//! A policy is plain data, stored per project and per tenant. Thresholds
//! are written as people say them (`r_squared >= 0.9`) and kept in that
//! form, so what a reviewer reads is what was checked.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most approvals a policy may require.
pub const MAX_APPROVALS: u32 = 5;
/// The longest a validation may be made to last, in days.
pub const MAX_EXPIRY_DAYS: u32 = 3650;
/// The most thresholds and improvements one policy holds, each.
pub const MAX_RULES: usize = 32;

/// How a metric compares with a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cmp {
    Ge,
    Gt,
    Le,
    Lt,
}

impl Cmp {
    pub fn as_str(self) -> &'static str {
        match self {
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
            Cmp::Le => "<=",
            Cmp::Lt => "<",
        }
    }

    fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Cmp::Ge => value >= bound,
            Cmp::Gt => value > bound,
            Cmp::Le => value <= bound,
            Cmp::Lt => value < bound,
        }
    }
}

/// A metric of the version's run against a bound: `r_squared >= 0.9`.
/// The bound keeps the digits it was written with, so the threshold reads
/// back as written; two thresholds are the same when their metric,
/// operator and value are.
#[derive(Clone, Debug)]
pub struct Threshold {
    pub metric: String,
    pub cmp: Cmp,
    pub bound: f64,
    written: String,
}

impl PartialEq for Threshold {
    fn eq(&self, other: &Threshold) -> bool {
        (&self.metric, self.cmp, self.bound) == (&other.metric, other.cmp, other.bound)
    }
}

impl Threshold {
    pub fn new(metric: &str, cmp: Cmp, bound: f64) -> Threshold {
        Threshold { metric: metric.to_owned(), cmp, bound, written: bound.to_string() }
    }
}

/// Why a policy is refused: the field and what to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct PolicyError {
    pub field: String,
    pub why: String,
}

fn error(field: impl Into<String>, why: impl Into<String>) -> PolicyError {
    PolicyError { field: field.into(), why: why.into() }
}

/// A metric's name as runs report them: 1 to 64 of lowercase letters,
/// digits, `_`, `.`, `/` and `-`, starting with a letter.
fn check_metric(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_./-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a metric name: use 1–64 lowercase letters, digits, `_`, `.`, `/` or `-`, starting with a letter",
            name.chars().take(64).collect::<String>()
        ))
    }
}

impl FromStr for Threshold {
    type Err = String;

    fn from_str(s: &str) -> Result<Threshold, String> {
        let shape = || {
            format!(
                "`{}` is not a threshold: write METRIC OP NUMBER with OP one of >=, >, <=, < (e.g. `r_squared >= 0.9`)",
                s.chars().take(80).collect::<String>()
            )
        };
        // Two-character operators first, so `>=` is not read as `>` and `=0.9`.
        let (at, cmp, len) = [(">=", Cmp::Ge), ("<=", Cmp::Le), (">", Cmp::Gt), ("<", Cmp::Lt)]
            .iter()
            .find_map(|(op, cmp)| s.find(op).map(|at| (at, *cmp, op.len())))
            .ok_or_else(shape)?;
        let metric = s[..at].trim();
        check_metric(metric)?;
        let written = s[at + len..].trim();
        if !plain_number(written) {
            return Err(shape());
        }
        let bound: f64 = written.parse().map_err(|_| shape())?;
        if !bound.is_finite() {
            return Err(format!("the bound of `{metric}` must be a finite number"));
        }
        Ok(Threshold { metric: metric.to_owned(), cmp, bound, written: written.to_owned() })
    }
}

/// `-?D(.D)?([eE][-+]?E)?` with 1–15 digits D in each part and 1–2 in E:
/// what [`THRESHOLD_PATTERN`] allows a bound to be.
fn plain_number(s: &str) -> bool {
    let digits = |p: &str, max: usize| (1..=max).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit());
    let s = s.strip_prefix('-').unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e), 2));
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => digits(whole, 15) && digits(fraction, 15),
        None => digits(mantissa, 15),
    };
    exponent_ok && mantissa_ok
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.metric, self.cmp.as_str(), self.written)
    }
}

impl Serialize for Threshold {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Threshold, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Which way a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

/// The version must beat the version serving now on `metric` by at least
/// `by` (in the metric's own units), in the direction `better`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Improvement {
    #[schema(pattern = "^[a-z][a-z0-9_./-]{0,63}$")]
    pub metric: String,
    #[serde(default)]
    #[schema(minimum = 0)]
    pub by: f64,
    pub better: Better,
}

/// A metric's name, as the API document states it.
pub const METRIC_PATTERN: &str = "^[a-z][a-z0-9_./-]{0,63}$";
/// A threshold, as the API document states it: a metric, an operator and a
/// finite number (at most 15 digits and a two-digit exponent).
pub const THRESHOLD_PATTERN: &str =
    "^[a-z][a-z0-9_./-]{0,63} ?(>=|<=|>|<) ?-?[0-9]{1,15}(\\.[0-9]{1,15})?([eE][-+]?[0-9]{1,2})?$";

fn threshold_list() -> utoipa::openapi::schema::Array {
    let item = utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some(THRESHOLD_PATTERN))
        .description(Some("METRIC OP NUMBER, OP one of >=, >, <=, < (e.g. `r_squared >= 0.9`)"));
    utoipa::openapi::schema::ArrayBuilder::new().items(item).max_items(Some(MAX_RULES)).build()
}

/// What a model version must pass before it serves traffic.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = GovernancePolicy)]
pub struct Policy {
    /// Bounds on metrics of the version's run, e.g. `r_squared >= 0.9`.
    #[serde(default)]
    #[schema(schema_with = threshold_list)]
    pub thresholds: Vec<Threshold>,
    /// Improvements over the version serving now on the endpoint promoted to.
    #[serde(default)]
    #[schema(max_items = 32)]
    pub improvements: Vec<Improvement>,
    /// Reviewers' approvals required (0–5), never the submitter's.
    #[serde(default)]
    #[schema(maximum = 5)]
    pub approvals: u32,
    /// Days a validation admits promotions after it is decided; none: no expiry.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_after_days: Option<u32>,
}

impl Policy {
    /// Refuses a policy that cannot be met or says nothing clearly.
    pub fn check(&self) -> Result<(), PolicyError> {
        if self.thresholds.len() > MAX_RULES || self.improvements.len() > MAX_RULES {
            return Err(error(
                "thresholds",
                format!("at most {MAX_RULES} thresholds and {MAX_RULES} improvements"),
            ));
        }
        for (i, imp) in self.improvements.iter().enumerate() {
            check_metric(&imp.metric).map_err(|why| error(format!("improvements[{i}].metric"), why))?;
            if !imp.by.is_finite() || imp.by < 0.0 {
                return Err(error(format!("improvements[{i}].by"), "a finite number ≥ 0"));
            }
        }
        if self.approvals > MAX_APPROVALS {
            return Err(error("approvals", format!("0 to {MAX_APPROVALS}, not {}", self.approvals)));
        }
        if let Some(days) = self.expires_after_days
            && !(1..=MAX_EXPIRY_DAYS).contains(&days)
        {
            return Err(error("expires_after_days", format!("1 to {MAX_EXPIRY_DAYS} days, not {days}")));
        }
        Ok(())
    }

    /// Whether the policy asks for nothing (no policy governs).
    pub fn is_empty(&self) -> bool {
        self.thresholds.is_empty()
            && self.improvements.is_empty()
            && self.approvals == 0
            && self.expires_after_days.is_none()
    }

    /// The policy in force where `tenant`'s and `project`'s both apply:
    /// every threshold and improvement of both, the larger number of
    /// approvals and the shorter expiry. A project policy can only add to
    /// the tenant's; none of its fields can relax one of the tenant's.
    pub fn combine(tenant: Option<&Policy>, project: Option<&Policy>) -> Policy {
        let mut out = tenant.cloned().unwrap_or_default();
        if let Some(p) = project {
            for t in &p.thresholds {
                if !out.thresholds.contains(t) {
                    out.thresholds.push(t.clone());
                }
            }
            for i in &p.improvements {
                if !out.improvements.contains(i) {
                    out.improvements.push(i.clone());
                }
            }
            out.approvals = out.approvals.max(p.approvals);
            out.expires_after_days = match (out.expires_after_days, p.expires_after_days) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        out
    }

    /// What `required` asks that this policy (a validation's) did not:
    /// none when a validation against `self` also satisfies `required`.
    pub fn lacks(&self, required: &Policy) -> Vec<String> {
        let mut missing: Vec<String> = required
            .thresholds
            .iter()
            .filter(|t| !self.thresholds.contains(t))
            .map(|t| format!("the check `{t}`"))
            .collect();
        missing.extend(
            required
                .improvements
                .iter()
                .filter(|i| !self.improvements.contains(i))
                .map(|i| format!("an improvement of {} on `{}`", i.by, i.metric)),
        );
        if self.approvals < required.approvals {
            missing.push(format!("{} approvals (it had {})", required.approvals, self.approvals));
        }
        if let Some(days) = required.expires_after_days
            && self.expires_after_days.is_none_or(|d| d > days)
        {
            missing.push(format!("an expiry of {days} days"));
        }
        missing
    }
}

/// One automatic check of a validation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckOutcome {
    /// The rule, as the policy states it.
    pub check: String,
    pub passed: bool,
    /// What was found, in words.
    pub detail: String,
}

/// A rule of a policy, for [`evaluate`].
#[derive(Clone, Debug, PartialEq)]
pub enum Check<'a> {
    Threshold(&'a Threshold),
    Improvement(&'a Improvement),
}

/// The automatic checks of `policy` for a version whose run reported
/// `metrics`, against the version serving now (`serving`'s metrics; none
/// when nothing serves yet, and then no improvement can be asked of it).
/// A metric the run did not report fails its check.
pub fn evaluate(
    policy: &Policy,
    metrics: &BTreeMap<String, f64>,
    serving: Option<&BTreeMap<String, f64>>,
) -> Vec<CheckOutcome> {
    let mut out = Vec::new();
    for t in &policy.thresholds {
        let (passed, detail) = match metrics.get(&t.metric) {
            None => (false, format!("the run reported no `{}`", t.metric)),
            Some(v) if v.is_nan() => (false, format!("`{}` is not a number", t.metric)),
            Some(v) => (t.cmp.holds(*v, t.bound), format!("{} = {v}", t.metric)),
        };
        out.push(CheckOutcome { check: t.to_string(), passed, detail });
    }
    for i in &policy.improvements {
        let check = format!("{} better by ≥ {} than the version serving", i.metric, i.by);
        let (passed, detail) = match (metrics.get(&i.metric), serving.map(|s| s.get(&i.metric))) {
            (None, _) => (false, format!("the run reported no `{}`", i.metric)),
            (Some(_), None) => (true, "no version serves yet".to_owned()),
            (Some(_), Some(None)) => (true, format!("the version serving reported no `{}`", i.metric)),
            (Some(new), Some(Some(old))) => {
                let gain = match i.better {
                    Better::Higher => new - old,
                    Better::Lower => old - new,
                };
                (gain >= i.by, format!("{new} against {old} serving (a gain of {gain})"))
            }
        };
        out.push(CheckOutcome { check, passed, detail });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Threshold {
        s.parse().expect("a threshold")
    }

    #[test]
    fn thresholds_read_as_written_and_refuse_what_is_not_one() {
        assert_eq!(t("r_squared >= 0.9"), Threshold::new("r_squared", Cmp::Ge, 0.9));
        assert_eq!(t("g >= -20958219215678E7").to_string(), "g >= -20958219215678E7", "read back as written");
        assert_eq!(t("a >= 0.90"), t("a>=0.9"), "the same value");
        assert_eq!(t("rmse<12").cmp, Cmp::Lt);
        assert_eq!(t("val/acc > 0.5").metric, "val/acc");
        assert_eq!(t("aic <= -3.5").bound, -3.5);
        assert_eq!(t("r_squared >= 0.9").to_string(), "r_squared >= 0.9");
        for bad in
            ["r_squared", ">= 0.9", "R2 >= 0.9", "r_squared >= high", "r_squared >= inf", "r_squared == 1"]
        {
            assert!(bad.parse::<Threshold>().is_err(), "{bad}");
        }
        let json: Policy =
            serde_json::from_str(r#"{"thresholds": ["r_squared >= 0.9"], "approvals": 1}"#).expect("policy");
        assert_eq!(serde_json::to_value(&json).expect("json")["thresholds"][0], "r_squared >= 0.9");
        assert!(serde_json::from_str::<Policy>(r#"{"thresholds": ["nope"]}"#).is_err());
    }

    #[test]
    fn every_threshold_the_document_allows_parses_to_a_finite_bound() {
        let pattern = regex::Regex::new(THRESHOLD_PATTERN).expect("pattern");
        let metric = regex::Regex::new(METRIC_PATTERN).expect("pattern");
        let longest = format!("{}>={}.{}e-99", "a".repeat(64), "9".repeat(15), "9".repeat(15));
        for s in ["a>=0", "val/acc < -1", "r2 >1E99", "x.y-z_1<= 000.5", longest.as_str()] {
            assert!(pattern.is_match(s), "{s}");
            let t: Threshold = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(t.bound.is_finite() && metric.is_match(&t.metric), "{s}");
        }
        for s in ["A>=0", "a=>0", "a >= 1e999", "a >= inf", "a  >= 1"] {
            assert!(!pattern.is_match(s), "{s}");
        }
    }

    #[test]
    fn a_policy_that_cannot_be_met_is_refused_naming_its_field() {
        let too_many = Policy { approvals: 6, ..Policy::default() };
        assert_eq!(too_many.check().expect_err("refused").field, "approvals");
        let never = Policy { expires_after_days: Some(0), ..Policy::default() };
        assert_eq!(never.check().expect_err("refused").field, "expires_after_days");
        let backwards = Policy {
            improvements: vec![Improvement { metric: "rmse".into(), by: -1.0, better: Better::Lower }],
            ..Policy::default()
        };
        assert_eq!(backwards.check().expect_err("refused").field, "improvements[0].by");
        assert!(Policy::default().check().is_ok() && Policy::default().is_empty());
    }

    #[test]
    fn a_project_policy_only_adds_to_the_tenants() {
        let tenant = Policy {
            thresholds: vec![t("r_squared >= 0.9")],
            approvals: 2,
            expires_after_days: Some(30),
            ..Policy::default()
        };
        let project = Policy {
            thresholds: vec![t("rmse < 5"), t("r_squared >= 0.9")],
            approvals: 1,
            expires_after_days: Some(90),
            ..Policy::default()
        };
        let both = Policy::combine(Some(&tenant), Some(&project));
        assert_eq!(both.thresholds, vec![t("r_squared >= 0.9"), t("rmse < 5")]);
        assert_eq!((both.approvals, both.expires_after_days), (2, Some(30)), "the stricter of each");
        assert!(both.lacks(&tenant).is_empty() && both.lacks(&project).is_empty());
        assert_eq!(Policy::combine(None, Some(&project)), project);
        assert_eq!(Policy::combine(None, None), Policy::default());
        let missing = project.lacks(&both);
        assert_eq!(missing, ["2 approvals (it had 1)", "an expiry of 30 days"]);
    }

    #[test]
    fn checks_pass_fail_and_say_what_they_found() {
        let policy = Policy {
            thresholds: vec![t("r_squared >= 0.9"), t("rmse < 5")],
            improvements: vec![Improvement { metric: "r_squared".into(), by: 0.01, better: Better::Higher }],
            ..Policy::default()
        };
        let metrics = BTreeMap::from([("r_squared".to_owned(), 0.95)]);
        let first = evaluate(&policy, &metrics, None);
        assert_eq!(first.iter().map(|c| c.passed).collect::<Vec<_>>(), [true, false, true]);
        assert_eq!(first[1].detail, "the run reported no `rmse`");
        assert_eq!(first[2].detail, "no version serves yet");
        let serving = BTreeMap::from([("r_squared".to_owned(), 0.945)]);
        let against = evaluate(&policy, &metrics, Some(&serving));
        assert!(!against[2].passed, "a gain of 0.005 is under 0.01: {:?}", against[2]);
        let lower = Policy {
            improvements: vec![Improvement { metric: "rmse".into(), by: 1.0, better: Better::Lower }],
            ..Policy::default()
        };
        let new = BTreeMap::from([("rmse".to_owned(), 3.0)]);
        let old = BTreeMap::from([("rmse".to_owned(), 4.5)]);
        assert!(evaluate(&lower, &new, Some(&old))[0].passed, "lower is better: 1.5 gained");
    }
}
