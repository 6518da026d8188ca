//! The Signer port: signatures over the manifests of model-version bundles.
//! Two adapters: a local PEM key ([`local::LocalSigner`], the default) and
//! Cloud KMS ([`kms::KmsSigner`], `MAPI_SIGNER=kms`).
//!
//! Signing may do I/O (KMS); verifying never does: every adapter loads the
//! public keys of its active and trusted key versions at start into
//! [`TrustedKeys`], so a manifest is verified before URLs are minted
//! without waiting for anything. Every signature is verified locally
//! before `sign` returns it.
//!
//! Key rotation, in three steps: make a new key version; make it the
//! active one; keep the old one trusted until no model version it signed
//! is in use. A signature names the key version that made it, so the
//! verifier picks the key without trying each.
//!
//! Architecture invariant: `verify` does no I/O.

pub mod kms;
pub mod local;
mod pem;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::str::FromStr;

use async_trait::async_trait;
use aws_lc_rs::signature::{self, ParsedPublicKey, VerificationAlgorithm};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use pem::{pem_decode, pem_encode};

/// The signature algorithms a key version may have (KMS's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    EcP256Sha256,
    RsaPss2048Sha256,
    RsaPss3072Sha256,
    RsaPss4096Sha256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [
        Algorithm::EcP256Sha256,
        Algorithm::RsaPss2048Sha256,
        Algorithm::RsaPss3072Sha256,
        Algorithm::RsaPss4096Sha256,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::EcP256Sha256 => "EC_SIGN_P256_SHA256",
            Algorithm::RsaPss2048Sha256 => "RSA_SIGN_PSS_2048_SHA256",
            Algorithm::RsaPss3072Sha256 => "RSA_SIGN_PSS_3072_SHA256",
            Algorithm::RsaPss4096Sha256 => "RSA_SIGN_PSS_4096_SHA256",
        }
    }

    fn verification(self) -> &'static dyn VerificationAlgorithm {
        match self {
            Algorithm::EcP256Sha256 => &signature::ECDSA_P256_SHA256_ASN1,
            Algorithm::RsaPss2048Sha256 | Algorithm::RsaPss3072Sha256 | Algorithm::RsaPss4096Sha256 => {
                &signature::RSA_PSS_2048_8192_SHA256
            }
        }
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Algorithm, String> {
        Algorithm::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| {
            format!("unsupported signing algorithm `{s}`: use EC_SIGN_P256_SHA256 or RSA_SIGN_PSS_*_SHA256")
        })
    }
}

impl Serialize for Algorithm {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A signature and what made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The key version: a KMS `…/cryptoKeyVersions/N` name, or `local/{fingerprint}`.
    pub key_version: String,
    pub algorithm: Algorithm,
    /// The signature bytes (DER for ECDSA), base64 in JSON.
    #[serde(with = "base64_bytes")]
    pub value: Vec<u8>,
}

mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        STANDARD.decode(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Why a signature could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The key or its configuration cannot be used (fails the start).
    #[error("signing key unusable: {0}")]
    Config(String),
    /// The signing service could not be reached or refused for now: retry.
    #[error("signing service unavailable: {0}")]
    Unavailable(#[source] mapi_domain::Cause),
    /// The answer was damaged in transit or is not what was asked for (a
    /// CRC32C mismatch, another key version, a signature that does not
    /// verify): nothing was kept; the call may be retried.
    #[error("signature integrity check failed: {0}")]
    Integrity(String),
}

/// Why a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Made by a key version that is neither active nor trusted.
    #[error("signed by key version `{0}`, which is not trusted")]
    UntrustedKey(String),
    /// Not a signature of this message by that key.
    #[error("the signature does not verify")]
    Invalid,
}

/// The Signer port.
///
/// Failure model: signing changes no state, so a `sign` that failed or whose answer was lost may be
/// retried as it is; a retry may make a different signature value (the local key signs with a random
/// nonce), which verifies as well. `verify` does no I/O: its errors are final for that signature.
#[async_trait]
pub trait Signer: Send + Sync + Debug {
    /// The key version new signatures are made with.
    fn key_version(&self) -> &str;

    /// Signs `message`. The returned signature has been verified locally.
    ///
    /// # Errors
    ///
    /// - `Unavailable`: KMS did not answer or answered an error, or the local key could not sign.
    ///   The KMS adapter maps every `asymmetricSign` error here, also ones a retry will not cure
    ///   (a refused permission, a missing key version), so retries may keep failing.
    /// - `Integrity`: the answer failed a check (KMS: the digest's CRC32C not verified, another key
    ///   version, the signature's CRC32C; either adapter: the signature does not verify under the
    ///   loaded public key). Nothing was kept; the call may be retried.
    /// - `Config` is a start-time error: neither adapter's `sign` returns it.
    ///
    /// A retry is always safe. Callers that store a signature create-only keep the first one that
    /// was stored, as `mapi_bundles::seal` does, rather than compare signature bytes.
    async fn sign(&self, message: &[u8]) -> Result<Signature, SignError>;

