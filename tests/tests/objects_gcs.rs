//! The Cloud Storage adapter (`mapi-gcs`) against fake-gcs-server: the
//! ObjectStore conformance suite, V4 signed URLs and POST policies checked
//! by the verifying front, both signers (a JSON key and `signBlob`), and
//! puts whose answer was lost.
//!
//! Not provable here, and proven elsewhere:
//! - the conformance case `deletes`: fake-gcs-server ignores
//!   `ifGenerationMatch` on DELETE (it deletes whatever is live), so
//!   deletes under a precondition are proven on the local store's suite
//!   and, for this adapter, only against real Cloud Storage. The deletes
//!   fake-gcs can answer are in `deletes_without_preconditions`.

use std::time::Duration;

use bytes::Bytes;
use mapi_gcs::signing::KeySigner;
use mapi_gcs::{Credentials, GcsObjectStore, Settings, SignerSettings};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey, ObjectStore, SignedMethod};
use mapi_tests::fake_gcs::{FakeGcs, Fault, GcsProxy};
use mapi_tests::gcs_front::{FakeSignBlob, SigningFront, TestAccount, form_body};

const BUCKET: &str = "mapi-test-data";
const API: &str = "api@fake.iam.gserviceaccount.com";
const UPLOADER: &str = "uploader@fake.iam.gserviceaccount.com";

/// Everything a test runs against; dropped at its end.
#[derive(Debug)]
struct Env {
    /// Kept for the test's length: dropping it kills the fake.
    _fake: FakeGcs,
    /// What the store talks to: fake-gcs behind [`GcsProxy`].
    proxy: GcsProxy,
    front: SigningFront,
    sign_blob: FakeSignBlob,
    api: TestAccount,
    keys: tempfile::TempDir,
}

impl Env {
    async fn start() -> Env {
        let api = TestAccount::new(API, true);
        let uploader = TestAccount::new(UPLOADER, false);
        let fake = FakeGcs::start(BUCKET).await;
        let proxy = GcsProxy::start(&fake.url).await;
        let front = SigningFront::start(&fake.url, vec![api.clone(), uploader.clone()]).await;
        let sign_blob = FakeSignBlob::start(vec![api.clone(), uploader.clone()]).await;
        let keys = tempfile::tempdir().expect("tempdir");
        for a in [&api, &uploader] {
            std::fs::write(keys.path().join(format!("{}.json", a.email)), a.key_file_json())
                .expect("key file");
        }
        Env { _fake: fake, proxy, front, sign_blob, api, keys }
    }

    fn key_file(&self, email: &str) -> SignerSettings {
        SignerSettings::KeyFile(self.keys.path().join(format!("{email}.json")))
    }

    /// Settings towards `endpoint`, URLs signed with the API account's key,
    /// POST policies with the uploader's.
    fn settings(&self, endpoint: &str) -> Settings {
        Settings {
            endpoint: Some(endpoint.to_owned()),
            url_base: self.front.url.clone(),
            signer: Some(self.key_file(API)),
            uploader: Some(self.key_file(UPLOADER)),
            iam_credentials_endpoint: Some(self.sign_blob.url.clone()),
            ..Settings::new(BUCKET)
        }
    }

    async fn store_with(&self, settings: Settings) -> GcsObjectStore {
        GcsObjectStore::new(settings, Credentials::Anonymous).await.expect("store")
    }

    async fn store(&self) -> GcsObjectStore {
        self.store_with(self.settings(&self.proxy.url)).await
    }
}

async fn conformance_store() -> (Env, GcsObjectStore) {
    let env = Env::start().await;
    let store = env.store().await;
    (env, store)
}

