//! The Cloud KMS Signer adapter, through the official `google-cloud-kms-v1`
//! crate (REST/JSON).
//!
//! - **Sign**: only the SHA-256 digest of the message goes to
//!   `asymmetricSign`, with its CRC32C. The answer is kept only if KMS
//!   says it verified that CRC (`verified_digest_crc32c`), it names the
//!   active key version, the signature's CRC32C matches
//!   `signature_crc32c`, and the signature verifies locally under the
//!   public key loaded at start. Anything else is
//!   [`SignError::Integrity`]: nothing is kept, the call may be retried.
//! - **Start**: `getPublicKey` of the active version and of every trusted
//!   one (each answer checked against its `pem_crc32c` and name), so that
//!   verifying never calls KMS. A version that cannot be loaded fails the start.

use async_trait::async_trait;
use aws_lc_rs::digest;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_kms_v1::client::KeyManagementService;
use google_cloud_kms_v1::model::{Digest, PublicKey};

use mapi_settings::{Env, Var};

use crate::{Algorithm, SignError, Signature, Signer, TrustedKeys, VerifyError};

/// `MAPI_KMS_KEY_VERSION`.
pub const KEY_VERSION: Var = Var::required(
    "MAPI_KMS_KEY_VERSION",
    "none (necessary with MAPI_SIGNER=kms)",
    "kms: the key version that signs: `projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/N`",
);
/// `MAPI_KMS_TRUSTED_KEY_VERSIONS`.
pub const TRUSTED_KEY_VERSIONS: Var = Var::derived(
    "MAPI_KMS_TRUSTED_KEY_VERSIONS",
    "none",
    "kms: earlier key versions whose signatures still verify (comma-separated), kept until nothing they signed is in use",
);
/// `MAPI_KMS_ENDPOINT`.
pub const ENDPOINT: Var =
    Var::derived("MAPI_KMS_ENDPOINT", "Google's", "kms: root of the Cloud KMS API (a fake's in tests)");

/// The KMS variables (the README table is built from these).
pub const VARIABLES: &[Var] = &[KEY_VERSION, TRUSTED_KEY_VERSIONS, ENDPOINT];

/// How the client authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Application Default Credentials (the service's own account on Cloud Run).
    ApplicationDefault,
    /// No credentials: only for a local fake.
    Anonymous,
}

/// The adapter's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KmsSettings {
    /// `MAPI_KMS_KEY_VERSION`.
    pub key_version: String,
    /// `MAPI_KMS_TRUSTED_KEY_VERSIONS`.
    pub trusted: Vec<String>,
    /// `MAPI_KMS_ENDPOINT`: `None` is Google's.
    pub endpoint: Option<String>,
}

/// Whether `name` is a full key version name.
fn check_name(name: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split('/').collect();
    let shaped = matches!(
        parts.as_slice(),
        ["projects", p, "locations", l, "keyRings", r, "cryptoKeys", k, "cryptoKeyVersions", v]
            if [p, l, r, k, v].iter().all(|s| !s.is_empty())
    );
    if shaped {
        Ok(())
    } else {
        Err(format!("`{name}` is not `projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/N`"))
    }
}

impl KmsSettings {
    /// Reads `MAPI_KMS_*` through `get`.
    pub fn from_env(env: Env<'_>) -> Result<KmsSettings, String> {
        let key_version = KEY_VERSION.require(env, "MAPI_SIGNER=kms").map_err(|e| e.0)?;
        check_name(&key_version).map_err(|e| format!("{}: {e}", KEY_VERSION.name))?;
        let trusted = TRUSTED_KEY_VERSIONS
            .list(env)
            .into_iter()
            .filter(|s| *s != key_version)
            .map(|s| check_name(&s).map(|()| s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", TRUSTED_KEY_VERSIONS.name))?;
        Ok(KmsSettings { key_version, trusted, endpoint: ENDPOINT.get(env) })
    }
}

/// Signs with a Cloud KMS key version.
#[derive(Clone)]
pub struct KmsSigner {
    client: KeyManagementService,
    active: String,
    algorithm: Algorithm,
    keys: TrustedKeys,
}

impl std::fmt::Debug for KmsSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsSigner").field("active", &self.active).field("keys", &self.keys).finish()
    }
}

fn crc32c(bytes: &[u8]) -> i64 {
    i64::from(crc32c::crc32c(bytes))
}

fn unavailable(what: &str, e: GaxError) -> SignError {
    SignError::Unavailable(mapi_domain::Cause::new(what, e))
}

