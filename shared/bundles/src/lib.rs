//! Model-version bundles. A successful fit's outputs become a bundle: a
//! manifest listing every artifact with its generation, size and SHA-256,
//! signed by the platform's [`Signer`], stored beside the artifacts as
//! `{prefix}/manifest.json` (the exact signed bytes) and
//! `{prefix}/manifest.sig.json`, both create-only.
//!
//! URLs to a bundle's artifacts are minted only after its manifest verifies
//! (locally, with the keys loaded at start) and each artifact's bytes at the
//! generation the manifest names hash to the SHA-256 it names. Any mismatch is
//! [`BundleError::Integrity`]: refused, logged as an `ALARM`, for the
//! caller to audit.
//!
//! Architecture invariant: no URL to an artifact is minted from a manifest
//! that has not verified in the same call.

pub mod serving;

use std::time::Duration;

use bytes::Bytes;
use mapi_objects::{Generation, IfGeneration, ObjectError, ObjectKey, ObjectStore, SignedMethod};
use mapi_signer::{SignError, Signature, Signer, TrustedKeys};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use mapi_objects::ObjectKey as Key;

/// One artifact as the manifest pins it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub key: ObjectKey,
    pub generation: Generation,
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
}

/// A bundle's manifest: what was signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The bundle's prefix.
    pub bundle: ObjectKey,
    /// In key order.
    pub artifacts: Vec<Artifact>,
}

/// A sealed bundle: its manifest, the SHA-256 of the exact signed bytes,
/// and the signature (which names its key version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub manifest: Manifest,
    /// Hex SHA-256 of `manifest.json` as stored and signed.
    pub sha256: String,
    pub signature: Signature,
}

impl Sealed {
    fn of(manifest: Manifest, bytes: &[u8], signature: Signature) -> Sealed {
        Sealed { manifest, sha256: hex::encode(Sha256::digest(bytes)), signature }
    }
}

/// Why a bundle could not be made or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Objects(#[from] ObjectError),
    #[error(transparent)]
    Sign(#[from] SignError),
    /// The manifest does not verify, or an artifact is not the one it pins:
    /// refuse, and audit.
    #[error("bundle {bundle} failed its integrity check: {detail}")]
    Integrity { bundle: String, detail: String },
}

fn manifest_key(prefix: &ObjectKey) -> Result<ObjectKey, ObjectError> {
    prefix.join("manifest.json")
}

fn signature_key(prefix: &ObjectKey) -> Result<ObjectKey, ObjectError> {
    prefix.join("manifest.sig.json")
}

/// The line every integrity failure logs, once (the alert's log-based
/// metric matches it exactly).
pub const INTEGRITY_ALARM: &str = "ALARM bundle integrity check failed";

fn integrity(prefix: &ObjectKey, detail: impl Into<String>) -> BundleError {
    let detail = detail.into();
    tracing::error!(bundle = %prefix, %detail, "{INTEGRITY_ALARM}");
    BundleError::Integrity { bundle: prefix.to_string(), detail }
}

fn internal(e: serde_json::Error) -> BundleError {
    BundleError::Objects(ObjectError::Internal(mapi_domain::Cause::of(e)))
}