// Every case but `deletes` and `a_retried_pinned_delete_never_deletes_a_newer_object`
// (fake-gcs-server ignores `ifGenerationMatch` on DELETE, see the file's doc).
mapi_objects::objects_conformance_suite!(@cases conformance_store().await;
    create_only_writes, generation_preconditions, pinned_reads, listing_by_prefix_in_pages,
    a_refused_put_writes_nothing_and_its_retry_creates_once,
    a_lost_create_only_put_has_applied_and_its_retry_tells_by_the_bytes,
    a_lost_pinned_put_has_applied_and_its_retry_is_refused,
    a_lost_unconditional_put_has_applied_and_its_retry_writes_again,
    a_refused_delete_leaves_the_object_and_its_retry_deletes,
    a_lost_delete_has_applied_and_its_retry_answers_not_found);

fn key(s: &str) -> ObjectKey {
    ObjectKey::parse(s).expect("key")
}

#[tokio::test]
async fn deletes_without_preconditions() {
    let (_env, s) = conformance_store().await;
    assert!(matches!(s.delete(&key("t/x/none"), IfGeneration::Any).await, Err(ObjectError::NotFound(_))));
    s.put(&key("t/x/a"), Bytes::from_static(b"1"), "text/plain", IfGeneration::ABSENT).await.expect("create");
    s.delete(&key("t/x/a"), IfGeneration::Any).await.expect("delete");
    assert!(matches!(s.get(&key("t/x/a"), None).await, Err(ObjectError::NotFound(_))));
    assert!(matches!(s.head(&key("t/x/a")).await, Err(ObjectError::NotFound(_))));
}

#[tokio::test]
async fn a_page_token_from_another_prefix_is_refused() {
    let (_env, s) = conformance_store().await;
    for k in ["t/a/1", "t/a/2", "t/a/3"] {
        s.put(&key(k), Bytes::from_static(b"x"), "text/plain", IfGeneration::ABSENT).await.expect("put");
    }
    let page = s.list("t/a/", None, 1).await.expect("list");
    let token = page.next_page_token.expect("more pages");
    assert!(matches!(s.list("t/b/", Some(&token), 1).await, Err(ObjectError::InvalidArgument(_))));
    assert_eq!(s.list("t/a/", Some(&token), 5).await.expect("next page").objects.len(), 2);
}

async fn body_of(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

#[tokio::test]
async fn signed_get_put_and_create_only_put_through_the_verifying_front() {
    let (env, s) = conformance_store().await;
    let http = reqwest::Client::new();
    let ttl = Duration::from_secs(300);
    s.put(&key("t/in/data.csv"), Bytes::from_static(b"a,b\n1,2\n"), "text/csv", IfGeneration::ABSENT)
        .await
        .expect("put");

    let get = s.signed_url(SignedMethod::Get, &key("t/in/data.csv"), ttl).await.expect("sign");
    assert!(
        get.starts_with(&format!(
            "{}/{BUCKET}/t/in/data.csv?X-Goog-Algorithm=GOOG4-RSA-SHA256",
            env.front.url
        ))
    );
    let (status, body) = body_of(http.get(&get).send().await.expect("get")).await;
    assert_eq!((status, body.as_str()), (200, "a,b\n1,2\n"));

    let put = s.signed_url(SignedMethod::Put, &key("t/ckpt/state.json"), ttl).await.expect("sign");
    for content in ["{\"step\":1}", "{\"step\":2}"] {
        let r = http
            .put(&put)
            .header("content-type", "application/json")
            .body(content)
            .send()
            .await
            .expect("put");
        assert_eq!(r.status(), 200, "a plain signed PUT replaces");
    }
    let (_, stored) = s.get(&key("t/ckpt/state.json"), None).await.expect("get");
    assert_eq!(&stored[..], b"{\"step\":2}");

    let create =
        s.signed_url(SignedMethod::PutCreateOnly, &key("t/out/model.json"), ttl).await.expect("sign");
    assert!(create.contains("X-Goog-SignedHeaders=host%3Bx-goog-if-generation-match"), "{create}");
    let send = |body: &'static str, header: bool| {
        let mut r = http.put(&create).header("content-type", "application/json").body(body);
        if header {
            r = r.header("x-goog-if-generation-match", "0");
        }
        r.send()
    };
    let (status, body) = body_of(send("{}", false).await.expect("put")).await;
    assert_eq!(status, 403, "the signed precondition header must be sent: {body}");
    assert!(body.contains("<Code>SignatureDoesNotMatch</Code>"), "{body}");
    assert_eq!(send("{\"v\":1}", true).await.expect("put").status(), 200);
    let (status, body) = body_of(send("{\"v\":2}", true).await.expect("put")).await;
    assert_eq!(status, 412, "a create-only URL cannot overwrite: {body}");
    assert!(body.contains("<Code>PreconditionFailed</Code>"), "{body}");
    let (_, stored) = s.get(&key("t/out/model.json"), None).await.expect("get");
    assert_eq!(&stored[..], b"{\"v\":1}");
}