fn algorithm_of(key: &PublicKey) -> Result<Algorithm, SignError> {
    let name = key.algorithm.name().unwrap_or("unknown");
    name.parse().map_err(|e| SignError::Config(format!("`{}`: {e}", key.name)))
}

impl KmsSigner {
    /// Builds the client and loads the public keys of the active and the
    /// trusted versions.
    pub async fn connect(settings: KmsSettings, credentials: Credentials) -> Result<KmsSigner, SignError> {
        for name in std::iter::once(&settings.key_version).chain(&settings.trusted) {
            check_name(name).map_err(SignError::Config)?;
        }
        let mut b = KeyManagementService::builder();
        if let Some(e) = &settings.endpoint {
            b = b.with_endpoint(e.clone());
        }
        if credentials == Credentials::Anonymous {
            b = b.with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build());
        }
        let client =
            b.build().await.map_err(|e| SignError::Config(format!("cannot build the KMS client: {e}")))?;
        let mut keys = TrustedKeys::default();
        let mut algorithm = None;
        for name in std::iter::once(&settings.key_version).chain(&settings.trusted) {
            let key = client
                .get_public_key()
                .set_name(name.clone())
                .send()
                .await
                .map_err(|e| unavailable(&format!("getPublicKey {name}"), e))?;
            if key.name != *name {
                return Err(SignError::Integrity(format!(
                    "asked for the key of `{name}`, got `{}`",
                    key.name
                )));
            }
            if key.pem_crc32c != Some(crc32c(key.pem.as_bytes())) {
                return Err(SignError::Integrity(format!("the public key of `{name}` fails its CRC32C")));
            }
            let alg = algorithm_of(&key)?;
            keys.insert_pem(name, alg, &key.pem)?;
            algorithm.get_or_insert(alg);
        }
        let algorithm = algorithm.ok_or_else(|| SignError::Config("no key version".into()))?;
        Ok(KmsSigner { client, active: settings.key_version, algorithm, keys })
    }
}

#[async_trait]
impl Signer for KmsSigner {
    fn key_version(&self) -> &str {
        &self.active
    }

    async fn sign(&self, message: &[u8]) -> Result<Signature, SignError> {
        let d = digest::digest(&digest::SHA256, message);
        let d = d.as_ref();
        let answer = self
            .client
            .asymmetric_sign()
            .set_name(self.active.clone())
            .set_digest(Digest::new().set_sha256(bytes::Bytes::copy_from_slice(d)))
            .set_digest_crc32c(crc32c(d))
            .send()
            .await
            .map_err(|e| unavailable("asymmetricSign", e))?;
        if !answer.verified_digest_crc32c {
            return Err(SignError::Integrity("KMS did not verify the digest's CRC32C".into()));
        }
        if answer.name != self.active {
            return Err(SignError::Integrity(format!(
                "signed by `{}`, not the active `{}`",
                answer.name, self.active
            )));
        }
        if answer.signature_crc32c != Some(crc32c(&answer.signature)) {
            return Err(SignError::Integrity("the signature fails its CRC32C".into()));
        }
        let signature = Signature {
            key_version: self.active.clone(),
            algorithm: self.algorithm,
            value: answer.signature.to_vec(),
        };
        self.keys.verify(message, &signature).map_err(|e| SignError::Integrity(e.to_string()))?;
        Ok(signature)
    }

    fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), VerifyError> {
        self.keys.verify(message, signature)
    }

    fn trusted_keys(&self) -> &TrustedKeys {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_need_full_version_names() {
        let v = "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/2";
        let old = "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1";
        let vars = |k: &str| match k {
            "MAPI_KMS_KEY_VERSION" => Some(v.to_owned()),
            "MAPI_KMS_TRUSTED_KEY_VERSIONS" => Some(format!("{old}, {v},")),
            _ => None,
        };
        let s = KmsSettings::from_env(&vars).expect("settings");
        assert_eq!((s.key_version.as_str(), s.trusted.as_slice()), (v, &[old.to_owned()][..]));
        assert!(KmsSettings::from_env(&|_| None).expect_err("necessary").contains("MAPI_KMS_KEY_VERSION"));
        let bad = |k: &str| (k == "MAPI_KMS_KEY_VERSION").then(|| "projects/p/cryptoKeys/k".to_owned());
        assert!(KmsSettings::from_env(&bad).is_err());
        let bad_trusted = |k: &str| match k {
            "MAPI_KMS_KEY_VERSION" => Some(v.to_owned()),
            _ => Some("projects/.../cryptoKeyVersions/1".to_owned()),
        };
        assert!(KmsSettings::from_env(&bad_trusted).expect_err("dots").contains("TRUSTED"));
    }
}
