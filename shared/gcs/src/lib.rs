//! The Cloud Storage adapter of the ObjectStore port (`MAPI_OBJECTS=gcs`).
//!
//! - **Writes** go through the official `google-cloud-storage` crate as
//!   buffered uploads, with `ifGenerationMatch` (create-only is
//!   `Match(0)`); a 412 is told by the HTTP status and is
//!   `PreconditionFailed`. The crate sends the CRC32C and MD5 of the bytes,
//!   and every answer is checked: the object Cloud Storage stored must
//!   carry both, equal to ours, or the put fails as `Internal`.
//! - **A lost answer** (an I/O error or timeout after the upload may have
//!   reached Cloud Storage) is retried once with the same precondition. If
//!   that retry gets a 412, the first attempt may have written: it counts
//!   as done only when the live object has our CRC32C, MD5 and size,
//!   otherwise it is `PreconditionFailed`.
//! - **Reads** are pinned: the metadata is read first and the bytes are
//!   read at that generation, then checked against its CRC32C. An
//!   unpinned read whose object was replaced in between reads again.
//! - **Metadata, deletes and listings** use the JSON API over `reqwest`:
//!   the crate offers them only in its gRPC `StorageControl` client. Page
//!   tokens are wrapped with the prefix they belong to, so a token from
//!   elsewhere is refused before any call.
//! - **Signed URLs** are V4 (`GOOG4-RSA-SHA256`, [`v4`]); a create-only
//!   PUT URL signs `x-goog-if-generation-match: 0`, so it cannot overwrite
//!   and the uploader must send that header. POST policies ([`policy`]) are
//!   signed by the create-only uploader account. Both are signed by a
//!   [`signing::BlobSigner`]: a JSON key or the IAM Credentials `signBlob`.
//!
//! URLs are path-style against `MAPI_GCS_URL_BASE`. A POST policy limits
//! the bucket, the key, the size and the time; it is create-only because
//! its uploader account has `storage.objects.create` but not
//! `storage.objects.delete` (a POST form takes no generation precondition,
//! and replacing an object needs delete). `signBlob` runs as the service's
//! own account (configurable endpoint; a 429 or 5xx is `Unavailable`).
//! Credentials are Application Default Credentials through
//! `google-cloud-auth` in the cloud, and anonymous towards a plain-http
//! fake. The settings and their variables are in [`settings::VARIABLES`].
//! A lost-answer retry that meets a 412 also checks the live object is not
//! the generation the write was to replace.
//!
//! Architecture invariant: a put returns `Ok` only for an object whose
//! stored CRC32C and MD5 are those of the bytes given; a create-only write,
//! URL or policy never replaces an object.
//!
//! Architecture invariant: signing never needs a key file on Cloud Run
//! (`signBlob` as the service's own account); a key file is only a
//! configured alternative.
//!
//! Tested in `tests/tests/objects_gcs.rs` against fake-gcs-server (installed
//! from PyPI by the test harness) behind `GcsProxy` (which gives the media
//! part the metadata's content type, as Cloud Storage reads it, and loses
//! answers and corrupts checksums on demand), with `SigningFront` checking
//! V4 URLs and POST policies and `FakeSignBlob` playing IAM Credentials.
//! Checked only against real Cloud Storage:
//!
//! - deletes under a generation precondition (fake-gcs ignores them; the
//!   case is proven on the local object store);
//! - that Cloud Storage itself refuses an upload whose CRC32C or MD5 does
//!   not match the bytes;
//! - the service's own V4 and POST-policy verification (the front follows
//!   Google's documentation; the canonical request is checked against one
//!   derived by hand, and whole URLs byte for byte against the official
//!   crate's `SignedUrlBuilder` with the same key and time);
//! - IAM's rule that replacing an object needs `storage.objects.delete`;
//! - resumable uploads (objects of 16 MiB and more);
//! - `signBlob` with real ADC tokens.

