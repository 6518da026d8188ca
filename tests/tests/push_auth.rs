//! Container events reach the platform only through authenticated Pub/Sub
//! push, and nothing forged or replayed gets in.
//!
//! Google is played by a key set server on 127.0.0.1 with an RSA key made
//! for the test (`mapi_tests::google`); pushes are built by hand exactly as
//! Pub/Sub sends them; time is virtual. Attempts are written to the store as
//! the dispatcher writes them (the push route reads only the attempt), so
//! the suite can make as many as it needs, fan-out ones included.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::PublicKeyComponents;
use aws_lc_rs::signature::KeyPair;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{AttemptNo, Nonce, ProjectId, ResourceClass, RunId, TenantId, Timestamp};
use mapi_events::progress::Progress;
use mapi_events::{AttemptKey, Event, EventBody, EventSequencer, task_seq};
use mapi_executor::ExecutionHandle;
use mapi_push_events::EVENTS_PATH;
use mapi_schema::{AttemptDoc, ProgressDoc};
use mapi_store::{Precondition, StoreExt};
use mapi_tests::google::{
    FakeGoogle, GOOGLE_ISSUER, KeySetServer, SUBSCRIPTION, b64url, envelope_of, log_entry, provider,
    push_body, with,
};
use mapi_tests::scripted::Rng;
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const START: Timestamp = Timestamp::from_secs(1_900_000_000);
const SECOND: Duration = Duration::from_secs(1);

/// The platform with push authentication against a fake Google, in virtual time.
struct World {
    google: FakeGoogle,
    clock: Arc<VirtualClock>,
    p: TestPlatform,
}

/// An attempt the dispatcher would have written, and what its worker knows.
struct Attempt {
    run: RunId,
    n: AttemptNo,
    key: AttemptKey,
    execution: String,
    task_count: u32,
}

impl Attempt {
    /// The `mapi_event` object of the `n`-th event of `task`, signed with the attempt's key.
    fn event(&self, task: u32, n: u64, body: EventBody) -> Value {
        let event = Event {
            v: 1,
            run: self.run.clone(),
            attempt: self.n,
            task,
            seq: task_seq(task, n),
            at: START,
            body,
        };
        serde_json::to_value(mapi_events::sign(event, &self.key)).expect("json")
    }

    /// The push of `event` from this attempt's execution.
    fn push(&self, event: &Value, task: u32) -> Value {
        push_body(event, &self.execution, task, "2070443601311540", START)
    }

    fn id(&self) -> String {
        AttemptDoc::id_of(&self.run, self.n)
    }
}

fn run_id(i: u64) -> RunId {
    let mut entropy = [0u8; 10];
    entropy[..8].copy_from_slice(&i.to_be_bytes());
    RunId::generate(START, entropy)
}

impl World {
    async fn start(extra: &[(&str, &str)]) -> World {
        World::start_with(FakeGoogle::start().await, extra, true).await
    }

    async fn start_with(google: FakeGoogle, extra: &[(&str, &str)], push_auth: bool) -> World {
        let clock = Arc::new(VirtualClock::new(START));
        let mut settings: Vec<(&str, String)> = if push_auth { google.settings() } else { vec![] };
        settings.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let options =
            Options { background: false, clock: clock.clone(), executor: None, queue: None, entropy: None };
        let p = TestPlatform::start_with(&settings, options).await;
        World { google, clock, p }
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// POSTs `body` to the push route with `token`; the status and the JSON answer.
    async fn push(&self, token: &str, body: &Value) -> (u16, Value) {
        self.p.call(token, Method::POST, EVENTS_PATH, Some(body.clone())).await
    }

    /// Pushes expecting a 200; the disposition.
    async fn deliver(&self, token: &str, body: &Value) -> String {
        let (s, b) = self.push(token, body).await;
        assert_eq!(s, 200, "{b}");
        b["disposition"].as_str().expect("disposition").to_owned()
    }

    async fn metrics(&self) -> String {
        let r = self.p.http.get(self.p.url("/metrics")).send().await.expect("metrics");
        r.text().await.expect("text")
    }

    /// Writes attempt `n` of `run` as the dispatcher does, with a fresh key.
    async fn attempt(&self, run: &RunId, n: u32, task_count: u32, finalized: bool) -> Attempt {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&self.now().as_micros().to_be_bytes());
        bytes[8..16].copy_from_slice(&u64::from(n).to_be_bytes());
        bytes[16..].copy_from_slice(&run.as_str().as_bytes()[4..20]);
        let key = AttemptKey::from_bytes(bytes);
        let execution = format!("fit-s-{}-a{n}-x7k2p", &run.as_str()[4..14]).to_lowercase();
        let doc = AttemptDoc {
            run: run.clone(),
            tenant: TenantId::parse("dev").expect("tenant"),
            project: ProjectId::parse("default").expect("project"),
            attempt: AttemptNo(n),
            nonce: Nonce::from_bytes(bytes[..16].try_into().expect("16 bytes")),
            class: ResourceClass::S,
            task_count,
            event_key: key.to_hex(),
            created_at: self.now(),
            lease_until: self.now() + Duration::from_secs(60),
            handle: Some(ExecutionHandle(execution.clone())),
            submitted_at: Some(self.now()),
            finished_seen_at: None,
            bootstrapped_at: None,
            taken_unheard: None,
            retiring_at: None,
            started: None,
            finished: None,
            status: None,
            finalized,
            reused: Vec::new(),
            gpus: None,
        };
        let store = &*self.p.platform.state.store;
        let key_of = mapi_schema::key::<AttemptDoc>(&AttemptDoc::id_of(run, AttemptNo(n))).expect("key");
        store.put(&key_of, mapi_store::encode(&doc).expect("encode"), Precondition::None).await.expect("put");
        Attempt { run: run.clone(), n: AttemptNo(n), key, execution, task_count }
    }

