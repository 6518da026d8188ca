//! FakeKms: the two Cloud KMS methods the signer calls, `asymmetricSign`
//! and `getPublicKey`, as REST/JSON on 127.0.0.1, written from Google's
//! REST reference (int64 fields as JSON strings, bytes as base64). Key
//! versions are P-256 keys made on first use. It signs the digest it is
//! sent (refusing a digest whose CRC32C does not match, as KMS does),
//! records every call, and injects faults into the next answers: a
//! corrupted CRC, another key version, an unverified digest, a signature
//! by another key, a public key failing its CRC.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use aws_lc_rs::digest::{Digest, SHA256};
use aws_lc_rs::encoding::{AsDer, PublicKeyX509Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// The key all versions belong to.
pub const KEY: &str = "projects/fake/locations/europe-west1/keyRings/mapi/cryptoKeys/bundles";

/// A fault for the next matching answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KmsFault {
    /// `signatureCrc32c` does not match the signature.
    CorruptSignatureCrc,
    /// Signed by, and named as, another key version.
    WrongKeyVersion,
    /// `verifiedDigestCrc32c` is false.
    UnverifiedDigest,
    /// Named as the asked version, but signed by another key (CRC intact).
    ForeignSignature,
    /// `getPublicKey`: `pemCrc32c` does not match the PEM.
    CorruptPublicKeyCrc,
}

/// A call the fake answered.
#[derive(Clone, Debug)]
pub struct KmsCall {
    /// `asymmetricSign` or `getPublicKey`.
    pub method: String,
    pub name: String,
    /// The JSON body (`null` for a GET).
    pub body: Value,
}

#[derive(Default)]
struct FakeState {
    versions: BTreeMap<String, Arc<EcdsaKeyPair>>,
    faults: VecDeque<KmsFault>,
    calls: Vec<KmsCall>,
}

/// The fake; cheap to clone.
#[derive(Clone)]
pub struct FakeKms {
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

impl std::fmt::Debug for FakeKms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKms").field("url", &self.url).finish_non_exhaustive()
    }
}

fn crc(bytes: &[u8]) -> String {
    crc32c::crc32c(bytes).to_string()
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "status": match status {
        StatusCode::NOT_FOUND => "NOT_FOUND",
        _ => "INVALID_ARGUMENT",
    }}});
    (status, axum::Json(body)).into_response()
}

fn public_pem(key: &EcdsaKeyPair) -> String {
    let der: PublicKeyX509Der<'static> = key.public_key().as_der().expect("public key DER");
    mapi_signer::pem_encode("PUBLIC KEY", der.as_ref())
}

impl FakeKms {
    pub async fn start() -> FakeKms {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let fake = FakeKms { url, state: Arc::new(Mutex::new(FakeState::default())) };
        let app = Router::new().fallback(handle).with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The name of key version `n`, made (a new P-256 key) on first use.
    pub fn version(&self, n: u32) -> String {
        let name = format!("{KEY}/cryptoKeyVersions/{n}");
        self.lock().versions.entry(name.clone()).or_insert_with(|| {
            let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &SystemRandom::new())
                .expect("generate");
            Arc::new(EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, doc.as_ref()).expect("key"))
        });
        name
    }

    /// Injects `fault` into the next answer it applies to.
    pub fn fail_next(&self, fault: KmsFault) {
        self.lock().faults.push_back(fault);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<KmsCall> {
        self.lock().calls.clone()
    }

    fn take_fault(&self, applies: impl Fn(KmsFault) -> bool) -> Option<KmsFault> {
        let mut s = self.lock();
        let i = s.faults.iter().position(|f| applies(*f))?;
        s.faults.remove(i)
    }

    fn key(&self, name: &str) -> Option<Arc<EcdsaKeyPair>> {
        self.lock().versions.get(name).cloned()
    }

    fn public_key(&self, name: &str) -> Response {
        let Some(key) = self.key(name) else { return error(StatusCode::NOT_FOUND, "no such key version") };
        let pem = public_pem(&key);
        let mut pem_crc = crc(pem.as_bytes());
        if self.take_fault(|f| f == KmsFault::CorruptPublicKeyCrc).is_some() {
            pem_crc = (crc32c::crc32c(pem.as_bytes()) ^ 1).to_string();
        }
        axum::Json(json!({
            "pem": pem, "algorithm": "EC_SIGN_P256_SHA256", "pemCrc32c": pem_crc, "name": name,
            "protectionLevel": "SOFTWARE",
        }))
        .into_response()
    }

    fn sign(&self, name: &str, body: &Value) -> Response {
        let Some(mut key) = self.key(name) else {
            return error(StatusCode::NOT_FOUND, "no such key version");
        };
        if body.get("data").is_some() {
            return error(StatusCode::BAD_REQUEST, "the fake accepts only digests");
        }
        let digest =
            body.pointer("/digest/sha256").and_then(Value::as_str).and_then(|d| STANDARD.decode(d).ok());
        let Some(digest) = digest.filter(|d| d.len() == 32) else {
            return error(StatusCode::BAD_REQUEST, "digest.sha256 must be 32 bytes");
        };
        let sent_crc = match body.get("digestCrc32c") {
            Some(Value::String(s)) => s.parse::<u64>().ok(),
            Some(v) => v.as_u64(),
            None => None,
        };
        if sent_crc.is_some_and(|c| c != u64::from(crc32c::crc32c(&digest))) {
            return error(StatusCode::BAD_REQUEST, "The checksum in field digest_crc32c did not match");
        }
        let fault = self.take_fault(|f| f != KmsFault::CorruptPublicKeyCrc);
        let mut answer_name = name.to_owned();
        if matches!(fault, Some(KmsFault::WrongKeyVersion | KmsFault::ForeignSignature)) {
            let other = self.version(9_999);
            key = self.key(&other).expect("made");
            if fault == Some(KmsFault::WrongKeyVersion) {
                answer_name = other;
            }
        }
        let digest = Digest::import_less_safe(&digest, &SHA256).expect("32 bytes");
        let sig = key.sign_digest(&digest).expect("sign");
        let sig = sig.as_ref();
        let mut sig_crc = crc(sig);
        if fault == Some(KmsFault::CorruptSignatureCrc) {
            sig_crc = (crc32c::crc32c(sig) ^ 1).to_string();
        }
        axum::Json(json!({
            "signature": STANDARD.encode(sig),
            "signatureCrc32c": sig_crc,
            "verifiedDigestCrc32c": sent_crc.is_some() && fault != Some(KmsFault::UnverifiedDigest),
            "name": answer_name,
            "protectionLevel": "SOFTWARE",
        }))
        .into_response()
    }
}

async fn handle(State(fake): State<FakeKms>, method: Method, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().strip_prefix("/v1/").unwrap_or_default().to_owned();
    let body: Value =
        if body.is_empty() { Value::Null } else { serde_json::from_slice(&body).unwrap_or(Value::Null) };
    let (call, name) = if method == Method::POST && path.ends_with(":asymmetricSign") {
        ("asymmetricSign", path.trim_end_matches(":asymmetricSign"))
    } else if method == Method::GET && path.ends_with("/publicKey") {
        ("getPublicKey", path.trim_end_matches("/publicKey"))
    } else {
        return error(StatusCode::NOT_FOUND, "the fake serves asymmetricSign and getPublicKey only");
    };
    let name = name.to_owned();
    fake.lock().calls.push(KmsCall { method: call.to_owned(), name: name.clone(), body: body.clone() });
    match call {
        "asymmetricSign" => fake.sign(&name, &body),
        _ => fake.public_key(&name),
    }
}