pub mod policy;
pub mod settings;
pub mod signing;
pub mod v4;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use google_cloud_auth::credentials::{AccessTokenCredentials, Credentials as GoogleCredentials};
use google_cloud_gax::error::Error as GaxError;
use google_cloud_storage::client::Storage;
use mapi_domain::Timestamp;
use mapi_objects::{
    Generation, IfGeneration, ListPage, ObjectError, ObjectKey, ObjectMeta, ObjectStore, SignedMethod,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

pub use policy::PostPolicy;
pub use settings::{Settings, SignerSettings};
use signing::{BlobSigner, KeySigner, SignBlobSigner, SigningError};

/// How the clients authenticate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Application Default Credentials (the service's own account on Cloud Run).
    ApplicationDefault,
    /// No credentials: only for a local fake.
    Anonymous,
}

/// Bearer tokens for the calls made with `reqwest` (JSON API, signBlob).
pub(crate) struct Auth(Option<AccessTokenCredentials>);

impl Auth {
    /// The current access token; `None` when anonymous.
    pub(crate) async fn token(&self) -> Result<Option<String>, String> {
        match &self.0 {
            None => Ok(None),
            Some(c) => {
                c.access_token().await.map(|t| Some(t.token)).map_err(|e| format!("no access token: {e}"))
            }
        }
    }
}

/// Why the store could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the Cloud Storage object store: {0}")]
pub struct BuildError(String);

/// One bucket in Cloud Storage.
#[derive(Clone)]
pub struct GcsObjectStore {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    storage: Storage,
    http: reqwest::Client,
    auth: Arc<Auth>,
    /// `{endpoint}/storage/v1/b/{bucket}/o`.
    objects_url: String,
    signer: Option<Arc<dyn BlobSigner>>,
    uploader: Option<Arc<dyn BlobSigner>>,
}

impl std::fmt::Debug for GcsObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsObjectStore")
            .field("bucket", &self.inner.settings.bucket)
            .field("endpoint", &self.inner.settings.endpoint)
            .field("signer", &self.inner.signer)
            .field("uploader", &self.inner.uploader)
            .finish_non_exhaustive()
    }
}

fn make_signer(
    s: &SignerSettings,
    settings: &Settings,
    auth: &Arc<Auth>,
) -> Result<Arc<dyn BlobSigner>, BuildError> {
    Ok(match s {
        SignerSettings::KeyFile(path) => {
            Arc::new(KeySigner::from_file(path).map_err(|e| BuildError(e.to_string()))?)
        }
        SignerSettings::SignBlob(email) => Arc::new(SignBlobSigner::new(
            email.clone(),
            settings.iam_credentials_endpoint.clone(),
            auth.clone(),
        )),
    })
}

/// What a single upload attempt came to.
enum Attempt {
    Done(Box<google_cloud_storage::model::Object>),
    /// 412.
    Precondition,
    /// No answer: the upload may or may not have been stored.
    Lost(String),
    Failed(ObjectError),
}

/// An object resource of the JSON API (the fields read here).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonObject {
    name: String,
    generation: String,
    size: String,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    time_created: Option<String>,
    #[serde(default)]
    crc32c: Option<String>,
    #[serde(default)]
    md5_hash: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonList {
    #[serde(default)]
    items: Vec<JsonObject>,
    #[serde(default)]
    next_page_token: Option<String>,
}

/// A page token of this adapter: Cloud Storage's, bound to its prefix.
#[derive(Serialize, Deserialize)]
struct PageToken {
    prefix: String,
    token: String,
}

/// The stored object's checksums as the JSON API gives them.
struct Stored {
    meta: ObjectMeta,
    crc32c: Option<u32>,
    md5: Option<Vec<u8>>,
}

