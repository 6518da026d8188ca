//! Refused authentications through the `Caller` extractor, against a real
//! (SQLite) store and a virtual clock: an anonymous refusal costs a counter
//! increment and at most one audit entry per source a minute, plus one
//! summary; a known token's refusal is audited every time, naming its owner.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_entropy::SeededEntropy;
use mapi_identity::refusals::{self, RefusalLog};
use mapi_identity::{Caller, IdentityState, Pepper};
use mapi_metrics::Metrics;
use mapi_oidc::Verifier;
use mapi_problem::ProblemCode;
use mapi_schema::{AuditDoc, Doc, TokenDoc};
use mapi_store::sqlite::{Durability, SqliteStore};
use mapi_store::{Query, Store};

/// An identity state on a fresh SQLite store in a temporary directory.
struct TestState {
    store: SqliteStore,
    pepper: Pepper,
    clock: Arc<VirtualClock>,
    entropy: SeededEntropy,
    metrics: Metrics,
    refusals: RefusalLog,
    sessions: Option<Verifier>,
    _dir: tempfile::TempDir,
}

impl IdentityState for TestState {
    fn store(&self) -> &dyn Store {
        &self.store
    }
    fn pepper(&self) -> &Pepper {
        &self.pepper
    }
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }
    fn entropy(&self) -> &dyn mapi_entropy::Entropy {
        &self.entropy
    }
    fn internal_token(&self) -> &str {
        ""
    }
    fn sessions(&self) -> Option<&Verifier> {
        self.sessions.as_ref()
    }
    fn is_operator(&self, _email: &UserId) -> bool {
        false
    }
    fn refusals(&self) -> &RefusalLog {
        &self.refusals
    }
}

const START: &str = "2026-12-01T08:00:10Z";

fn state() -> TestState {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(VirtualClock::new(Timestamp::parse_rfc3339(START).expect("time")));
    let store = SqliteStore::open(&dir.path().join("store.db"), clock.clone(), &[], Durability::Normal)
        .expect("open store");
    let metrics = Metrics::new();
    TestState {
        store,
        pepper: Pepper::new(b"test pepper".to_vec()),
        clock,
        entropy: SeededEntropy::new(1),
        refusals: RefusalLog::new(&metrics),
        metrics,
        sessions: None,
        _dir: dir,
    }
}

/// A verifier that refuses before it would fetch a key (its key set is at
/// an address nothing answers).
fn verifier(clock: Arc<VirtualClock>) -> Verifier {
    let jwks =
        mapi_oidc::JwksCache::new("http://127.0.0.1:9/jwks".into(), reqwest::Client::new(), clock.clone());
    let config = mapi_oidc::VerifierConfig::new(vec!["https://idp.test".into()], "mapi".into());
    Verifier::new(config, jwks, clock)
}

/// Authenticates `bearer` as sent through Google's front end for `client`,
/// after a spoofed `X-Forwarded-For` entry.
async fn call(state: &TestState, bearer: &str, client: &str) -> Result<Caller, mapi_problem::ApiError> {
    let request = axum::http::Request::builder()
        .header("authorization", format!("Bearer {bearer}"))
        .header("x-forwarded-for", format!("198.51.100.66, {client}"))
        .header("user-agent", "attacker/1.0")
        .body(())
        .expect("request");
    let (mut parts, ()) = request.into_parts();
    Caller::from_request_parts(&mut parts, state).await
}

async fn refused(state: &TestState, bearer: &str, client: &str) {
    let e = call(state, bearer, client).await.expect_err("refused");
    assert_eq!(e.code(), ProblemCode::Unauthenticated, "{e}");
}

async fn entries(state: &TestState) -> Vec<AuditDoc> {
    let docs = state.store.query(&Query::new(AuditDoc::COLLECTION), None).await.expect("query audit");
    let mut all: Vec<AuditDoc> = docs.iter().map(|d| d.decode().expect("audit doc")).collect();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    all
}

fn counted(state: &TestState, reason: &str) -> Option<u64> {
    let prefix = format!("mapi_auth_refused_total{{reason=\"{reason}\"}} ");
    let text = state.metrics.render();
    text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|n| n.parse().expect("a count"))
}

fn ip(state: &TestState, client: &str) -> Option<String> {
    Some(state.pepper.short_hash("ip", client))
}

#[tokio::test]
async fn a_thousand_unknown_tokens_from_one_source_make_one_entry_and_one_summary() {
    let s = state();
    for _ in 0..1_000 {
        refused(&s, &mapi_identity::new_token().expect("token"), "203.0.113.7").await;
    }
    let first = entries(&s).await;
    assert_eq!(first.len(), 1, "only the source's first refusal is written during the minute");
    assert_eq!(
        (first[0].action.as_str(), first[0].detail.as_deref()),
        ("token.use_failed", Some("the API token is not valid")),
        "the first entry keeps its detail"
    );
    assert_eq!(first[0].ip_hash, ip(&s, "203.0.113.7"), "the source is the last forwarded entry");
    assert_eq!(counted(&s, "unknown_token"), Some(1_000), "every refusal is counted");

    s.clock.advance(Duration::from_secs(60));
    refusals::flush(&s, s.clock.now()).await;
    let after = entries(&s).await;
    assert_eq!(after.len(), 2, "{after:#?}");
    let summary = &after[1];
    assert_eq!(summary.action, "auth.refused_summary");
    assert_eq!(summary.ip_hash, first[0].ip_hash);
    let detail = summary.detail.as_deref().unwrap_or_default();
    assert!(detail.starts_with("999 more ") && detail.contains("2026-12-01T08:00:00.000000Z"), "{detail}");
    refusals::flush(&s, s.clock.now()).await;
    assert_eq!(entries(&s).await.len(), 2, "a minute is summarised once");
}