#[tokio::test]
async fn expired_tampered_and_foreign_urls_are_refused() {
    let (env, s) = conformance_store().await;
    let http = reqwest::Client::new();
    s.put(&key("t/a/x"), Bytes::from_static(b"secret"), "text/plain", IfGeneration::ABSENT)
        .await
        .expect("put");
    s.put(&key("t/a/y"), Bytes::from_static(b"other"), "text/plain", IfGeneration::ABSENT)
        .await
        .expect("put");
    let signer = KeySigner::from_json(&env.api.key_file_json()).expect("signer");
    let req = mapi_gcs::v4::UrlRequest {
        method: "GET",
        base: &env.front.url,
        bucket: BUCKET,
        object: "t/a/x",
        headers: &[],
        expires_in: Duration::from_secs(60),
    };
    let now = time::OffsetDateTime::now_utc();

    let fresh = mapi_gcs::v4::sign_url(&signer, &req, now).await.expect("sign");
    assert_eq!(body_of(http.get(&fresh).send().await.expect("get")).await, (200, "secret".to_owned()));

    let expired =
        mapi_gcs::v4::sign_url(&signer, &req, now - time::Duration::minutes(2)).await.expect("sign");
    let (status, body) = body_of(http.get(&expired).send().await.expect("get")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("<Code>ExpiredToken</Code>"), "{body}");

    let tampered =
        [fresh.replace("/t/a/x?", "/t/a/y?"), fresh.replace("X-Goog-Expires=60", "X-Goog-Expires=600"), {
            let (head, sig) = fresh.rsplit_once("X-Goog-Signature=").expect("signature");
            let flipped = if sig.starts_with('0') { "1" } else { "0" };
            format!("{head}X-Goog-Signature={flipped}{}", &sig[1..])
        }];
    for url in &tampered {
        let (status, body) = body_of(http.get(url).send().await.expect("get")).await;
        assert_eq!(status, 403, "{url}: {body}");
        assert!(body.contains("<Code>SignatureDoesNotMatch</Code>"), "{body}");
    }
    let (status, _) = body_of(http.put(&fresh).body("x").send().await.expect("put")).await;
    assert_eq!(status, 403, "a GET URL does not allow a PUT");

    let stranger = TestAccount::new("stranger@elsewhere.iam.gserviceaccount.com", true);
    let foreign = KeySigner::from_json(&stranger.key_file_json()).expect("signer");
    let url = mapi_gcs::v4::sign_url(&foreign, &req, now).await.expect("sign");
    assert_eq!(http.get(&url).send().await.expect("get").status(), 403);
    let (_, stored) = s.get(&key("t/a/y"), None).await.expect("get");
    assert_eq!(&stored[..], b"other");
}

