//! The Signer conformance suite against the Cloud KMS adapter over
//! FakeKms, and what the KMS adapter checks beyond it: only the digest
//! leaves, every answer's CRC32C and key version, a local verification
//! before a signature is kept, public keys loaded once at start.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mapi_signer::conformance::Keys;
use mapi_signer::kms::{Credentials, KmsSettings, KmsSigner};
use mapi_signer::{SignError, Signer};
use mapi_tests::fake_kms::{FakeKms, KmsFault};

struct KmsKeys(FakeKms);

impl KmsKeys {
    async fn connect(&self, active: u32, trusted: &[u32]) -> Result<KmsSigner, SignError> {
        let settings = KmsSettings {
            key_version: self.0.version(active),
            trusted: trusted.iter().map(|n| self.0.version(*n)).collect(),
            endpoint: Some(self.0.url.clone()),
        };
        KmsSigner::connect(settings, Credentials::Anonymous).await
    }
}

#[async_trait]
impl Keys for KmsKeys {
    async fn signer(&self, active: u32, trusted: &[u32]) -> Arc<dyn Signer> {
        Arc::new(self.connect(active, trusted).await.expect("connect"))
    }
}

mapi_signer::signer_conformance_suite!(((), KmsKeys(FakeKms::start().await)));

const MANIFEST: &[u8] = b"{\"artifacts\":[]}";

#[tokio::test]
async fn only_the_digest_is_sent_and_verifying_never_calls_kms() {
    let keys = KmsKeys(FakeKms::start().await);
    let signer = keys.connect(2, &[1]).await.expect("connect");
    let at_start = keys.0.calls();
    let loaded: Vec<_> = at_start.iter().map(|c| (c.method.as_str(), c.name.clone())).collect();
    assert_eq!(loaded, [("getPublicKey", keys.0.version(2)), ("getPublicKey", keys.0.version(1))]);

    let sig = signer.sign(MANIFEST).await.expect("sign");
    let calls = keys.0.calls();
    let sign = calls.last().expect("a call");
    assert_eq!(sign.method, "asymmetricSign");
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, MANIFEST);
    assert_eq!(sign.body["digest"]["sha256"], STANDARD.encode(digest.as_ref()));
    assert_eq!(sign.body["digestCrc32c"], crc32c::crc32c(digest.as_ref()).to_string());
    assert!(sign.body.get("data").is_none(), "the manifest itself never leaves");

    for _ in 0..100 {
        signer.verify(MANIFEST, &sig).expect("verify");
    }
    assert_eq!(keys.0.calls().len(), calls.len(), "verification does no I/O");
}

#[tokio::test]
async fn damaged_or_foreign_answers_are_refused_and_not_kept() {
    let keys = KmsKeys(FakeKms::start().await);
    let signer = keys.connect(1, &[]).await.expect("connect");
    for fault in [
        KmsFault::CorruptSignatureCrc,
        KmsFault::WrongKeyVersion,
        KmsFault::UnverifiedDigest,
        KmsFault::ForeignSignature,
    ] {
        keys.0.fail_next(fault);
        let r = signer.sign(MANIFEST).await;
        assert!(matches!(r, Err(SignError::Integrity(_))), "{fault:?}: {r:?}");
        let again = signer.sign(MANIFEST).await.expect("the next call succeeds");
        signer.verify(MANIFEST, &again).expect("and verifies");
    }
}

#[tokio::test]
async fn start_fails_on_a_damaged_or_unknown_public_key() {
    let keys = KmsKeys(FakeKms::start().await);
    keys.0.fail_next(KmsFault::CorruptPublicKeyCrc);
    assert!(matches!(keys.connect(1, &[]).await, Err(SignError::Integrity(_))));
    let missing = KmsSettings {
        key_version: keys.0.version(1),
        trusted: vec![format!("{}/cryptoKeyVersions/404", mapi_tests::fake_kms::KEY)],
        endpoint: Some(keys.0.url.clone()),
    };
    let r = KmsSigner::connect(missing, Credentials::Anonymous).await;
    assert!(matches!(r, Err(SignError::Unavailable(_))), "{r:?}");
}

#[tokio::test]
async fn the_platform_selects_the_kms_signer_from_its_configuration() {
    let fake = FakeKms::start().await;
    let home = tempfile::tempdir().expect("tempdir");
    let active = fake.version(2);
    let old = fake.version(1);
    let config = mapi_tests::config(
        home.path(),
        &[
            ("MAPI_SIGNER", "kms"),
            ("MAPI_KMS_KEY_VERSION", &active),
            ("MAPI_KMS_TRUSTED_KEY_VERSIONS", &old),
            ("MAPI_KMS_ENDPOINT", &fake.url),
        ],
    );
    let signer = mapi_platform::signer(&config).await.expect("connect");
    assert_eq!(signer.key_version(), active);
    let sig = signer.sign(MANIFEST).await.expect("sign");
    signer.verify(MANIFEST, &sig).expect("verify");
    assert!(!home.path().join("bundle-signing-key.pem").exists(), "no local key is made");
}
