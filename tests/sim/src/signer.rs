//! The bundle signer (a local P-256 key standing for Cloud KMS) under the
//! simulation's faults: `sign` may answer 503, as `asymmetricSign` does.

use std::sync::Arc;

use async_trait::async_trait;
use mapi_signer::{SignError, Signature, Signer, TrustedKeys, VerifyError};

use crate::faults::{Fault, Faults};

#[derive(Debug)]
pub struct SimSigner {
    inner: Arc<dyn Signer>,
    faults: Arc<Faults>,
}

impl SimSigner {
    pub fn new(inner: Arc<dyn Signer>, faults: Arc<Faults>) -> SimSigner {
        SimSigner { inner, faults }
    }
}

#[async_trait]
impl Signer for SimSigner {
    fn key_version(&self) -> &str {
        self.inner.key_version()
    }

    async fn sign(&self, message: &[u8]) -> Result<Signature, SignError> {
        self.faults.yield_point().await;
        if self.faults.roll(Fault::SignerUnavailable) {
            return Err(SignError::Unavailable("asymmetricSign answered 503 (simulated)".into()));
        }
        self.inner.sign(message).await
    }

    fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), VerifyError> {
        self.inner.verify(message, signature)
    }

    fn trusted_keys(&self) -> &TrustedKeys {
        self.inner.trusted_keys()
    }
}