    /// Verifies with the keys loaded at start: no I/O.
    ///
    /// # Errors
    ///
    /// `UntrustedKey`: the signature names a key version that is neither active nor trusted here.
    /// `Invalid`: not a signature of `message` by that key (also when its algorithm is not the
    /// key's). Nothing is fetched, so a retry answers the same.
    fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), VerifyError>;

    /// The public keys `verify` trusts, for a verifier elsewhere (a model server).
    fn trusted_keys(&self) -> &TrustedKeys;
}

/// The public keys of the active and trusted key versions, by name.
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: BTreeMap<String, (Algorithm, ParsedPublicKey, Vec<u8>)>,
}

/// One trusted key as it travels: its version, algorithm and `PUBLIC KEY` PEM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicKey {
    pub key_version: String,
    pub algorithm: Algorithm,
    pub public_key_pem: String,
}

/// A public key's numbers, as a JSON Web Key (RFC 7517/7518) states them:
/// big-endian unsigned integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyMaterial {
    /// A P-256 point.
    Ec { x: Vec<u8>, y: Vec<u8> },
    /// An RSA modulus and public exponent.
    Rsa { n: Vec<u8>, e: Vec<u8> },
}

impl Algorithm {
    /// The algorithm's JOSE name (RFC 7518): `ES256` or `PS256`. A signature's
    /// value is what the algorithm makes, but an ECDSA one is ASN.1 DER
    /// (as Cloud KMS returns it), not JWS's fixed-width `r || s`.
    pub fn jose(self) -> &'static str {
        match self {
            Algorithm::EcP256Sha256 => "ES256",
            Algorithm::RsaPss2048Sha256 | Algorithm::RsaPss3072Sha256 | Algorithm::RsaPss4096Sha256 => {
                "PS256"
            }
        }
    }
}

impl PublicKey {
    /// The key's numbers, read from its `PUBLIC KEY` PEM (a DER SubjectPublicKeyInfo).
    ///
    /// # Errors
    ///
    /// `Config` when the PEM is not a key of its algorithm.
    pub fn material(&self) -> Result<KeyMaterial, SignError> {
        let bad = |why: &str| SignError::Config(format!("the public key of `{}` {why}", self.key_version));
        let der = pem_decode(&self.public_key_pem, "PUBLIC KEY").map_err(|e| bad(&e))?;
        // SubjectPublicKeyInfo ::= SEQUENCE { algorithm SEQUENCE, subjectPublicKey BIT STRING }
        let (spki, _) = der::element(&der, der::SEQUENCE).ok_or_else(|| bad("is not DER"))?;
        let (_, rest) = der::element(spki, der::SEQUENCE).ok_or_else(|| bad("has no algorithm"))?;
        let (bits, _) = der::element(rest, der::BIT_STRING).ok_or_else(|| bad("has no key"))?;
        let key = bits.strip_prefix(&[0u8][..]).ok_or_else(|| bad("has unused bits"))?;
        match self.algorithm {
            Algorithm::EcP256Sha256 => match key {
                [0x04, point @ ..] if point.len() == 64 => {
                    Ok(KeyMaterial::Ec { x: point[..32].to_vec(), y: point[32..].to_vec() })
                }
                _ => Err(bad("is not an uncompressed P-256 point")),
            },
            _ => {
                // RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }
                let (seq, _) = der::element(key, der::SEQUENCE).ok_or_else(|| bad("is not an RSA key"))?;
                let (n, rest) = der::element(seq, der::INTEGER).ok_or_else(|| bad("has no modulus"))?;
                let (e, _) = der::element(rest, der::INTEGER).ok_or_else(|| bad("has no exponent"))?;
                Ok(KeyMaterial::Rsa { n: der::unsigned(n).to_vec(), e: der::unsigned(e).to_vec() })
            }
        }
    }
}

/// Just enough DER to read a public key's numbers.
mod der {
    pub const INTEGER: u8 = 0x02;
    pub const BIT_STRING: u8 = 0x03;
    pub const SEQUENCE: u8 = 0x30;