/// Seals `artifacts` under `prefix`: hashes each at the generation given
/// (the one its writer was answered with: an artifact replaced since is
/// not found there, and the seal fails rather than seal other bytes), writes the
/// manifest create-only, then signs it and writes the signature
/// create-only. Every step can be retried after a crash or a lost answer:
/// a manifest already there with the same bytes is kept and signed if its
/// signature is missing; a complete bundle is returned as it is (verified);
/// a manifest already there with other bytes (the artifacts changed since
/// it was written) is not signed again, so it stands or falls by its own
/// signature.
pub async fn seal(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
    artifacts: &[(ObjectKey, Generation)],
) -> Result<Sealed, BundleError> {
    let mut keys = artifacts.to_vec();
    keys.sort();
    keys.dedup();
    let mut pinned = Vec::with_capacity(keys.len());
    for (key, generation) in keys {
        let (meta, bytes) = objects.get(&key, Some(generation)).await?;
        pinned.push(Artifact {
            key,
            generation: meta.generation,
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(&bytes)),
        });
    }
    let manifest = Manifest { bundle: prefix.clone(), artifacts: pinned };
    let bytes = serde_json::to_vec(&manifest).map_err(internal)?;
    let written = objects
        .put(&manifest_key(prefix)?, Bytes::from(bytes.clone()), "application/json", IfGeneration::ABSENT)
        .await;
    match written {
        Ok(_) => {}
        Err(ObjectError::PreconditionFailed(_)) => {
            let (_, stored) = objects.get(&manifest_key(prefix)?, None).await?;
            if stored != bytes {
                return open(objects, signer, prefix).await;
            }
            match objects.head(&signature_key(prefix)?).await {
                Ok(_) => return open(objects, signer, prefix).await,
                Err(ObjectError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    }
    // Signing is outside I/O (KMS): only once the manifest is stored, and
    // only when no signature is.
    let signature = signer.sign(&bytes).await?;
    let sig_bytes = serde_json::to_vec(&signature).map_err(internal)?;
    let written = objects
        .put(&signature_key(prefix)?, Bytes::from(sig_bytes), "application/json", IfGeneration::ABSENT)
        .await;
    match written {
        Ok(_) => Ok(Sealed::of(manifest, &bytes, signature)),
        Err(ObjectError::PreconditionFailed(_)) => open(objects, signer, prefix).await,
        Err(e) => Err(e.into()),
    }
}

/// Writes `bytes` at `key` create-only and returns the generation that
/// holds them: a retry after a crash or a lost answer finds its own write
/// (the same bytes) and keeps it; other bytes there are an integrity
/// failure, never overwritten.
pub async fn put_once(
    objects: &dyn ObjectStore,
    key: &ObjectKey,
    bytes: Bytes,
    content_type: &str,
) -> Result<Generation, BundleError> {
    match objects.put(key, bytes.clone(), content_type, IfGeneration::ABSENT).await {
        Ok(meta) => Ok(meta.generation),
        Err(ObjectError::PreconditionFailed(_)) => {
            let (meta, stored) = objects.get(key, None).await?;
            if stored == bytes {
                Ok(meta.generation)
            } else {
                Err(integrity(key, "another object is already where this one goes"))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Reads and verifies a bundle's manifest. A missing manifest or signature
/// is an integrity failure: a sealed bundle has both.
pub async fn open(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
) -> Result<Sealed, BundleError> {
    Ok(open_bytes(objects, signer, prefix).await?.0)
}

/// [`open`], also answering the manifest's exact signed bytes.
async fn open_bytes(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
) -> Result<(Sealed, Bytes), BundleError> {
    let read = |key: ObjectKey| async move {
        match objects.get(&key, None).await {
            Ok((_, bytes)) => Ok(bytes),
            Err(ObjectError::NotFound(_)) => Err(integrity(prefix, format!("{key} is missing"))),
            Err(e) => Err(e.into()),
        }
    };
    let bytes = read(manifest_key(prefix)?).await?;
    let sig = read(signature_key(prefix)?).await?;
    let sealed = verify_manifest(prefix, &bytes, &sig, |m, s| signer.verify(m, s))?;
    Ok((sealed, bytes))
}

/// The manifest's exact signed bytes and its signature, verified and pinned
/// by `sha256`: what a verifier outside the platform checks.
pub async fn signed_manifest(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
    sha256: &str,
) -> Result<(Bytes, Signature), BundleError> {
    let (sealed, bytes) = open_bytes(objects, signer, prefix).await?;
    pinned(prefix, &sealed, sha256)?;
    Ok((bytes, sealed.signature))
}

fn pinned(prefix: &ObjectKey, sealed: &Sealed, sha256: &str) -> Result<(), BundleError> {
    if sealed.sha256 != sha256 {
        return Err(integrity(prefix, format!("the manifest is not the one recorded ({sha256})")));
    }
    Ok(())
}

/// Verifies a manifest's bytes and its signature's: the signature, that the
/// manifest is readable and that it is of bundle `prefix`. No I/O.
fn verify_manifest(
    prefix: &ObjectKey,
    bytes: &[u8],
    sig: &[u8],
    verify: impl Fn(&[u8], &Signature) -> Result<(), mapi_signer::VerifyError>,
) -> Result<Sealed, BundleError> {
    let signature: Signature =
        serde_json::from_slice(sig).map_err(|e| integrity(prefix, format!("unreadable signature: {e}")))?;
    verify(bytes, &signature).map_err(|e| integrity(prefix, e.to_string()))?;
    let manifest: Manifest =
        serde_json::from_slice(bytes).map_err(|e| integrity(prefix, format!("unreadable manifest: {e}")))?;
    if manifest.bundle != *prefix {
        return Err(integrity(prefix, format!("the manifest is of bundle {}", manifest.bundle)));
    }
    Ok(Sealed::of(manifest, bytes, signature))
}

/// The object keys of a bundle's manifest and signature, for a copy of it.
pub fn manifest_keys(prefix: &ObjectKey) -> Result<[ObjectKey; 2], ObjectError> {
    Ok([manifest_key(prefix)?, signature_key(prefix)?])
}

/// Verifies a copy of a bundle kept outside the object store (a model
/// server's): the manifest's signature under `keys`, that it is the one
/// pinned by `sha256`, and every artifact's size and SHA-256 as `read`
/// returns its bytes. Answers the artifacts with their bytes.
pub fn verify_copy(
    prefix: &ObjectKey,
    manifest: &[u8],
    signature: &[u8],
    sha256: &str,
    keys: &TrustedKeys,
    mut read: impl FnMut(&ObjectKey) -> Result<Vec<u8>, String>,
) -> Result<Vec<(Artifact, Vec<u8>)>, BundleError> {
    let sealed = verify_manifest(prefix, manifest, signature, |m, s| keys.verify(m, s))?;
    pinned(prefix, &sealed, sha256)?;
    let mut out = Vec::with_capacity(sealed.manifest.artifacts.len());
    for a in sealed.manifest.artifacts {
        let bytes = read(&a.key).map_err(|e| integrity(prefix, format!("{} cannot be read: {e}", a.key)))?;
        if bytes.len() as u64 != a.size || hex::encode(Sha256::digest(&bytes)) != a.sha256 {
            return Err(integrity(
                prefix,
                format!("{} is not the artifact the manifest pins (SHA-256 differs)", a.key),
            ));
        }
        out.push((a, bytes));
    }
    Ok(out)
}

/// Opens a bundle and checks that its manifest is exactly the one whose
/// SHA-256 was recorded when it was sealed (a model version's document).
pub async fn open_pinned(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
    sha256: &str,
) -> Result<Sealed, BundleError> {
    let sealed = open(objects, signer, prefix).await?;
    pinned(prefix, &sealed, sha256)?;
    Ok(sealed)
}

/// Every file of a verified bundle, to copy it where a model server reads
/// it: the manifest and its signature as stored, and each artifact at the
/// generation pinned, checked against its SHA-256.
pub async fn read_pinned(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
    sha256: &str,
) -> Result<Vec<(ObjectKey, Bytes)>, BundleError> {
    let sealed = open_pinned(objects, signer, prefix, sha256).await?;
    let mut files = Vec::with_capacity(sealed.manifest.artifacts.len() + 2);
    for key in manifest_keys(prefix)? {
        let (_, bytes) = objects.get(&key, None).await?;
        files.push((key, bytes));
    }
    for a in &sealed.manifest.artifacts {
        files.push((a.key.clone(), read_artifact(objects, prefix, a).await?));
    }
    Ok(files)
}

/// An artifact's bytes at the generation pinned, checked against its size
/// and SHA-256: content, not only metadata, since a store may keep a
/// generation's metadata while its bytes changed (a file edited on disk).
async fn read_artifact(
    objects: &dyn ObjectStore,
    prefix: &ObjectKey,
    a: &Artifact,
) -> Result<Bytes, BundleError> {
    let bytes = match objects.get(&a.key, Some(a.generation)).await {
        Ok((_, bytes)) => bytes,
        Err(ObjectError::NotFound(_)) => {
            return Err(integrity(prefix, format!("{} is not the generation the manifest pins", a.key)));
        }
        Err(e) => return Err(e.into()),
    };
    if bytes.len() as u64 != a.size || hex::encode(Sha256::digest(&bytes)) != a.sha256 {
        return Err(integrity(
            prefix,
            format!("{} is not the artifact the manifest pins (SHA-256 differs)", a.key),
        ));
    }
    Ok(bytes)
}

/// GET URLs to every artifact of a bundle (with the artifact as the
/// manifest pins it), minted only after its manifest verified (and, with
/// `sha256`, is the one recorded) and each artifact's bytes at the pinned
/// generation were read and hashed to the SHA-256 it pins.
pub async fn artifact_urls(
    objects: &dyn ObjectStore,
    signer: &dyn Signer,
    prefix: &ObjectKey,
    sha256: Option<&str>,
    expires_in: Duration,
) -> Result<Vec<(Artifact, String)>, BundleError> {
    let manifest = match sha256 {
        Some(sha) => open_pinned(objects, signer, prefix, sha).await?.manifest,
        None => open(objects, signer, prefix).await?.manifest,
    };
    let mut urls = Vec::with_capacity(manifest.artifacts.len());
    for a in &manifest.artifacts {
        read_artifact(objects, prefix, a).await?;
        let url = objects.signed_url(SignedMethod::Get, &a.key, expires_in).await?;
        urls.push((a.clone(), url));
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mapi_clock::VirtualClock;
    use mapi_domain::Timestamp;
    use mapi_objects::fs::FsObjectStore;
    use mapi_objects::signed::UrlSigner;
    use mapi_signer::local::LocalSigner;

    use super::*;

    fn key(s: &str) -> ObjectKey {
        ObjectKey::parse(s).expect("key")
    }

    struct Env {
        _dir: tempfile::TempDir,
        objects: FsObjectStore,
        signer: LocalSigner,
    }

    async fn env() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
        let objects = FsObjectStore::open(
            dir.path(),
            "data",
            UrlSigner::new(b"k".to_vec(), "http://127.0.0.1:9"),
            clock,
        )
        .expect("store");
        for (k, body) in
            [("t/a/runs/r1/model.json", &b"{\"w\":[1,2]}"[..]), ("t/a/runs/r1/metrics.json", b"{}")]
        {
            objects
                .put(&key(k), Bytes::from_static(body), "application/json", IfGeneration::ABSENT)
                .await
                .expect("put");
        }
        let signer = LocalSigner::from_pem(&LocalSigner::generate_pem().expect("key"), &[]).expect("signer");
        Env { _dir: dir, objects, signer }
    }

    const PREFIX: &str = "t/a/runs/r1/bundle";
    const ARTIFACTS: [&str; 2] = ["t/a/runs/r1/model.json", "t/a/runs/r1/metrics.json"];

    async fn sealed(e: &Env) -> Sealed {
        let mut artifacts = Vec::new();
        for k in ARTIFACTS {
            artifacts.push((key(k), e.objects.head(&key(k)).await.expect("head").generation));
        }
        seal(&e.objects, &e.signer, &key(PREFIX), &artifacts).await.expect("seal")
    }

    #[tokio::test]
    async fn a_sealed_bundle_pins_every_artifact_and_mints_urls() {
        let e = env().await;
        let m = sealed(&e).await;
        assert_eq!(m.manifest.artifacts.len(), 2);
        assert_eq!(m.manifest.artifacts[1].sha256, hex::encode(Sha256::digest(b"{\"w\":[1,2]}")));
        let urls = artifact_urls(&e.objects, &e.signer, &key(PREFIX), None, Duration::from_secs(60))
            .await
            .expect("urls");
        let keys: Vec<String> = urls.iter().map(|(a, _)| a.key.to_string()).collect();
        assert_eq!(keys, ["t/a/runs/r1/metrics.json", "t/a/runs/r1/model.json"]);
        let pinned = open_pinned(&e.objects, &e.signer, &key(PREFIX), &m.sha256).await.expect("pinned");
        assert_eq!(pinned.manifest, m.manifest);
        let other = open_pinned(&e.objects, &e.signer, &key(PREFIX), &"0".repeat(64)).await;
        assert!(matches!(other, Err(BundleError::Integrity { .. })), "another manifest than recorded");
        assert_eq!(sealed(&e).await, m, "a retried seal returns the sealed bundle");
    }

    #[tokio::test]
    async fn a_file_put_once_is_kept_by_a_retry_and_never_overwritten() {
        let e = env().await;
        let k = key("t/a/runs/r1/bundle/plugin/serving.json");
        let first =
            put_once(&e.objects, &k, Bytes::from_static(b"{}"), "application/json").await.expect("put");
        let again =
            put_once(&e.objects, &k, Bytes::from_static(b"{}"), "application/json").await.expect("retry");
        assert_eq!(again, first, "a retry keeps the object it wrote");
        let other = put_once(&e.objects, &k, Bytes::from_static(b"[]"), "application/json").await;
        assert!(matches!(other, Err(BundleError::Integrity { .. })), "{other:?}");
        assert_eq!(e.objects.get(&k, None).await.expect("get").1, Bytes::from_static(b"{}"));
    }

    #[tokio::test]
    async fn a_seal_that_died_after_the_manifest_is_completed_by_the_next() {
        let e = env().await;
        let m = sealed(&e).await;
        let p = key(PREFIX);
        // As if the first seal died before it wrote the signature.
        let sig = signature_key(&p).expect("key");
        let meta = e.objects.head(&sig).await.expect("signature");
        e.objects.delete(&sig, IfGeneration::Match(meta.generation)).await.expect("delete");
        assert!(matches!(open(&e.objects, &e.signer, &p).await, Err(BundleError::Integrity { .. })));
        let again = sealed(&e).await;
        assert_eq!(
            (&again.manifest, &again.sha256),
            (&m.manifest, &m.sha256),
            "the retry signs the stored manifest"
        );
        artifact_urls(&e.objects, &e.signer, &p, None, Duration::from_secs(60)).await.expect("urls");
    }

    #[tokio::test]
    async fn no_url_from_a_tampered_or_foreign_manifest_or_a_replaced_artifact() {
        let e = env().await;
        sealed(&e).await;
        let p = key(PREFIX);
        let urls = || artifact_urls(&e.objects, &e.signer, &p, None, Duration::from_secs(60));

        let (_, good) = e.objects.get(&manifest_key(&p).expect("key"), None).await.expect("manifest");
        let forged = String::from_utf8(good.to_vec()).expect("utf8").replacen("\"size\":2", "\"size\":3", 1);
        e.objects
            .put(&manifest_key(&p).expect("key"), Bytes::from(forged), "application/json", IfGeneration::Any)
            .await
            .expect("tamper");
        assert!(matches!(urls().await, Err(BundleError::Integrity { .. })), "a changed manifest");
        e.objects
            .put(&manifest_key(&p).expect("key"), good, "application/json", IfGeneration::Any)
            .await
            .expect("restore");
        urls().await.expect("the original verifies");

        let stranger =
            LocalSigner::from_pem(&LocalSigner::generate_pem().expect("key"), &[]).expect("signer");
        let r = artifact_urls(&e.objects, &stranger, &p, None, Duration::from_secs(60)).await;
        assert!(matches!(r, Err(BundleError::Integrity { .. })), "an untrusted key");

        e.objects
            .put(
                &key(ARTIFACTS[0]),
                Bytes::from_static(b"{\"w\":[9,9]}"),
                "application/json",
                IfGeneration::Any,
            )
            .await
            .expect("replace");
        assert!(matches!(urls().await, Err(BundleError::Integrity { .. })), "a replaced artifact");
    }

    /// A store may keep a generation's metadata while its bytes change (a
    /// local file edited in place): links are minted only for bytes that
    /// hash to what was signed.
    #[tokio::test]
    async fn no_url_to_bytes_changed_under_the_same_generation() {
        let e = env().await;
        let m = sealed(&e).await;
        let p = key(PREFIX);
        let a = m.manifest.artifacts.iter().find(|a| a.key.as_str() == ARTIFACTS[0]).expect("pinned");
        let file = e._dir.path().join("data").join(format!("{}#{}", a.key, a.generation.0));
        // Same length, other bytes: generation and size still match.
        std::fs::write(&file, b"{\"w\":[9,9]}").expect("edit in place");
        let head = e.objects.head(&a.key).await.expect("head");
        assert_eq!((head.generation, head.size), (a.generation, a.size), "the metadata did not change");
        let r = artifact_urls(&e.objects, &e.signer, &p, None, Duration::from_secs(60)).await;
        assert!(
            matches!(&r, Err(BundleError::Integrity { detail, .. }) if detail.contains("SHA-256 differs")),
            "{r:?}"
        );
        let r = read_pinned(&e.objects, &e.signer, &p, &m.sha256).await;
        assert!(matches!(r, Err(BundleError::Integrity { .. })), "nor served: {r:?}");
    }

    #[tokio::test]
    async fn a_copy_verifies_only_as_it_was_signed() {
        let e = env().await;
        let m = sealed(&e).await;
        let p = key(PREFIX);
        let files = read_pinned(&e.objects, &e.signer, &p, &m.sha256).await.expect("read");
        assert_eq!(files.len(), 4, "manifest, signature and two artifacts");
        let copy: std::collections::BTreeMap<String, Vec<u8>> =
            files.into_iter().map(|(k, b)| (k.to_string(), b.to_vec())).collect();
        let [mk, sk] = manifest_keys(&p).expect("keys");
        let keys = TrustedKeys::import(&e.signer.trusted_keys().export()).expect("import");
        let check = |copy: &std::collections::BTreeMap<String, Vec<u8>>, keys: &TrustedKeys| {
            verify_copy(&p, &copy[mk.as_str()], &copy[sk.as_str()], &m.sha256, keys, |k| {
                copy.get(k.as_str()).cloned().ok_or_else(|| "no such file".to_owned())
            })
        };
        let artifacts = check(&copy, &keys).expect("the copy verifies");
        assert_eq!(artifacts[1].1, b"{\"w\":[1,2]}");

        let mut changed = copy.clone();
        changed.insert(ARTIFACTS[0].into(), b"{\"w\":[1,3]}".to_vec());
        let e1 = check(&changed, &keys).expect_err("a changed artifact");
        assert!(e1.to_string().contains("SHA-256 differs"), "{e1}");
        let mut missing = copy.clone();
        missing.remove(ARTIFACTS[1]);
        assert!(check(&missing, &keys).expect_err("missing").to_string().contains("cannot be read"));
        let stranger =
            LocalSigner::from_pem(&LocalSigner::generate_pem().expect("key"), &[]).expect("signer");
        let foreign = TrustedKeys::import(&stranger.trusted_keys().export()).expect("import");
        assert!(check(&copy, &foreign).expect_err("untrusted").to_string().contains("not trusted"));
    }
}