#[tokio::test]
async fn every_refusal_of_a_revoked_token_is_audited_naming_its_owner() {
    let s = state();
    let secret = mapi_identity::new_token().expect("token");
    let now = s.clock.now();
    let owner = UserId::parse("owner@test.local").expect("user");
    let token = TokenDoc {
        hash: s.pepper.hash(&secret),
        tenant: TenantId::parse("acme").expect("tenant"),
        project: ProjectId::parse("default").expect("project"),
        user: owner.clone(),
        name: "ci".into(),
        scopes: vec![mapi_access::Scope::Admin],
        created_at: now - Duration::from_secs(3_600),
        expires_at: now + Duration::from_secs(86_400),
        revoked_at: Some(now - Duration::from_secs(60)),
        revoked_by: Some(owner.clone()),
        rate_limit_per_minute: None,
        budget: None,
    };
    let key = token.key().expect("key");
    mapi_store::StoreExt::create(&s.store, &key, mapi_store::encode(&token).expect("fields"))
        .await
        .expect("insert token");
    for _ in 0..10 {
        refused(&s, &secret, "203.0.113.7").await;
    }
    let all = entries(&s).await;
    assert_eq!(all.len(), 10, "a known token's refusals are audited one by one");
    for e in &all {
        assert_eq!(e.detail.as_deref(), Some("the API token was revoked"));
        assert_eq!(e.actor.as_ref(), Some(&owner), "the owner is named");
        assert_eq!(e.tenant.as_ref(), Some(&token.tenant));
        assert_eq!(e.project.as_ref(), Some(&token.project));
        assert_eq!(e.token.as_deref(), Some(token.public_id()));
    }
    assert_eq!(counted(&s, "unknown_token"), None, "not an anonymous refusal");
}

#[tokio::test]
async fn two_sources_in_one_minute_make_two_first_entries_then_summaries_at_the_next_refusal() {
    let s = state();
    for client in ["203.0.113.7", "203.0.113.8"] {
        for _ in 0..5 {
            refused(&s, "not-a-credential", client).await;
        }
    }
    let first = entries(&s).await;
    assert_eq!(first.len(), 2, "{first:#?}");
    let mut sources: Vec<Option<String>> = first.iter().map(|e| e.ip_hash.clone()).collect();
    sources.sort();
    let mut expected = vec![ip(&s, "203.0.113.7"), ip(&s, "203.0.113.8")];
    expected.sort();
    assert_eq!(sources, expected, "one first entry per source");
    assert!(first.iter().all(|e| e.action == "auth.failed"));

    // The next refusal after the minute writes the minute's summaries and its own first entry.
    s.clock.advance(Duration::from_secs(60));
    refused(&s, "not-a-credential", "203.0.113.7").await;
    let after = entries(&s).await;
    assert_eq!(after.len(), 5, "{after:#?}");
    let summaries: Vec<&AuditDoc> = after.iter().filter(|e| e.action == "auth.refused_summary").collect();
    assert_eq!(summaries.len(), 2);
    assert!(summaries.iter().all(|e| e.detail.as_deref().is_some_and(|d| d.starts_with("4 more "))));
    let now = s.clock.now();
    let new_minute: Vec<&AuditDoc> =
        after.iter().filter(|e| e.action == "auth.failed" && e.at == now).collect();
    assert_eq!(new_minute.len(), 1, "the new minute's first entry");
    assert_eq!(new_minute[0].ip_hash, ip(&s, "203.0.113.7"));
    assert_eq!(counted(&s, "not_a_credential"), Some(11));
}

/// The classification, as a table: each anonymous bearer, the counter it
/// is counted under, and the entry its source's first refusal writes.
#[tokio::test]
async fn each_kind_of_anonymous_refusal_is_counted_under_its_reason() {
    let alg_none = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.";
    let cases: [(&str, bool, &str, &str, &str); 5] = [
        ("mapi_0000", false, "unknown_token", "token.use_failed", "not valid"),
        ("hunter2", false, "not_a_credential", "auth.failed", "neither an API token nor a session"),
        ("a.b.c", false, "no_sessions", "auth.session_refused", "not configured"),
        ("a.b.c", true, "bad_session", "auth.session_refused", "(malformed)"),
        (alg_none, true, "bad_session", "auth.session_refused", "(unsupported_algorithm)"),
    ];
    for (i, (bearer, sessions, reason, action, detail)) in cases.into_iter().enumerate() {
        let mut s = state();
        if sessions {
            s.sessions = Some(verifier(s.clock.clone()));
        }
        let client = format!("203.0.113.{i}");
        refused(&s, bearer, &client).await;
        refused(&s, bearer, &client).await;
        assert_eq!(counted(&s, reason), Some(2), "{bearer}");
        let all = entries(&s).await;
        assert_eq!(all.len(), 1, "{bearer}: {all:#?}");
        assert_eq!(all[0].action, action, "{bearer}");
        assert!(
            all[0].detail.as_deref().is_some_and(|d| d.contains(detail)),
            "{bearer}: {:?}",
            all[0].detail
        );
        assert_eq!((all[0].actor.as_ref(), all[0].actor_kind.as_str()), (None, "anonymous"));
    }
}
