//! Object storage in memory, shaped after Cloud Storage (generations,
//! preconditions, pinned reads, paged listings, signed URLs), and the same
//! under the simulation's faults.
//!
//! A signed URL here is `sim://{bucket}/{key}?m={method}`: the simulated
//! worker "uses" one by parsing it back into a key ([`key_of_url`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mapi_clock::Clock;
use mapi_objects::{
    Generation, IfGeneration, ListPage, ObjectError, ObjectKey, ObjectMeta, ObjectStore, SignedMethod,
};

use crate::faults::{Fault, Faults};

#[derive(Debug, Default)]
struct Bucket {
    live: BTreeMap<String, (ObjectMeta, Bytes)>,
    next_generation: i64,
    /// Successful writes per key (a create-only key written twice is a bug).
    writes: BTreeMap<String, u32>,
}

/// One bucket in memory.
#[derive(Debug, Clone)]
pub struct MemObjects {
    bucket: String,
    clock: Arc<dyn Clock>,
    inner: Arc<Mutex<Bucket>>,
}

impl MemObjects {
    pub fn new(bucket: &str, clock: Arc<dyn Clock>) -> MemObjects {
        MemObjects { bucket: bucket.to_owned(), clock, inner: Arc::default() }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Bucket) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// How many times each key under `prefix` was written.
    pub fn writes_under(&self, prefix: &str) -> Vec<(String, u32)> {
        self.with(|b| {
            b.writes
                .range(prefix.to_owned()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, n)| (k.clone(), *n))
                .collect()
        })
    }

    /// Every live object's key and bytes, in key order (for the trace).
    pub fn snapshot(&self) -> Vec<(String, Bytes)> {
        self.with(|b| b.live.iter().map(|(k, (_, v))| (k.clone(), v.clone())).collect())
    }
}

fn live_generation(b: &Bucket, key: &str) -> Generation {
    b.live.get(key).map_or(Generation(0), |(m, _)| m.generation)
}

#[async_trait]
impl ObjectStore for MemObjects {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        let now = self.clock.now();
        self.with(|b| {
            let k = key.as_str();
            if let IfGeneration::Match(g) = precondition
                && live_generation(b, k) != g
            {
                return Err(ObjectError::PreconditionFailed(k.to_owned()));
            }
            b.next_generation += 1;
            let meta = ObjectMeta {
                key: key.clone(),
                generation: Generation(b.next_generation),
                size: bytes.len() as u64,
                content_type: content_type.to_owned(),
                created: now,
            };
            b.live.insert(k.to_owned(), (meta.clone(), bytes));
            *b.writes.entry(k.to_owned()).or_default() += 1;
            Ok(meta)
        })
    }

    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        self.with(|b| match b.live.get(key.as_str()) {
            Some((m, bytes)) if generation.is_none_or(|g| g == m.generation) => {
                Ok((m.clone(), bytes.clone()))
            }
            _ => Err(ObjectError::NotFound(key.to_string())),
        })
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        self.get(key, None).await.map(|(m, _)| m)
    }

    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError> {
        self.with(|b| {
            let k = key.as_str();
            let live = live_generation(b, k);
            if live == Generation(0) {
                return Err(ObjectError::NotFound(k.to_owned()));
            }
            if let IfGeneration::Match(g) = precondition
                && g != live
            {
                return Err(ObjectError::PreconditionFailed(k.to_owned()));
            }
            b.live.remove(k);
            Ok(())
        })
    }

    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError> {
        let after = match page_token {
            None => None,
            Some(t) => Some(
                hex::decode(t)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .filter(|k| k.starts_with(prefix))
                    .ok_or_else(|| ObjectError::InvalidArgument("invalid page token".to_owned()))?,
            ),
        };
        self.with(|b| {
            let start = after.clone().unwrap_or_else(|| prefix.to_owned());
            let mut objects: Vec<ObjectMeta> = b
                .live
                .range(start..)
                .filter(|(k, _)| after.as_ref() != Some(*k))
                .take_while(|(k, _)| k.starts_with(prefix))
                .take(max as usize + 1)
                .map(|(_, (m, _))| m.clone())
                .collect();
            let next_page_token = if objects.len() > max as usize {
                objects.truncate(max as usize);
                objects.last().map(|m| hex::encode(m.key.as_str()))
            } else {
                None
            };
            Ok(ListPage { objects, next_page_token })
        })
    }

    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        _: Duration,
    ) -> Result<String, ObjectError> {
        Ok(format!("sim://{}/{}?m={}", self.bucket, key.as_str(), method.as_str()))
    }
}

/// The key a URL of [`MemObjects::signed_url`] names.
pub fn key_of_url(url: &str) -> Option<ObjectKey> {
    let rest = url.strip_prefix("sim://")?;
    let (_, key) = rest.split_once('/')?;
    let key = key.split_once('?').map_or(key, |(k, _)| k);
    ObjectKey::parse(key).ok()
}

/// A bucket under the simulation's faults: any call may answer 503 before
/// it does anything; a write may apply and lose its answer, or apply and
/// kill the process.
#[derive(Debug, Clone)]
pub struct SimObjects {
    pub inner: MemObjects,
    faults: Arc<Faults>,
}

impl SimObjects {
    pub fn new(inner: MemObjects, faults: Arc<Faults>) -> SimObjects {
        SimObjects { inner, faults }
    }

    async fn before(&self) -> Result<(), ObjectError> {
        self.faults.yield_point().await;
        if self.faults.roll(Fault::ObjectsRefused) {
            return Err(ObjectError::Unavailable("503 (simulated)".into()));
        }
        Ok(())
    }

    async fn after<T>(&self, applied: Result<T, ObjectError>) -> Result<T, ObjectError> {
        if applied.is_ok() {
            self.faults.crash_point().await;
            if self.faults.roll(Fault::ObjectsAnswerLost) {
                return Err(ObjectError::Unavailable("the answer was lost (simulated)".into()));
            }
        }
        applied
    }
}

#[async_trait]
impl ObjectStore for SimObjects {
    fn bucket(&self) -> &str {
        self.inner.bucket()
    }

    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        self.before().await?;
        let applied = self.inner.put(key, bytes, content_type, precondition).await;
        self.after(applied).await
    }

    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        self.before().await?;
        self.inner.get(key, generation).await
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        self.before().await?;
        self.inner.head(key).await
    }

    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError> {
        self.before().await?;
        let applied = self.inner.delete(key, precondition).await;
        self.after(applied).await
    }

    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError> {
        self.before().await?;
        self.inner.list(prefix, page_token, max).await
    }

    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        expires_in: Duration,
    ) -> Result<String, ObjectError> {
        self.inner.signed_url(method, key, expires_in).await
    }
}

#[cfg(test)]
mod conformance {
    use super::*;

    fn make() -> ((), MemObjects) {
        let clock: Arc<dyn Clock> =
            Arc::new(mapi_clock::VirtualClock::new(mapi_domain::Timestamp::from_secs(1_800_000_000)));
        ((), MemObjects::new("test", clock))
    }

    mapi_objects::objects_conformance_suite!(make());
}