impl JsonObject {
    fn into_stored(self) -> Result<Stored, ObjectError> {
        let bad = |what: &str| {
            ObjectError::Internal(format!("Cloud Storage answered a bad {what} for {}", self.name).into())
        };
        let key =
            ObjectKey::parse(&self.name).map_err(|_| bad("object name (not a key this store writes)"))?;
        let generation = self.generation.parse::<i64>().map_err(|_| bad("generation"))?;
        let size = self.size.parse::<u64>().map_err(|_| bad("size"))?;
        let created = match &self.time_created {
            Some(t) => Timestamp::parse_rfc3339(t).map_err(|_| bad("timeCreated"))?,
            None => return Err(bad("timeCreated")),
        };
        let crc32c = match &self.crc32c {
            Some(c) => Some(
                STANDARD
                    .decode(c)
                    .ok()
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map(u32::from_be_bytes)
                    .ok_or_else(|| bad("crc32c"))?,
            ),
            None => None,
        };
        let md5 = match &self.md5_hash {
            Some(m) => Some(STANDARD.decode(m).map_err(|_| bad("md5Hash"))?),
            None => None,
        };
        let content_type = self.content_type.clone().unwrap_or_else(|| "application/octet-stream".to_owned());
        Ok(Stored {
            meta: ObjectMeta { key, generation: Generation(generation), size, content_type, created },
            crc32c,
            md5,
        })
    }
}

fn status_error(what: &str, status: u16, key: &str, detail: &str) -> ObjectError {
    match status {
        404 => ObjectError::NotFound(key.to_owned()),
        412 => ObjectError::PreconditionFailed(key.to_owned()),
        400 => ObjectError::InvalidArgument(format!("{what} {key}: {detail}")),
        408 | 429 | 500..=599 => ObjectError::Unavailable(format!("{what} {key}: HTTP {status}").into()),
        _ => ObjectError::Internal(format!("{what} {key}: HTTP {status}: {detail}").into()),
    }
}

fn signing_error(e: SigningError) -> ObjectError {
    match e {
        SigningError::Unavailable(m) => ObjectError::Unavailable(m.into()),
        SigningError::Config(m) | SigningError::Integrity(m) => ObjectError::Internal(m.into()),
    }
}

fn gax_error(what: &str, key: &str, e: &GaxError) -> ObjectError {
    match e.http_status_code() {
        Some(status) => status_error(what, status, key, &e.to_string()),
        None => ObjectError::Unavailable(format!("{what} {key}: {e}").into()),
    }
}

/// Whether an error without an HTTP status may have happened after the
/// request reached Cloud Storage.
fn answer_lost(e: &GaxError) -> bool {
    e.http_status_code().is_none()
        && !(e.is_authentication() || e.is_binding() || e.is_serialization() || e.is_deserialization())
}

impl GcsObjectStore {
    /// Builds the clients and the signers the settings name.
    pub async fn new(settings: Settings, credentials: Credentials) -> Result<GcsObjectStore, BuildError> {
        settings.validate().map_err(BuildError)?;
        let token = match credentials {
            Credentials::ApplicationDefault => Some(
                google_cloud_auth::credentials::Builder::default()
                    .build_access_token_credentials()
                    .map_err(|e| BuildError(e.to_string()))?,
            ),
            Credentials::Anonymous => None,
        };
        let google: GoogleCredentials = match &token {
            Some(t) => t.clone().into(),
            None => google_cloud_auth::credentials::anonymous::Builder::new().build(),
        };
        let mut b = Storage::builder()
            .with_credentials(google)
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
        if let Some(e) = &settings.endpoint {
            b = b.with_endpoint(e.clone());
        }
        let storage = b.build().await.map_err(|e| BuildError(e.to_string()))?;
        let auth = Arc::new(Auth(token));
        let root = settings.endpoint.as_deref().unwrap_or(settings::URL_BASE).trim_end_matches('/');
        let objects_url = format!("{root}/storage/v1/b/{}/o", settings.bucket);
        let signer = settings.signer.as_ref().map(|s| make_signer(s, &settings, &auth)).transpose()?;
        let uploader = settings.uploader.as_ref().map(|s| make_signer(s, &settings, &auth)).transpose()?;
        Ok(GcsObjectStore {
            inner: Arc::new(Inner {
                settings,
                storage,
                http: reqwest::Client::new(),
                auth,
                objects_url,
                signer,
                uploader,
            }),
        })
    }

    fn bucket_path(&self) -> String {
        format!("projects/_/buckets/{}", self.inner.settings.bucket)
    }

