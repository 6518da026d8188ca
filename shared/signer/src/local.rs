//! The local Signer adapter: an ECDSA P-256 key in a PKCS#8 PEM file.
//! Its key version is `local/` and the first 16 hex digits of the SHA-256
//! of its public key, so a rotated key has another version; public keys of
//! earlier keys (`PUBLIC KEY` PEM files) stay trusted while listed.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use aws_lc_rs::digest;
use aws_lc_rs::encoding::{AsDer, PublicKeyX509Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

use crate::{Algorithm, SignError, Signature, Signer, TrustedKeys, VerifyError, pem_decode, pem_encode};

/// Signs with a local key.
pub struct LocalSigner {
    key: EcdsaKeyPair,
    version: String,
    keys: TrustedKeys,
}

impl std::fmt::Debug for LocalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSigner").field("version", &self.version).field("keys", &self.keys).finish()
    }
}

fn spki(key: &EcdsaKeyPair) -> Result<Vec<u8>, SignError> {
    let der: PublicKeyX509Der<'static> =
        key.public_key().as_der().map_err(|_| SignError::Config("cannot encode the public key".into()))?;
    Ok(der.as_ref().to_vec())
}

/// The key version of a public key (DER SubjectPublicKeyInfo).
pub fn version_of(spki_der: &[u8]) -> String {
    let d = digest::digest(&digest::SHA256, spki_der);
    format!("local/{}", hex::encode(&d.as_ref()[..8]))
}

impl LocalSigner {
    /// A new P-256 key as a `PRIVATE KEY` (PKCS#8) PEM.
    pub fn generate_pem() -> Result<String, SignError> {
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &SystemRandom::new())
            .map_err(|_| SignError::Config("cannot generate a key".into()))?;
        Ok(pem_encode("PRIVATE KEY", doc.as_ref()))
    }

    /// The signer of `private_pem`, also trusting the `trusted` public keys
    /// (`PUBLIC KEY` PEMs of earlier keys).
    pub fn from_pem(private_pem: &str, trusted: &[String]) -> Result<LocalSigner, SignError> {
        let der = pem_decode(private_pem, "PRIVATE KEY").map_err(SignError::Config)?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der)
            .map_err(|e| SignError::Config(format!("not a PKCS#8 P-256 key: {e}")))?;
        let own = spki(&key)?;
        let version = version_of(&own);
        let mut keys = TrustedKeys::default();
        keys.insert(&version, Algorithm::EcP256Sha256, &own)?;
        for pem in trusted {
            let der = pem_decode(pem, "PUBLIC KEY").map_err(SignError::Config)?;
            keys.insert(&version_of(&der), Algorithm::EcP256Sha256, &der)?;
        }
        Ok(LocalSigner { key, version, keys })
    }

    /// The signer of the key in `path`; when the file does not exist and
    /// `generate` is set, a new key is written there first (mode 0600).
    /// `trusted` are files of earlier keys' public keys.
    pub fn open(path: &Path, generate: bool, trusted: &[PathBuf]) -> Result<LocalSigner, SignError> {
        let err = |p: &Path, e: std::io::Error| SignError::Config(format!("{}: {e}", p.display()));
        let pem = match std::fs::read_to_string(path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && generate => {
                let pem = LocalSigner::generate_pem()?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
                }
                let tmp = path.with_extension("tmp");
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .map_err(|e| err(&tmp, e))?;
                f.write_all(pem.as_bytes()).and_then(|()| f.sync_all()).map_err(|e| err(&tmp, e))?;
                std::fs::rename(&tmp, path).map_err(|e| err(path, e))?;
                pem
            }
            Err(e) => return Err(err(path, e)),
        };
        let trusted = trusted
            .iter()
            .map(|p| std::fs::read_to_string(p).map_err(|e| err(p, e)))
            .collect::<Result<Vec<_>, _>>()?;
        LocalSigner::from_pem(&pem, &trusted)
    }

    /// This key's public key, as a `PUBLIC KEY` PEM (to keep trusting it after a rotation).
    pub fn public_key_pem(&self) -> Result<String, SignError> {
        Ok(pem_encode("PUBLIC KEY", &spki(&self.key)?))
    }
}

#[async_trait]
impl Signer for LocalSigner {
    fn key_version(&self) -> &str {
        &self.version
    }

    async fn sign(&self, message: &[u8]) -> Result<Signature, SignError> {
        let sig = self
            .key
            .sign(&SystemRandom::new(), message)
            .map_err(|_| SignError::Unavailable("the local key could not sign".into()))?;
        let signature = Signature {
            key_version: self.version.clone(),
            algorithm: Algorithm::EcP256Sha256,
            value: sig.as_ref().to_vec(),
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
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::conformance::Keys;

    /// Key versions 1, 2, … are keys generated on first use.
    #[derive(Default)]
    struct LocalKeys(Mutex<HashMap<u32, String>>);

    impl LocalKeys {
        fn pem(&self, n: u32) -> String {
            let mut m = self.0.lock().expect("lock");
            m.entry(n).or_insert_with(|| LocalSigner::generate_pem().expect("key")).clone()
        }
    }

    #[async_trait]
    impl Keys for LocalKeys {
        async fn signer(&self, active: u32, trusted: &[u32]) -> Arc<dyn Signer> {
            let trusted: Vec<String> = trusted
                .iter()
                .map(|n| {
                    LocalSigner::from_pem(&self.pem(*n), &[]).expect("key").public_key_pem().expect("pem")
                })
                .collect();
            Arc::new(LocalSigner::from_pem(&self.pem(active), &trusted).expect("signer"))
        }
    }

    crate::signer_conformance_suite!(((), LocalKeys::default()));

    #[test]
    fn open_generates_once_with_mode_0600() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("keys/bundle-signing-key.pem");
        assert!(LocalSigner::open(&path, false, &[]).is_err(), "no key and no generation");
        let a = LocalSigner::open(&path, true, &[]).expect("generated");
        let b = LocalSigner::open(&path, false, &[]).expect("read");
        assert_eq!(a.key_version(), b.key_version());
        assert!(a.key_version().starts_with("local/"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "not a key").expect("write");
        assert!(matches!(LocalSigner::open(&path, true, &[]), Err(SignError::Config(_))));
    }
}