    /// The contents of the element of `tag` at the start of `input`, and what follows it.
    pub fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (&first, rest) = input.split_first()?;
        if first != tag {
            return None;
        }
        let (&len, rest) = rest.split_first()?;
        let (len, rest) = if len < 0x80 {
            (usize::from(len), rest)
        } else {
            let octets = usize::from(len & 0x7f);
            if octets == 0 || octets > 4 || rest.len() < octets {
                return None;
            }
            let (bytes, rest) = rest.split_at(octets);
            (bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)), rest)
        };
        (rest.len() >= len).then(|| rest.split_at(len))
    }

    /// An INTEGER's contents without the sign octet DER adds to a high first bit.
    pub fn unsigned(int: &[u8]) -> &[u8] {
        match int {
            [0, rest @ ..] if !rest.is_empty() => rest,
            _ => int,
        }
    }
}

impl Debug for TrustedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.keys.keys()).finish()
    }
}

impl TrustedKeys {
    /// No key: nothing verifies.
    pub const EMPTY: TrustedKeys = TrustedKeys { keys: BTreeMap::new() };

    /// Adds a key version's public key (DER SubjectPublicKeyInfo).
    pub fn insert(&mut self, version: &str, algorithm: Algorithm, spki_der: &[u8]) -> Result<(), SignError> {
        let key = ParsedPublicKey::new(algorithm.verification(), spki_der).map_err(|e| {
            SignError::Config(format!(
                "the public key of `{version}` is not a {} key: {e}",
                algorithm.as_str()
            ))
        })?;
        self.keys.insert(version.to_owned(), (algorithm, key, spki_der.to_vec()));
        Ok(())
    }

    /// Adds a key version's public key from a `PUBLIC KEY` PEM.
    pub fn insert_pem(&mut self, version: &str, algorithm: Algorithm, pem: &str) -> Result<(), SignError> {
        let der =
            pem_decode(pem, "PUBLIC KEY").map_err(|e| SignError::Config(format!("`{version}`: {e}")))?;
        self.insert(version, algorithm, &der)
    }

    /// Every key, in version order.
    pub fn export(&self) -> Vec<PublicKey> {
        self.keys
            .iter()
            .map(|(version, (algorithm, _, der))| PublicKey {
                key_version: version.clone(),
                algorithm: *algorithm,
                public_key_pem: pem_encode("PUBLIC KEY", der),
            })
            .collect()
    }

    /// The keys of an [`export`](TrustedKeys::export).
    pub fn import(keys: &[PublicKey]) -> Result<TrustedKeys, SignError> {
        let mut out = TrustedKeys::default();
        for k in keys {
            out.insert_pem(&k.key_version, k.algorithm, &k.public_key_pem)?;
        }
        Ok(out)
    }

    pub fn contains(&self, version: &str) -> bool {
        self.keys.contains_key(version)
    }

    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), VerifyError> {
        let Some((algorithm, key, _)) = self.keys.get(&signature.key_version) else {
            return Err(VerifyError::UntrustedKey(signature.key_version.clone()));
        };
        if *algorithm != signature.algorithm {
            return Err(VerifyError::Invalid);
        }
        key.verify_sig(message, &signature.value).map_err(|_| VerifyError::Invalid)
    }
}

#[cfg(test)]
mod jwk_tests {
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::KeyPair;

    use super::*;

    #[test]
    fn an_ec_key_gives_its_point() {
        let signer = local::LocalSigner::from_pem(&local::LocalSigner::generate_pem().expect("key"), &[])
            .expect("signer");
        let key = &signer.trusted_keys().export()[0];
        let der = pem_decode(&key.public_key_pem, "PUBLIC KEY").expect("der");
        let KeyMaterial::Ec { x, y } = key.material().expect("material") else { panic!("not EC") };
        assert_eq!((x.len(), y.len()), (32, 32));
        assert_eq!([&[4u8][..], &x, &y].concat(), der[der.len() - 65..], "the SPKI's uncompressed point");
        assert_eq!(key.algorithm.jose(), "ES256");
    }

    #[test]
    fn an_rsa_key_gives_its_modulus_and_exponent() {
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("generate");
        let der = pair.public_key().as_der().expect("der");
        let key = PublicKey {
            key_version: "k/1".into(),
            algorithm: Algorithm::RsaPss2048Sha256,
            public_key_pem: pem_encode("PUBLIC KEY", der.as_ref()),
        };
        let KeyMaterial::Rsa { n, e } = key.material().expect("material") else { panic!("not RSA") };
        assert_eq!(e, vec![1, 0, 1], "65537");
        assert_eq!(n.len(), 256, "2048 bits without the sign octet");
        assert!(n[0] & 0x80 != 0);
        let garbled = PublicKey { public_key_pem: pem_encode("PUBLIC KEY", &der.as_ref()[..40]), ..key };
        assert!(garbled.material().is_err(), "a cut key is refused, not read past its end");
    }
}