#[tokio::test]
async fn a_post_policy_uploads_once_and_cannot_overwrite() {
    let (env, s) = conformance_store().await;
    let http = reqwest::Client::new();
    let k = key("t/in/upload.csv");
    let post = |bytes: &'static [u8]| {
        let (s, http) = (s.clone(), http.clone());
        let k = k.clone();
        async move {
            let policy = s.post_policy(&k, 16, Duration::from_secs(300)).await.expect("policy");
            let (content_type, body) = form_body(&policy.fields, bytes);
            body_of(
                http.post(&policy.url)
                    .header("content-type", content_type)
                    .body(body)
                    .send()
                    .await
                    .expect("post"),
            )
            .await
        }
    };
    assert_eq!(post(b"x,y\n1,2\n").await.0, 204);
    let (_, stored) = s.get(&k, None).await.expect("get");
    assert_eq!(&stored[..], b"x,y\n1,2\n");

    let (status, body) = post(b"3,4\n").await;
    assert_eq!(status, 403, "the uploader may not replace: {body}");
    assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
    let (status, body) = post(b"0123456789abcdefXYZ").await;
    assert_eq!(status, 403, "over content-length-range: {body}");
    let (_, stored) = s.get(&k, None).await.expect("get");
    assert_eq!(&stored[..], b"x,y\n1,2\n", "the first upload stays");

    let policy = s.post_policy(&key("t/in/other.csv"), 16, Duration::from_secs(300)).await.expect("policy");
    let mut fields = policy.fields.clone();
    for f in &mut fields {
        if f.0 == "key" {
            f.1 = "t/in/elsewhere.csv".to_owned();
        }
    }
    let (content_type, body) = form_body(&fields, b"1");
    let r =
        http.post(&policy.url).header("content-type", content_type).body(body).send().await.expect("post");
    assert_eq!(r.status(), 403, "the policy names its key");
    drop(env);
}

#[tokio::test]
async fn sign_blob_signs_verifiable_urls_and_its_throttling_is_unavailable() {
    let env = Env::start().await;
    let s = env
        .store_with(Settings {
            signer: Some(SignerSettings::SignBlob(API.to_owned())),
            uploader: Some(SignerSettings::SignBlob(UPLOADER.to_owned())),
            ..env.settings(&env.proxy.url)
        })
        .await;
    let http = reqwest::Client::new();
    s.put(&key("t/a/x"), Bytes::from_static(b"hello"), "text/plain", IfGeneration::ABSENT)
        .await
        .expect("put");
    let url = s.signed_url(SignedMethod::Get, &key("t/a/x"), Duration::from_secs(60)).await.expect("sign");
    assert_eq!(body_of(http.get(&url).send().await.expect("get")).await, (200, "hello".to_owned()));
    assert_eq!(env.sign_blob.calls(), 1);

    for status in [axum::http::StatusCode::TOO_MANY_REQUESTS, axum::http::StatusCode::SERVICE_UNAVAILABLE] {
        env.sign_blob.fail_next(status);
        let r = s.signed_url(SignedMethod::Get, &key("t/a/x"), Duration::from_secs(60)).await;
        assert!(matches!(r, Err(ObjectError::Unavailable(_))), "{status}: {r:?}");
    }
    let policy = s.post_policy(&key("t/in/u.csv"), 100, Duration::from_secs(60)).await.expect("policy");
    let (content_type, body) = form_body(&policy.fields, b"1,2\n");
    let r =
        http.post(&policy.url).header("content-type", content_type).body(body).send().await.expect("post");
    assert_eq!(r.status(), 204);

    let unknown = env
        .store_with(Settings {
            signer: Some(SignerSettings::SignBlob("nobody@fake.iam.gserviceaccount.com".to_owned())),
            ..env.settings(&env.proxy.url)
        })
        .await;
    let r = unknown.signed_url(SignedMethod::Get, &key("t/a/x"), Duration::from_secs(60)).await;
    assert!(matches!(r, Err(ObjectError::Internal(ref m)) if m.to_string().contains("403")), "{r:?}");
}

