//! An object store that fails on purpose, to prove what callers rely on
//! when the real one fails: the first writes (puts and deletes) can be
//! refused before they reach the bucket (the service was unavailable), and
//! the answers of the next can be lost after the bucket applied them (the
//! connection dropped on the way back). Both answer `Unavailable`, as the
//! port's failure model allows, so a caller cannot tell them apart and must
//! retry in a way that is right for both. Reads, listings and URL signing
//! pass through (an upload to a signed URL does not go through the wrapper).
//! The conformance suite runs its failure cases through it on every adapter.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    Generation, IfGeneration, ListPage, ObjectError, ObjectKey, ObjectMeta, ObjectStore, SignedMethod,
};

/// Wraps `inner`, failing the first `refuse` writes and losing the answers
/// of the `lose` writes after them (`Unreliable::new(inner).refuse_next(1)`).
pub type Unreliable<'a> = mapi_faults::Unreliable<'a, dyn ObjectStore + 'a>;

/// The port's answer to a refused write or a lost answer.
fn unavailable(detail: &'static str) -> ObjectError {
    ObjectError::Unavailable(detail.into())
}

#[async_trait]
impl ObjectStore for Unreliable<'_> {
    fn bucket(&self) -> &str {
        self.inner().bucket()
    }

    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        self.write(self.inner().put(key, bytes, content_type, precondition), unavailable).await
    }

    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        self.inner().get(key, generation).await
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        self.inner().head(key).await
    }

    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError> {
        self.write(self.inner().delete(key, precondition), unavailable).await
    }

    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError> {
        self.inner().list(prefix, page_token, max).await
    }

    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        expires_in: Duration,
    ) -> Result<String, ObjectError> {
        self.inner().signed_url(method, key, expires_in).await
    }
}