    /// The merged progress of an attempt, if any event was applied.
    async fn progress(&self, a: &Attempt) -> Option<Progress> {
        let doc: Option<ProgressDoc> =
            mapi_schema::get(&*self.p.platform.state.store, &a.id()).await.expect("read progress");
        doc.map(|d| d.progress)
    }
}

/// The value of one sample line of `/metrics`, 0 when absent.
fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0, |v| v.trim().parse().expect("a counter"))
}

fn refused(metrics: &str, reason: &str) -> u64 {
    sample(metrics, &format!("mapi_push_auth_refused_total{{reason=\"{reason}\"}}"))
}

fn violations(metrics: &str, kind: &str) -> u64 {
    sample(metrics, &format!("mapi_sandbox_violations_total{{kind=\"{kind}\"}}"))
}

fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let body = STANDARD.encode(der);
    let lines: Vec<&str> =
        body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("ascii")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n")).into_bytes()
}

fn hs256(secret: &[u8], header: &Value, claims: &Value) -> String {
    let input = format!("{}.{}", b64url(header.to_string()), b64url(claims.to_string()));
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    let tag = aws_lc_rs::hmac::sign(&key, input.as_bytes());
    format!("{input}.{}", b64url(tag.as_ref()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genuine_pushes_are_applied_and_a_reused_token_is_verified_once() {
    let w = World::start(&[]).await;
    let a = w.attempt(&run_id(1), 1, 1, false).await;
    let token = w.google.push_token(w.now());
    let started = a.event(0, 0, EventBody::Started);
    assert_eq!(w.deliver(&token, &a.push(&started, 0)).await, "applied");
    assert_eq!(w.deliver(&token, &a.push(&started, 0)).await, "duplicate");
    assert_eq!(w.google.keys.hits(), 1, "the key set was fetched once");

    // Both spellings of Google's issuer are Google's.
    let short_iss =
        w.google.token(&with(&w.google.claims(w.now()), &[("iss", json!("accounts.google.com"))]));
    let e = a.event(0, 1, EventBody::Progress { fraction: 0.25, message: "a quarter".into() });
    assert_eq!(w.deliver(&short_iss, &a.push(&e, 0)).await, "applied");
    // Within the 60 s leeway an expired token still passes.
    let late = w.google.claims(w.now() - Duration::from_secs(3600 + 59));
    let e = a.event(0, 2, EventBody::Metric { name: "loss".into(), value: 0.5 });
    assert_eq!(w.deliver(&w.google.token(&late), &a.push(&e, 0)).await, "applied");
    // `mapi dev`'s log forwarder still pushes with the internal token, from its own subscription.
    let internal = w.p.platform.state.config.secrets.internal_token.clone();
    let e = a.event(0, 3, EventBody::Checkpoint { generation: 7 });
    let entry = log_entry(&e, &a.execution, 0, w.now());
    let local = "projects/local/subscriptions/mapi-run-events-push";
    assert_eq!(
        w.deliver(&internal, &envelope_of(entry.to_string().as_bytes(), local, "3", w.now())).await,
        "applied"
    );

    // An expiry at the end of time is only far away (no overflow).
    let far = w.google.token(&with(&w.google.claims(w.now()), &[("exp", json!(i64::MAX))]));
    let e = a.event(0, 10, EventBody::Metric { name: "far".into(), value: 1.0 });
    assert_eq!(w.deliver(&far, &a.push(&e, 0)).await, "applied");

    // Google withdraws its key for a new one; a token with the new key id
    // makes the platform fetch the new key set...
    let dir = tempfile::tempdir().expect("tempdir");
    let (rotated, _) = provider(&dir, "rotated.key");
    w.google.keys.set_body(rotated.jwks());
    let new_token = rotated.sign(&rotated.header(), &w.google.claims(w.now())).expect("sign");
    let e = a.event(0, 4, EventBody::Output { name: "model.json".into(), size: 10, generation: Some(1) });
    assert_eq!(w.deliver(&new_token, &a.push(&e, 0)).await, "applied");
    assert_eq!(w.google.keys.hits(), 2);
    // ...so a fresh token under the withdrawn key no longer verifies...
    w.clock.advance(SECOND);
    let fresh_old = w.google.push_token(w.now());
    let e = a.event(0, 5, EventBody::Complete { outputs: None });
    let (s, b) = w.push(&fresh_old, &a.push(&e, 0)).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("UNAUTHENTICATED")), "{b}");
    // ...but the token verified at the first push is not verified again until it expires.
    assert_eq!(w.deliver(&token, &a.push(&e, 0)).await, "applied");
    // Once it expires it is checked again, and refused (both keys published again, so for its age).
    let both = json!({"keys": [w.google.idp.jwks()["keys"][0], rotated.jwks()["keys"][0]]});
    w.google.keys.set_body(both);
    w.clock.advance(Duration::from_secs(3600 + 60));
    let (s, b) = w.push(&token, &a.push(&e, 0)).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("UNAUTHENTICATED")), "expired: {b}");

    let p = w.progress(&a).await.expect("progress");
    assert_eq!(p.events(), 7);
    assert!(p.complete());
    assert_eq!(p.checkpoint(), Some(7));
    let m = w.metrics().await;
    assert_eq!(refused(&m, "unknown_key"), 1, "{m}");
    assert_eq!(refused(&m, "expired"), 1, "{m}");
}