#[tokio::test]
async fn a_lost_answer_then_412_is_success_when_the_stored_crc_is_ours() {
    let env = Env::start().await;
    let (proxy, s) = (&env.proxy, env.store().await);
    proxy.fail_next(Fault::LoseAnswer);
    let meta = s
        .put(
            &key("t/out/result.json"),
            Bytes::from_static(b"{\"ok\":true}"),
            "application/json",
            IfGeneration::ABSENT,
        )
        .await
        .expect("the first attempt stored our bytes");
    assert_eq!(proxy.uploads(), 2, "one upload whose answer was lost, one retry");
    let (live, bytes) = s.get(&key("t/out/result.json"), None).await.expect("get");
    assert_eq!((live.generation, &bytes[..]), (meta.generation, &b"{\"ok\":true}"[..]));
}

#[tokio::test]
async fn a_lost_answer_then_412_is_precondition_failed_when_other_bytes_are_stored() {
    let env = Env::start().await;
    let (proxy, s) = (&env.proxy, env.store().await);
    proxy.fail_next(Fault::LoseAnswerAfterAnotherWrite {
        key: "t/out/result.json".to_owned(),
        bytes: b"{\"ok\":false}",
    });
    let r = s
        .put(
            &key("t/out/result.json"),
            Bytes::from_static(b"{\"ok\":true}"),
            "application/json",
            IfGeneration::ABSENT,
        )
        .await;
    assert!(matches!(r, Err(ObjectError::PreconditionFailed(_))), "{r:?}");
    assert_eq!(proxy.uploads(), 2);
    let (_, bytes) = s.get(&key("t/out/result.json"), None).await.expect("get");
    assert_eq!(&bytes[..], b"{\"ok\":false}", "the other writer's object stays");
}

#[tokio::test]
async fn a_put_with_no_answer_twice_is_unavailable() {
    let env = Env::start().await;
    let (proxy, s) = (&env.proxy, env.store().await);
    proxy.fail_next(Fault::LoseAnswer);
    proxy.fail_next(Fault::LoseAnswer);
    let r = s.put(&key("t/a/x"), Bytes::from_static(b"1"), "text/plain", IfGeneration::ABSENT).await;
    assert!(matches!(r, Err(ObjectError::Unavailable(_))), "nothing says what was stored: {r:?}");
    assert_eq!(proxy.uploads(), 2, "retried once, not more");
}

#[tokio::test]
async fn an_answer_whose_crc32c_is_not_ours_fails_the_put() {
    let env = Env::start().await;
    let s = env.store().await;
    env.proxy.fail_next(Fault::CorruptCrc32c);
    let r = s.put(&key("t/a/x"), Bytes::from_static(b"1"), "text/plain", IfGeneration::ABSENT).await;
    assert!(
        matches!(r, Err(ObjectError::Internal(ref m)) if m.to_string().to_lowercase().contains("checksum") || m.to_string().contains("CRC32C")),
        "{r:?}"
    );
    assert_eq!(env.proxy.uploads(), 1, "an integrity failure is not retried");
}

#[tokio::test]
async fn an_unpinned_read_replaced_between_metadata_and_bytes_reads_the_new_object() {
    let env = Env::start().await;
    let s = env.store().await;
    let k = key("t/ckpt/state.json");
    let g1 = s
        .put(&k, Bytes::from_static(b"old"), "text/plain", IfGeneration::ABSENT)
        .await
        .expect("put")
        .generation;
    env.proxy.replace_before_next_read(k.as_str(), b"new!");
    let (meta, bytes) = s.get(&k, None).await.expect("get");
    assert_eq!(&bytes[..], b"new!");
    assert!(meta.generation != g1 && meta.size == 4, "{meta:?}");
    env.proxy.replace_before_next_read(k.as_str(), b"newer");
    let pinned = s.get(&k, Some(meta.generation)).await;
    assert!(matches!(pinned, Err(ObjectError::NotFound(_))), "a pinned read never moves on: {pinned:?}");
}