    async fn request(
        &self,
        method: reqwest::Method,
        url: String,
    ) -> Result<reqwest::RequestBuilder, ObjectError> {
        let mut req = self.inner.http.request(method, url);
        if let Some(t) = self.inner.auth.token().await.map_err(|e| ObjectError::Unavailable(e.into()))? {
            req = req.bearer_auth(t);
        }
        Ok(req)
    }

    /// The JSON API's metadata of `key`, at `generation` or the live one.
    async fn stored(&self, key: &ObjectKey, generation: Option<Generation>) -> Result<Stored, ObjectError> {
        let url = format!("{}/{}", self.inner.objects_url, v4::percent_encode(key.as_str(), false));
        let mut req = self.request(reqwest::Method::GET, url).await?;
        if let Some(g) = generation {
            req = req.query(&[("generation", g.0)]);
        }
        let answer = req
            .send()
            .await
            .map_err(|e| ObjectError::Unavailable(mapi_domain::Cause::new(format!("get {key}"), e)))?;
        let status = answer.status().as_u16();
        if status != 200 {
            let body = answer.text().await.unwrap_or_default();
            return Err(status_error("get", status, key.as_str(), &body));
        }
        let object: JsonObject = answer.json().await.map_err(|e| {
            ObjectError::Internal(mapi_domain::Cause::new(
                format!("get {key}: the answer is not an object"),
                e,
            ))
        })?;
        object.into_stored()
    }

    async fn upload(&self, key: &ObjectKey, bytes: &Bytes, content_type: &str, p: IfGeneration) -> Attempt {
        let (crc, md5) = (crc32c::crc32c(bytes), md5::compute(bytes).0);
        let mut w = self
            .inner
            .storage
            .write_object(self.bucket_path(), key.as_str(), bytes.clone())
            .set_content_type(content_type)
            .with_known_crc32c(crc)
            .with_known_md5_hash(md5);
        if let IfGeneration::Match(g) = p {
            w = w.set_if_generation_match(g.0);
        }
        match w.send_buffered().await {
            Ok(o) => Attempt::Done(Box::new(o)),
            Err(e) if e.http_status_code() == Some(412) => Attempt::Precondition,
            // The crate's own check of the answer's checksums against the
            // bytes sent (it reports a mismatch as a serialization error).
            Err(e) if e.is_serialization() => {
                Attempt::Failed(ObjectError::Internal(mapi_domain::Cause::new(format!("put {key}"), e)))
            }
            Err(e) if answer_lost(&e) => Attempt::Lost(e.to_string()),
            Err(e) => Attempt::Failed(gax_error("put", key.as_str(), &e)),
        }
    }

    /// The metadata of a written object, once its checksums are ours.
    fn checked(
        key: &ObjectKey,
        o: &google_cloud_storage::model::Object,
        bytes: &Bytes,
    ) -> Result<ObjectMeta, ObjectError> {
        let sums = o.checksums.as_ref();
        let crc = sums.and_then(|s| s.crc32c);
        let md5 = sums.map(|s| s.md5_hash.as_ref());
        if crc != Some(crc32c::crc32c(bytes)) || md5 != Some(&md5::compute(bytes).0[..]) {
            return Err(ObjectError::Internal(format!(
                "put {key}: Cloud Storage stored an object whose CRC32C or MD5 is not that of the bytes sent"
            ).into()));
        }
        if u64::try_from(o.size).ok() != Some(bytes.len() as u64) {
            return Err(ObjectError::Internal(
                format!("put {key}: stored {} bytes, sent {}", o.size, bytes.len()).into(),
            ));
        }
        let created = o
            .create_time
            .as_ref()
            .and_then(|t| Timestamp::parse_rfc3339(&String::from(*t)).ok())
            .ok_or_else(|| {
            ObjectError::Internal(format!("put {key}: the answer has no creation time").into())
        })?;
        Ok(ObjectMeta {
            key: key.clone(),
            generation: Generation(o.generation),
            size: bytes.len() as u64,
            content_type: o.content_type.clone(),
            created,
        })
    }

