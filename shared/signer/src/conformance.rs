//! The Signer conformance suite, run against every adapter through
//! [`signer_conformance_suite!`](crate::signer_conformance_suite).

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Signature, Signer, VerifyError};

/// Makes signers of one key: key versions are small numbers the harness
/// maps to real versions (KMS `cryptoKeyVersions/N`, or generated keys).
#[async_trait]
pub trait Keys: Send + Sync {
    /// A signer whose active version is `active` and which also trusts `trusted`.
    async fn signer(&self, active: u32, trusted: &[u32]) -> Arc<dyn Signer>;
}

const MANIFEST: &[u8] = br#"{"artifacts":[{"key":"t/a/model.json","sha256":"00"}]}"#;

pub async fn sign_then_verify(keys: &dyn Keys) {
    let s = keys.signer(1, &[]).await;
    let sig = s.sign(MANIFEST).await.expect("sign");
    assert_eq!(sig.key_version, s.key_version());
    s.verify(MANIFEST, &sig).expect("verifies");
    // The same signer, started again, verifies what it signed before.
    keys.signer(1, &[]).await.verify(MANIFEST, &sig).expect("verifies after a restart");
    let json = serde_json::to_vec(&sig).expect("json");
    let back: Signature = serde_json::from_slice(&json).expect("parse");
    s.verify(MANIFEST, &back).expect("verifies after JSON");
}

pub async fn tampering_is_refused(keys: &dyn Keys) {
    let s = keys.signer(1, &[]).await;
    let sig = s.sign(MANIFEST).await.expect("sign");
    let mut other = MANIFEST.to_vec();
    other[20] ^= 1;
    assert_eq!(s.verify(&other, &sig), Err(VerifyError::Invalid), "another message");
    let mut flipped = sig.clone();
    let last = flipped.value.len() - 1;
    flipped.value[last] ^= 1;
    assert_eq!(s.verify(MANIFEST, &flipped), Err(VerifyError::Invalid), "a changed signature");
    assert_eq!(s.verify(MANIFEST, &Signature { value: vec![], ..sig.clone() }), Err(VerifyError::Invalid));
    let renamed = Signature { key_version: format!("{}0", sig.key_version), ..sig };
    assert!(matches!(s.verify(MANIFEST, &renamed), Err(VerifyError::UntrustedKey(_))));
}

/// Key rotation in three steps: a new version; it becomes active; the old
/// one stays trusted until nothing it signed is in use.
pub async fn rotation_in_three_steps(keys: &dyn Keys) {
    let v1 = keys.signer(1, &[]).await;
    let old = v1.sign(MANIFEST).await.expect("sign with 1");
    let v2 = keys.signer(2, &[1]).await;
    assert_ne!(v2.key_version(), v1.key_version());
    v2.verify(MANIFEST, &old).expect("the old version stays trusted");
    let new = v2.sign(MANIFEST).await.expect("sign with 2");
    assert_eq!(new.key_version, v2.key_version());
    v2.verify(MANIFEST, &new).expect("the new version verifies");
    assert!(
        matches!(v1.verify(MANIFEST, &new), Err(VerifyError::UntrustedKey(_))),
        "a server that does not know version 2 refuses it"
    );
    let retired = keys.signer(2, &[]).await;
    assert!(
        matches!(retired.verify(MANIFEST, &old), Err(VerifyError::UntrustedKey(_))),
        "once untrusted, version 1's signatures are refused"
    );
    // A signature claiming the other version is not accepted for it.
    let forged = Signature { key_version: old.key_version.clone(), ..new };
    assert_eq!(v2.verify(MANIFEST, &forged), Err(VerifyError::Invalid));
}

/// Expands to one `#[tokio::test]` per case; `$make` evaluates to `(guard, keys)`.
#[macro_export]
macro_rules! signer_conformance_suite {
    ($make:expr) => {
        $crate::signer_conformance_suite!(@cases $make; sign_then_verify, tampering_is_refused,
            rotation_in_three_steps);
    };
    (@cases $make:expr; $($case:ident),+) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (_guard, keys) = $make;
                $crate::conformance::$case(&keys).await;
            }
        )+
    };
}
