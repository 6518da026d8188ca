//! Who signs URLs and POST policies: the [`BlobSigner`] trait and its two
//! backends, a service-account key signing locally and the IAM Credentials
//! `signBlob` API (the service's own account on Cloud Run has no key).
//!
//! Both sign with RSASSA-PKCS1-v1_5 over SHA-256, what `GOOG4-RSA-SHA256`
//! names. A 429 or 5xx from `signBlob` is `Unavailable` (the caller may
//! retry later); nothing is retried here.

use std::sync::Arc;

use async_trait::async_trait;
use aws_lc_rs::rsa::KeyPair;
use aws_lc_rs::signature::RSA_PKCS1_SHA256;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::Auth;

/// Why a blob could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    /// The key or account is not usable as configured.
    #[error("signing is misconfigured: {0}")]
    Config(String),
    /// The signing service could not answer now; try again later.
    #[error("the signing service is unavailable: {0}")]
    Unavailable(String),
    /// The signing service answered something unusable.
    #[error("the signing service answered wrongly: {0}")]
    Integrity(String),
}

/// Signs bytes as a service account, RSA with SHA-256 (`GOOG4-RSA-SHA256`).
#[async_trait]
pub trait BlobSigner: Send + Sync + std::fmt::Debug {
    /// The service account's email: the `x-goog-credential`'s first part.
    fn email(&self) -> &str;

    /// The PKCS#1 v1.5 SHA-256 signature of `blob`.
    async fn sign(&self, blob: &[u8]) -> Result<Vec<u8>, SigningError>;
}

/// The fields of a service-account JSON key file this reads.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
}

/// A service-account key, signing in the process.
pub struct KeySigner {
    email: String,
    key: KeyPair,
}

impl std::fmt::Debug for KeySigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySigner").field("email", &self.email).finish_non_exhaustive()
    }
}

impl KeySigner {
    /// Reads a JSON key file as the console downloads it.
    pub fn from_json(json: &str) -> Result<KeySigner, SigningError> {
        let file: KeyFile = serde_json::from_str(json)
            .map_err(|e| SigningError::Config(format!("not a service-account JSON key: {e}")))?;
        if file.kind != "service_account" {
            return Err(SigningError::Config(format!(
                "the key file's type is `{}`, not `service_account`",
                file.kind
            )));
        }
        let der = mapi_signer::pem_decode(&file.private_key, "PRIVATE KEY")
            .map_err(|e| SigningError::Config(format!("private_key: {e}")))?;
        KeySigner::from_pkcs8(file.client_email, &der)
    }

    /// Reads the JSON key file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<KeySigner, SigningError> {
        let json = std::fs::read_to_string(path)
            .map_err(|e| SigningError::Config(format!("cannot read {}: {e}", path.display())))?;
        KeySigner::from_json(&json)
    }

    /// An RSA key in PKCS#8 DER, for `email`.
    pub fn from_pkcs8(email: impl Into<String>, der: &[u8]) -> Result<KeySigner, SigningError> {
        let key = KeyPair::from_pkcs8(der)
            .map_err(|e| SigningError::Config(format!("private_key is not an RSA PKCS#8 key: {e}")))?;
        Ok(KeySigner { email: email.into(), key })
    }
}

#[async_trait]
impl BlobSigner for KeySigner {
    fn email(&self) -> &str {
        &self.email
    }

    async fn sign(&self, blob: &[u8]) -> Result<Vec<u8>, SigningError> {
        let mut out = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &aws_lc_rs::rand::SystemRandom::new(), blob, &mut out)
            .map_err(|e| SigningError::Config(format!("RSA signing failed: {e}")))?;
        Ok(out)
    }
}

/// The IAM Credentials API's `signBlob`, signing as `email` with a key
/// Google holds. The caller needs `iam.serviceAccounts.signBlob` on it
/// (`roles/iam.serviceAccountTokenCreator`).
#[derive(Clone)]
pub struct SignBlobSigner {
    email: String,
    endpoint: String,
    http: reqwest::Client,
    auth: Arc<Auth>,
}

impl std::fmt::Debug for SignBlobSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignBlobSigner")
            .field("email", &self.email)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Google's IAM Credentials API.
pub const IAM_CREDENTIALS_ENDPOINT: &str = "https://iamcredentials.googleapis.com";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignBlobAnswer {
    key_id: String,
    signed_blob: String,
}

impl SignBlobSigner {
    /// Signs as `email` through `endpoint` (`None`: Google's).
    pub(crate) fn new(email: String, endpoint: Option<String>, auth: Arc<Auth>) -> SignBlobSigner {
        let endpoint =
            endpoint.unwrap_or_else(|| IAM_CREDENTIALS_ENDPOINT.to_owned()).trim_end_matches('/').to_owned();
        SignBlobSigner { email, endpoint, http: reqwest::Client::new(), auth }
    }
}

#[async_trait]
impl BlobSigner for SignBlobSigner {
    fn email(&self) -> &str {
        &self.email
    }

    async fn sign(&self, blob: &[u8]) -> Result<Vec<u8>, SigningError> {
        let url = format!("{}/v1/projects/-/serviceAccounts/{}:signBlob", self.endpoint, self.email);
        let mut req = self.http.post(url).json(&serde_json::json!({ "payload": STANDARD.encode(blob) }));
        if let Some(token) = self.auth.token().await.map_err(SigningError::Unavailable)? {
            req = req.bearer_auth(token);
        }
        let answer = req.send().await.map_err(|e| SigningError::Unavailable(format!("signBlob: {e}")))?;
        let status = answer.status();
        if status.as_u16() == 429 || status.is_server_error() {
            return Err(SigningError::Unavailable(format!("signBlob answered {status}")));
        }
        if !status.is_success() {
            let body = answer.text().await.unwrap_or_default();
            return Err(SigningError::Config(format!(
                "signBlob as {} answered {status}: {}",
                self.email,
                body.chars().take(300).collect::<String>()
            )));
        }
        let answer: SignBlobAnswer = answer
            .json()
            .await
            .map_err(|e| SigningError::Integrity(format!("signBlob's answer is not JSON: {e}")))?;
        if answer.key_id.is_empty() {
            return Err(SigningError::Integrity("signBlob named no key".into()));
        }
        STANDARD
            .decode(answer.signed_blob)
            .map_err(|e| SigningError::Integrity(format!("signedBlob is not base64: {e}")))
    }
}