    /// After a lost answer and a 412: the live object is ours if it holds
    /// exactly our bytes (and, for a replace, is not the generation we
    /// were to replace).
    async fn adopt(
        &self,
        key: &ObjectKey,
        bytes: &Bytes,
        p: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        let stored = match self.stored(key, None).await {
            Ok(s) => s,
            Err(ObjectError::NotFound(_)) => return Err(ObjectError::PreconditionFailed(key.to_string())),
            Err(e) => return Err(e),
        };
        let ours = stored.crc32c == Some(crc32c::crc32c(bytes))
            && stored.md5.as_deref() == Some(&md5::compute(bytes).0[..])
            && stored.meta.size == bytes.len() as u64
            && p != IfGeneration::Match(stored.meta.generation);
        if ours {
            tracing::info!(%key, generation = stored.meta.generation.0, "a put whose answer was lost had stored the object");
            Ok(stored.meta)
        } else {
            Err(ObjectError::PreconditionFailed(key.to_string()))
        }
    }

    /// The bytes of exactly the generation `stored` describes, checked
    /// against its CRC32C and size.
    async fn read_pinned(&self, key: &ObjectKey, stored: &Stored) -> Result<Bytes, ObjectError> {
        let mut read = self
            .inner
            .storage
            .read_object(self.bucket_path(), key.as_str())
            .set_generation(stored.meta.generation.0)
            .send()
            .await
            .map_err(|e| gax_error("read", key.as_str(), &e))?;
        let mut body = Vec::with_capacity(usize::try_from(stored.meta.size).unwrap_or(0));
        while let Some(chunk) = read.next().await {
            body.extend_from_slice(&chunk.map_err(|e| gax_error("read", key.as_str(), &e))?);
        }
        if stored.crc32c.is_some_and(|c| c != crc32c::crc32c(&body)) || body.len() as u64 != stored.meta.size
        {
            return Err(ObjectError::Unavailable(
                format!("read {key}: the bytes do not match the stored CRC32C or size").into(),
            ));
        }
        Ok(Bytes::from(body))
    }

    /// A signed create-only form upload of `key`, at most `max_bytes`,
    /// signed by the uploader account.
    pub async fn post_policy(
        &self,
        key: &ObjectKey,
        max_bytes: u64,
        expires_in: Duration,
    ) -> Result<PostPolicy, ObjectError> {
        let signer = self.inner.uploader.as_deref().ok_or_else(|| {
            ObjectError::Internal(
                "POST policies need MAPI_GCS_UPLOADER_SERVICE_ACCOUNT or MAPI_GCS_UPLOADER_KEY_FILE".into(),
            )
        })?;
        let req = policy::PolicyRequest {
            base: &self.inner.settings.url_base,
            bucket: &self.inner.settings.bucket,
            object: key.as_str(),
            max_bytes,
            expires_in,
        };
        policy::sign_policy(signer, &req, OffsetDateTime::now_utc()).await.map_err(signing_error)
    }
}

#[async_trait]
impl ObjectStore for GcsObjectStore {
    fn bucket(&self) -> &str {
        &self.inner.settings.bucket
    }

    async fn put(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        content_type: &str,
        precondition: IfGeneration,
    ) -> Result<ObjectMeta, ObjectError> {
        let first = match self.upload(key, &bytes, content_type, precondition).await {
            Attempt::Lost(e) => e,
            Attempt::Done(o) => return Self::checked(key, &o, &bytes),
            Attempt::Precondition => return Err(ObjectError::PreconditionFailed(key.to_string())),
            Attempt::Failed(e) => return Err(e),
        };
        tracing::warn!(%key, error = %first, "the answer to a put was lost; trying once more");
        match self.upload(key, &bytes, content_type, precondition).await {
            Attempt::Done(o) => Self::checked(key, &o, &bytes),
            Attempt::Precondition => self.adopt(key, &bytes, precondition).await,
            Attempt::Lost(e) => {
                Err(ObjectError::Unavailable(format!("put {key}: no answer twice: {e}").into()))
            }
            Attempt::Failed(e) => Err(e),
        }
    }