/// What one pushed event may cost the store: a budget held as counts (the
/// events path is CPU-bound, so its store work must stay small).
mod event_budget {
    /// Read calls per event: the attempt (its key checks the signature),
    /// then in the merge's transaction its dedupe marker, the attempt again
    /// and its progress in one read.
    pub const READS: u64 = 2;
    pub const DOCUMENTS_READ: u64 = 4;
    /// The progress merge and the dedupe marker: one commit.
    pub const COMMITS: u64 = 1;
    pub const DOCUMENTS_WRITTEN: u64 = 2;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_event_costs_at_most_its_budget() {
    let w = World::start(&[]).await;
    let a = w.attempt(&run_id(7), 1, 1, false).await;
    let token = w.google.push_token(w.now());
    let started = a.event(0, 0, EventBody::Started);
    assert_eq!(w.deliver(&token, &a.push(&started, 0)).await, "applied");
    let store = w.p.platform.state.local.store.clone().expect("the SQLite store");
    let before = store.counts();
    const EVENTS: u64 = 20;
    for n in 1..=EVENTS {
        let e = a.event(0, n, EventBody::Metric { name: "loss".into(), value: 1.0 / n as f64 });
        assert_eq!(w.deliver(&token, &a.push(&e, 0)).await, "applied");
    }
    let after = store.counts();
    let per = |f: fn(&mapi_store::sqlite::StoreCounts) -> u64| (f(&after) - f(&before)).div_ceil(EVENTS);
    let got = [
        ("read calls", per(|c| c.reads), event_budget::READS),
        ("documents read", per(|c| c.documents_read), event_budget::DOCUMENTS_READ),
        ("commits", per(|c| c.commits), event_budget::COMMITS),
        ("documents written", per(|c| c.documents_written), event_budget::DOCUMENTS_WRITTEN),
    ];
    println!("per event: {got:?}");
    let over: Vec<String> = got
        .iter()
        .filter(|(_, n, b)| n > b)
        .map(|(what, n, b)| format!("{what} per event: {n} > {b}"))
        .collect();
    assert!(over.is_empty(), "over budget:\n  {}", over.join("\n  "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_misdirected_tokens_are_refused_before_the_body_and_counted() {
    let w = World::start(&[]).await;
    let a = w.attempt(&run_id(2), 1, 1, false).await;
    let g = &w.google;
    let now = w.now();
    let claims = g.claims(now);
    let kid = g.idp.kid().to_owned();
    let body = a.push(&a.event(0, 0, EventBody::Started), 0);

    let public = g.key.public_key();
    let spki = public.as_der().expect("spki");
    let components = PublicKeyComponents::<Vec<u8>>::from(public);
    let jwks = g.idp.jwks();
    let hs_header = json!({"alg": "HS256", "typ": "JWT", "kid": kid});
    let secrets: Vec<Vec<u8>> = vec![
        spki.as_ref().to_vec(),
        pem("PUBLIC KEY", spki.as_ref()),
        public.as_ref().to_vec(),
        pem("RSA PUBLIC KEY", public.as_ref()),
        components.n.clone(),
        jwks["keys"][0]["n"].as_str().expect("n").as_bytes().to_vec(),
    ];

    // An attacker with their own key, naming where to fetch it.
    let dir = tempfile::tempdir().expect("tempdir");
    let (attacker, _) = provider(&dir, "attacker.key");
    let attacker_keys = KeySetServer::start(attacker.jwks()).await;
    let pointing = json!({
        "alg": "RS256", "typ": "JWT", "kid": attacker.kid(),
        "jku": attacker_keys.url, "x5u": attacker_keys.url,
    });

    let expired = with(&claims, &[("exp", json!(now.as_secs() - 61)), ("iat", json!(now.as_secs() - 3661))]);
    let future = with(&claims, &[("iat", json!(now.as_secs() + 120)), ("exp", json!(now.as_secs() + 3720))]);
    let other_account = "mapi-runner@mapi-prod-control.iam.gserviceaccount.com";
    let none = |h: Value| format!("{}.{}.", b64url(h.to_string()), b64url(claims.to_string()));

    let mut attacks: Vec<(&str, String, u16, &str)> = vec![
        ("alg none", none(json!({"alg": "none", "typ": "JWT", "kid": kid})), 401, "unsupported_algorithm"),
        ("alg None", none(json!({"alg": "None", "kid": kid})), 401, "unsupported_algorithm"),
        (
            "RS512 by Google's key",
            g.idp.sign(&json!({"alg": "RS512", "kid": kid}), &claims).expect("sign"),
            401,
            "unsupported_algorithm",
        ),
        (
            "unknown kid",
            g.idp.sign(&json!({"alg": "RS256", "kid": "0123456789abcdef"}), &claims).expect("sign"),
            401,
            "unknown_key",
        ),
        ("no kid", g.idp.sign(&json!({"alg": "RS256"}), &claims).expect("sign"), 401, "missing_key_id"),
        ("jku and x5u ignored", attacker.sign(&pointing, &claims).expect("sign"), 401, "unknown_key"),
        (
            "another key under Google's kid",
            attacker.sign(&g.idp.header(), &claims).expect("sign"),
            401,
            "bad_signature",
        ),
        ("expired beyond the leeway", g.token(&expired), 401, "expired"),
        ("issued in the future", g.token(&future), 401, "not_yet_valid"),
        (
            "wrong audience",
            g.token(&with(&claims, &[("aud", json!("https://evil.example.com"))])),
            401,
            "wrong_audience",
        ),
        (
            "wrong issuer",
            g.token(&with(&claims, &[("iss", json!("https://evil.example.com"))])),
            401,
            "wrong_issuer",
        ),
        (
            "issuer with a trailing slash",
            g.token(&with(&claims, &[("iss", json!(format!("{GOOGLE_ISSUER}/")))])),
            401,
            "wrong_issuer",
        ),
        (
            "e-mail not verified",
            g.token(&with(&claims, &[("email_verified", json!(false))])),
            401,
            "email_not_verified",
        ),
        (
            "e-mail verified missing",
            g.token(&with(&claims, &[("email_verified", Value::Null)])),
            401,
            "email_not_verified",
        ),
        ("no e-mail", g.token(&with(&claims, &[("email", Value::Null)])), 401, "no_email"),
        (
            "a valid token of another service account",
            g.token(&with(&claims, &[("email", json!(other_account))])),
            403,
            "wrong_service_account",
        ),
        (
            "a person's token",
            g.token(&with(&claims, &[("email", json!("mallory@gmail.com"))])),
            403,
            "wrong_service_account",
        ),
        ("not a JWT", "mapi_not_a_jwt".to_owned(), 401, "token_malformed"),
        ("the internal token of another deployment", "0".repeat(64), 401, "token_malformed"),
    ];
    for secret in &secrets {
        attacks.push((
            "HS256 keyed with the public key",
            hs256(secret, &hs_header, &claims),
            401,
            "unsupported_algorithm",
        ));
    }

    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    for (name, token, status, reason) in &attacks {
        let (s, b) = w.push(token, &body).await;
        let code = if *status == 401 { "UNAUTHENTICATED" } else { "FORBIDDEN" };
        assert_eq!((s, b["code"].as_str()), (*status, Some(code)), "{name}: {b}");
        *expected.entry(reason).or_default() += 1;
    }
    // No credential at all.
    let r = w.p.http.post(w.p.url(EVENTS_PATH)).json(&body).send().await.expect("push");
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    *expected.entry("missing_token").or_default() += 1;
    // A genuine token from a subscription not on the list: refused once the envelope names it.
    let token = g.push_token(now);
    for subscription in [
        "projects/mapi-prod-control/subscriptions/mapi-run-events-pull",
        "projects/attacker/subscriptions/mapi-run-events-push",
    ] {
        let entry = log_entry(&a.event(0, 0, EventBody::Started), &a.execution, 0, now);
        let other = envelope_of(entry.to_string().as_bytes(), subscription, "1", now);
        let (s, b) = w.push(&token, &other).await;
        assert_eq!((s, b["code"].as_str()), (403, Some("FORBIDDEN")), "{subscription}: {b}");
        *expected.entry("subscription_not_allowed").or_default() += 1;
    }

    let m = w.metrics().await;
    for (reason, n) in &expected {
        assert_eq!(refused(&m, reason), *n, "{reason}:\n{m}");
    }
    let total: u64 = m
        .lines()
        .filter(|l| l.starts_with("mapi_push_auth_refused_total{"))
        .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()).expect("value"))
        .sum();
    assert_eq!(total, expected.values().sum::<u64>(), "nothing else was refused:\n{m}");
    assert_eq!(attacker_keys.hits(), 0, "jku/x5u were never followed");
    assert_eq!(w.progress(&a).await, None, "nothing got in");
    // The very event every attack carried is still new to the platform.
    assert_eq!(w.deliver(&token, &body).await, "applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_refused_before_the_body_is_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let w = World::start(&[]).await;
    let header = json!({"alg": "none", "kid": w.google.idp.kid()});
    let forged = format!("{}.{}.", b64url(header.to_string()), b64url(w.google.claims(w.now()).to_string()));
    let addr = w.p.platform.url.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    // Announce a megabyte and send none of it: only an answer given before
    // the body is read can come back.
    let request = format!(
        "POST {EVENTS_PATH} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {forged}\r\n\
         Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut answer))
        .await
        .expect("answered without the body")
        .expect("read");
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert_eq!(refused(&w.metrics().await, "unsupported_algorithm"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_key_ids_fetches_the_key_set_at_most_once_per_30_s() {
    let w = World::start(&[]).await;
    let a = w.attempt(&run_id(3), 1, 1, false).await;
    let body = a.push(&a.event(0, 0, EventBody::Started), 0);
    assert_eq!(w.deliver(&w.google.push_token(w.now()), &body).await, "applied");
    assert_eq!(w.google.keys.hits(), 1);

    let mut rng = Rng::new(30);
    let claims = w.google.claims(w.now());
    // The key id is looked up before any signature is checked, so the flood needs none.
    let mut flood = |n: usize| -> Vec<String> {
        (0..n)
            .map(|_| {
                let header = json!({"alg": "RS256", "typ": "JWT", "kid": format!("{:016x}", rng.next_u64())});
                format!(
                    "{}.{}.{}",
                    b64url(header.to_string()),
                    b64url(claims.to_string()),
                    b64url([1u8; 256])
                )
            })
            .collect()
    };
    // 1,000 at one instant: one refetch.
    for token in flood(1000) {
        let (s, _) = w.push(&token, &body).await;
        assert_eq!(s, 401);
    }
    assert_eq!(w.google.keys.hits(), 2, "one refetch for the whole burst");
    // 1,000 more over 100 virtual seconds: at most one refetch in any 30 s.
    let start = w.now();
    let mut fetched_at = Vec::new();
    for token in flood(1000) {
        w.clock.advance(Duration::from_millis(100));
        let before = w.google.keys.hits();
        let (s, _) = w.push(&token, &body).await;
        assert_eq!(s, 401);
        if w.google.keys.hits() > before {
            fetched_at.push(w.now().since(start));
        }
    }
    assert!(!fetched_at.is_empty() && fetched_at.len() <= 4, "{fetched_at:?}");
    for pair in fetched_at.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_secs(30), "{fetched_at:?}");
    }
    let m = w.metrics().await;
    assert_eq!(refused(&m, "unknown_key"), 2000);
    // Google's own key kept working throughout.
    let e = a.event(0, 1, EventBody::Complete { outputs: None });
    assert_eq!(w.deliver(&w.google.push_token(w.now()), &a.push(&e, 0)).await, "applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_keys_outlive_a_key_set_outage_and_without_them_pushes_are_retried() {
    // Keys already cached: the outage is invisible.
    let w = World::start(&[]).await;
    let a = w.attempt(&run_id(4), 1, 1, false).await;
    assert_eq!(
        w.deliver(&w.google.push_token(w.now()), &a.push(&a.event(0, 0, EventBody::Started), 0)).await,
        "applied"
    );
    w.google.keys.set_failing(true);
    w.clock.advance(Duration::from_secs(3601)); // past the key set's max-age
    let e = a.event(0, 1, EventBody::Complete { outputs: None });
    assert_eq!(w.deliver(&w.google.push_token(w.now()), &a.push(&e, 0)).await, "applied");
    assert_eq!(w.google.keys.hits(), 2, "the stale key set was refreshed, which failed");

    // Nothing cached: refused with a status Pub/Sub retries, accepted once Google is back.
    let w = World::start(&[]).await;
    let a = w.attempt(&run_id(5), 1, 1, false).await;
    w.google.keys.set_failing(true);
    let body = a.push(&a.event(0, 0, EventBody::Started), 0);
    let token = w.google.push_token(w.now());
    let (s, b) = w.push(&token, &body).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("UNAUTHENTICATED")), "{b}");
    assert!(!(200..300).contains(&s), "Pub/Sub redelivers anything but 2xx");
    assert_eq!(refused(&w.metrics().await, "jwks_unavailable"), 1);
    assert_eq!(w.progress(&a).await, None);
    w.google.keys.set_failing(false);
    w.clock.advance(Duration::from_secs(30)); // Pub/Sub's back-off; fetches are retried after 30 s
    assert_eq!(w.deliver(&token, &body).await, "applied", "the redelivery gets in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multi_tenant_profile_refuses_every_push_until_push_authentication_is_configured() {
    let secrets = [
        ("MAPI_PROFILE", "multi-tenant"),
        ("MAPI_INTERNAL_TOKEN", "internal-token-of-this-deployment"),
        ("MAPI_TOKEN_PEPPER", "00112233445566778899aabbccddeeff"),
        ("MAPI_URL_SIGNING_KEY", "ffeeddccbbaa99887766554433221100"),
        // The multi-tenant profile starts no local-process executor; nothing here executes.
        ("MAPI_EXECUTOR", "cloudrun-jobs"),
        ("MAPI_CLOUDRUN_PROJECT", "exec"),
        ("MAPI_CLOUDRUN_ENDPOINT", "http://127.0.0.1:9"),
    ];
    let w = World::start_with(FakeGoogle::start().await, &secrets, false).await;
    let a = w.attempt(&run_id(6), 1, 1, false).await;
    let body = a.push(&a.event(0, 0, EventBody::Started), 0);
    for token in ["internal-token-of-this-deployment".to_owned(), w.google.push_token(w.now())] {
        let (s, b) = w.push(&token, &body).await;
        assert_eq!((s, b["code"].as_str()), (403, Some("FORBIDDEN")), "{b}");
        assert!(b["detail"].as_str().unwrap_or_default().contains("MAPI_PUBSUB_PUSH_AUDIENCE"), "{b}");
    }
    assert_eq!(refused(&w.metrics().await, "not_configured"), 2);
    assert_eq!(w.progress(&a).await, None);

    // Configured: Google's tokens get in, the internal token no longer does.
    let w = World::start_with(FakeGoogle::start().await, &secrets, true).await;
    let a = w.attempt(&run_id(7), 1, 1, false).await;
    let body = a.push(&a.event(0, 0, EventBody::Started), 0);
    let (s, b) = w.push("internal-token-of-this-deployment", &body).await;
    assert_eq!((s, b["code"].as_str()), (401, Some("UNAUTHENTICATED")), "{b}");
    assert_eq!(w.deliver(&w.google.push_token(w.now()), &body).await, "applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_late_events_are_acknowledged_and_change_nothing() {
    let w = World::start(&[]).await;
    let token = w.google.push_token(w.now());
    let (run_a, run_b) = (run_id(8), run_id(9));
    let ended = w.attempt(&run_a, 1, 1, true).await;
    let current = w.attempt(&run_a, 2, 1, false).await;
    let other = w.attempt(&run_b, 1, 1, false).await;
    for a in [&current, &other] {
        let e = a.event(0, 0, EventBody::Progress { fraction: 0.5, message: "half".into() });
        assert_eq!(w.deliver(&token, &a.push(&e, 0)).await, "applied");
    }
    let before = (w.progress(&current).await, w.progress(&other).await, w.progress(&ended).await);

    let finish = |a: &Attempt| a.event(0, 9, EventBody::Complete { outputs: None });
    let mut forged = finish(&current);
    forged["sig"] = json!(hex_of(&[7u8; 32]));
    let mut tampered = finish(&current);
    tampered["kind"] = json!("error");
    tampered["message"] = json!("injected");
    let mut truncated_sig = finish(&current);
    truncated_sig["sig"] = json!(truncated_sig["sig"].as_str().expect("sig")[..40].to_owned());
    let mut into_other_run = finish(&current);
    into_other_run["run"] = json!(run_b.as_str());
    into_other_run["attempt"] = json!(1);
    let mut into_ended_attempt = finish(&current);
    into_ended_attempt["attempt"] = json!(1);
    let mut into_no_attempt = finish(&current);
    into_no_attempt["attempt"] = json!(3);
    let good_line = log_entry(&finish(&current), &current.execution, 0, w.now()).to_string();
    let truncated_entry =
        envelope_of(&good_line.as_bytes()[..good_line.len() / 2], SUBSCRIPTION, "2", w.now());
    let good_body = current.push(&finish(&current), 0).to_string();

    let cases: Vec<(&str, Value, &str)> = vec![
        ("forged HMAC", current.push(&forged, 0), "bad_signature"),
        ("tampered body", current.push(&tampered, 0), "bad_signature"),
        ("truncated signature", current.push(&truncated_sig, 0), "bad_signature"),
        ("truncated log entry", truncated_entry, "malformed"),
        (
            "truncated event",
            current.push(&json!({"v": 1, "run": run_a.as_str(), "attempt": 2}), 0),
            "malformed",
        ),
        ("replayed into another run", other.push(&into_other_run, 0), "bad_signature"),
        ("replayed into an ended attempt", ended.push(&into_ended_attempt, 0), "bad_signature"),
        ("replayed into an attempt that never was", current.push(&into_no_attempt, 0), "unknown_attempt"),
        ("from another execution", other.push(&finish(&current), 0), "wrong_execution"),
        ("after the attempt ended", ended.push(&finish(&ended), 0), "attempt_ended"),
    ];
    for (name, body, disposition) in &cases {
        assert_eq!(&w.deliver(&token, body).await, disposition, "{name}");
    }
    // A body cut off mid-JSON is acknowledged as malformed too.
    let (s, b) = w.p.call(&token, Method::POST, EVENTS_PATH, None).await;
    assert_eq!((s, b["disposition"].as_str()), (200, Some("malformed")), "empty body: {b}");
    let cut =
        w.p.http
            .post(w.p.url(EVENTS_PATH))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(good_body[..good_body.len() - 10].to_owned())
            .send()
            .await
            .expect("push");
    assert_eq!(cut.status(), 200);
    let cut: Value = cut.json().await.expect("json");
    assert_eq!(cut["disposition"], "malformed");

    let after = (w.progress(&current).await, w.progress(&other).await, w.progress(&ended).await);
    assert_eq!(after, before, "0 accepted: no progress changed");
    let m = w.metrics().await;
    assert_eq!(sample(&m, "mapi_events_applied_total"), 2, "{m}");
    for (kind, n) in
        [("bad_signature", 5), ("unknown_attempt", 1), ("wrong_execution", 1), ("attempt_ended", 1)]
    {
        assert_eq!(violations(&m, kind), n, "{kind}:\n{m}");
    }
    assert_eq!(sample(&m, "mapi_push_rejected_total{kind=\"malformed\"}"), 4, "{m}");

    // Each sandbox violation is in the audit log.
    let operator = w.p.login("admin@dev.local").await;
    let (s, log) =
        w.p.call(&operator, Method::GET, "/v1/admin/audit?page_size=200&action=event.refused", None).await;
    assert_eq!(s, 200, "{log}");
    let entries = log["items"].as_array().expect("items");
    assert_eq!(entries.len(), 8, "{log:#}");
    assert!(entries.iter().all(|e| e["outcome"] == "denied"), "{log:#}");

    // The genuine event still applies: it was never taken for a duplicate.
    assert_eq!(w.deliver(&token, &current.push(&finish(&current), 0)).await, "applied");
    assert!(w.progress(&current).await.expect("progress").complete());
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What one task of one attempt prints, in order, as its worker numbers it.
fn task_events(a: &Attempt, task: u32, rng: &mut Rng) -> Vec<Value> {
    let mut seq = EventSequencer::new(a.run.clone(), a.n, task, a.key.clone());
    let mut out = Vec::new();
    let mut emit = |body: EventBody| out.push(serde_json::to_value(seq.next(START, body)).expect("json"));
    emit(EventBody::Started);
    let steps = 1 + rng.below(4);
    for step in 1..=steps {
        let fraction = step as f64 / (steps + 1) as f64;
        emit(EventBody::Progress { fraction, message: format!("task {task}: step {step} of {steps}") });
        emit(EventBody::Metric { name: "loss".into(), value: 1.0 / step as f64 + f64::from(task) });
        if rng.chance(40) {
            emit(EventBody::Checkpoint {
                generation: i64::try_from(1000 * u64::from(task) + step).expect("i64"),
            });
        }
    }
    let generation = i64::try_from(rng.below(1 << 40)).ok();
    emit(EventBody::Output { name: format!("part-{task}.csv"), size: 100 + rng.below(1000), generation });
    if rng.chance(10) {
        emit(EventBody::Error { message: format!("task {task} failed") });
    } else {
        emit(EventBody::Complete { outputs: None });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_100_runs_delivered_1_to_5_times_in_any_order_is_applied_once() {
    let w = World::start(&[]).await;
    let mut rng = Rng::new(6);
    let mut attempts = Vec::new();
    let mut deliveries: Vec<(usize, u32, Value)> = Vec::new();
    let mut expected = Vec::new();
    let mut distinct = 0u64;
    for i in 0..100u64 {
        let task_count = if rng.chance(30) { 2 + u32::try_from(rng.below(3)).expect("u32") } else { 1 };
        let a = w.attempt(&run_id(100 + i), 1, task_count, false).await;
        let mut in_order = Progress::new(task_count);
        let mut seqs = BTreeSet::new();
        for task in 0..task_count {
            for event in task_events(&a, task, &mut rng) {
                let seq = event["seq"].as_u64().expect("seq");
                assert!(seqs.insert(seq), "seq {seq} repeats within the attempt");
                in_order.apply(&mapi_events::verify(&event, &a.key).expect("verifies"));
                distinct += 1;
                for _ in 0..1 + rng.below(5) {
                    deliveries.push((attempts.len(), task, event.clone()));
                }
            }
        }
        expected.push(in_order);
        attempts.push(a);
    }
    rng.shuffle(&mut deliveries);
    let total = deliveries.len() as u64;

    // Pub/Sub pushes concurrently, renewing its token now and then.
    let w = Arc::new(w);
    let attempts = Arc::new(attempts);
    let lanes = 4;
    let mut lane_work: Vec<Vec<(usize, u32, Value)>> = vec![Vec::new(); lanes];
    for (i, d) in deliveries.into_iter().enumerate() {
        lane_work[i % lanes].push(d);
    }
    let mut handles = Vec::new();
    for work in lane_work {
        let (w, attempts) = (w.clone(), attempts.clone());
        handles.push(tokio::spawn(async move {
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            let mut token = w.google.push_token(w.now());
            for (k, (a, task, event)) in work.into_iter().enumerate() {
                if k % 500 == 499 {
                    w.clock.advance(SECOND);
                    token = w.google.push_token(w.now());
                }
                let body = attempts[a].push(&event, task);
                *counts.entry(w.deliver(&token, &body).await).or_default() += 1;
            }
            counts
        }));
    }
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for h in handles {
        for (k, v) in h.await.expect("lane") {
            *counts.entry(k).or_default() += v;
        }
    }
    assert_eq!(counts.get("applied").copied(), Some(distinct), "{counts:?}");
    assert_eq!(counts.get("duplicate").copied().unwrap_or(0), total - distinct, "{counts:?}");
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(total > distinct * 2, "most events were delivered more than once ({total} of {distinct})");

    let mut fanned_out = 0;
    for (a, want) in attempts.iter().zip(&expected) {
        let got = w.progress(a).await.expect("progress");
        assert_eq!(&got, want, "{}: out-of-order, repeated delivery ends as in-order delivery", a.run);
        assert_eq!(got.events(), want.events());
        if a.task_count > 1 {
            fanned_out += 1;
            assert!(
                got.outputs().len() >= usize::try_from(a.task_count).expect("usize"),
                "every task's events kept"
            );
        }
    }
    assert!(fanned_out > 10, "fan-out attempts were exercised: {fanned_out}");
    let m = w.metrics().await;
    assert_eq!(sample(&m, "mapi_events_applied_total"), distinct);
    assert_eq!(sample(&m, "mapi_events_duplicate_total"), total - distinct);
    assert_eq!(w.google.keys.hits(), 1);
}