    async fn get(
        &self,
        key: &ObjectKey,
        generation: Option<Generation>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        // Unpinned, the live generation may be replaced between the
        // metadata and the bytes: then read the new one, a few times.
        let mut tries = if generation.is_some() { 1 } else { 3 };
        loop {
            let stored = self.stored(key, generation).await?;
            match self.read_pinned(key, &stored).await {
                Err(ObjectError::NotFound(_)) if tries > 1 => tries -= 1,
                Ok(bytes) => return Ok((stored.meta, bytes)),
                Err(e) => return Err(e),
            }
        }
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        Ok(self.stored(key, None).await?.meta)
    }

    async fn delete(&self, key: &ObjectKey, precondition: IfGeneration) -> Result<(), ObjectError> {
        let url = format!("{}/{}", self.inner.objects_url, v4::percent_encode(key.as_str(), false));
        let mut req = self.request(reqwest::Method::DELETE, url).await?;
        if let IfGeneration::Match(g) = precondition {
            req = req.query(&[("ifGenerationMatch", g.0)]);
        }
        let answer = req
            .send()
            .await
            .map_err(|e| ObjectError::Unavailable(mapi_domain::Cause::new(format!("delete {key}"), e)))?;
        let status = answer.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let body = answer.text().await.unwrap_or_default();
        Err(status_error("delete", status, key.as_str(), &body))
    }

    async fn list(&self, prefix: &str, page_token: Option<&str>, max: u32) -> Result<ListPage, ObjectError> {
        let token = match page_token {
            None => None,
            Some(t) => {
                let decoded: Option<PageToken> =
                    URL_SAFE_NO_PAD.decode(t).ok().and_then(|b| serde_json::from_slice(&b).ok());
                match decoded {
                    Some(d) if d.prefix == prefix => Some(d.token),
                    _ => {
                        return Err(ObjectError::InvalidArgument(
                            "the page token is not one this listing returned".into(),
                        ));
                    }
                }
            }
        };
        let mut req = self
            .request(reqwest::Method::GET, self.inner.objects_url.clone())
            .await?
            .query(&[("prefix", prefix)])
            .query(&[("maxResults", max.clamp(1, 1000))]);
        if let Some(t) = &token {
            req = req.query(&[("pageToken", t)]);
        }
        let answer = req
            .send()
            .await
            .map_err(|e| ObjectError::Unavailable(mapi_domain::Cause::new(format!("list {prefix}"), e)))?;
        let status = answer.status().as_u16();
        if status != 200 {
            let body = answer.text().await.unwrap_or_default();
            return Err(status_error("list", status, prefix, &body));
        }
        let page: JsonList = answer.json().await.map_err(|e| {
            ObjectError::Internal(mapi_domain::Cause::new(
                format!("list {prefix}: the answer is not a listing"),
                e,
            ))
        })?;
        let objects =
            page.items.into_iter().map(|o| o.into_stored().map(|s| s.meta)).collect::<Result<Vec<_>, _>>()?;
        let next_page_token = page.next_page_token.filter(|t| !t.is_empty()).map(|token| {
            let t = PageToken { prefix: prefix.to_owned(), token };
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).unwrap_or_default())
        });
        Ok(ListPage { objects, next_page_token })
    }

    async fn signed_url(
        &self,
        method: SignedMethod,
        key: &ObjectKey,
        expires_in: Duration,
    ) -> Result<String, ObjectError> {
        let signer = self.inner.signer.as_deref().ok_or_else(|| {
            ObjectError::Internal(
                "signed URLs need MAPI_GCS_SIGNING_SERVICE_ACCOUNT or MAPI_GCS_SIGNING_KEY_FILE".into(),
            )
        })?;
        let headers: &[(&str, &str)] = match method {
            SignedMethod::PutCreateOnly => &[("x-goog-if-generation-match", "0")],
            SignedMethod::Get | SignedMethod::Put => &[],
        };
        let req = v4::UrlRequest {
            method: method.http_method(),
            base: &self.inner.settings.url_base,
            bucket: &self.inner.settings.bucket,
            object: key.as_str(),
            headers,
            expires_in,
        };
        v4::sign_url(signer, &req, OffsetDateTime::now_utc()).await.map_err(signing_error)
    }
}
