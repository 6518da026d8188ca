//! Sealing a succeeded run's outputs into its model version.
//!
//! Only a method that fits a model (`MethodSpec::model` in the registry,
//! [`needed`]) has its runs sealed: a run of any other method becomes
//! `succeeded` with its outputs alone, no bundle and no version.
//!
//! For a model-producing method, the finalization that would make a run
//! `succeeded` first seals the attempt's outputs into a bundle
//! (`mapi_bundles::seal`: hashes, a signed manifest, create-only), outside
//! any transaction because signing is outside I/O (Cloud KMS) and a
//! transaction may rerun. Only then does the commit that makes the run
//! `succeeded` create the version's document, so a run of a
//! model-producing method is `succeeded` exactly when its version exists;
//! other runs never have one. A seal that fails answers 503: the attempt
//! stays unfinalized, the queue redelivers the finalize task and the
//! reconciler re-pushes it, and the next seal completes the bundle the last
//! one left (every write is create-only and the version id is derived from
//! the run's).
//!
//! A model version served by Python (a plugin's, or one of the platform's
//! own Python methods) also seals a serving descriptor
//! (`mapi_bundles::serving`), and a plugin's a copy of its package, so an
//! endpoint runs its `predict` from the bundle alone, verified like every
//! artifact.

use mapi_bundles::BundleError;
use mapi_domain::{AttemptNo, ModelVersionId, Timestamp};
use mapi_lifecycle::RunDoc;
use mapi_objects::{ObjectKey, ObjectMeta};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{ModelVersionDoc, layout};
use sha2::Digest as _;

/// Whether `run` is sealed when it succeeds: its method fits a model. For a
/// built-in it is read from the registry at finalization (a method the
/// registry no longer holds fits none); a plugin method fits one when its
/// manifest named a model output, as recorded with the run.
pub fn needed(run: &RunDoc) -> bool {
    match run.plugin() {
        Some(code) => code.model.is_some(),
        None => mapi_methods::produces_model(run.method()),
    }
}

/// Every output object stored under an attempt's directory (all its
/// tasks), in key order, with the generation and size stored: what the
/// verdict checks against the tasks' reports and the seal pins.
pub async fn stored_outputs(
    state: &AppState,
    run: &RunDoc,
    attempt: AttemptNo,
) -> Result<Vec<ObjectMeta>, ApiError> {
    let dir = layout::attempt_dir(run.tenant(), run.project(), run.id(), attempt);
    let prefix = format!("{dir}/");
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = state.objects.list(&prefix, token.as_deref(), 1000).await?;
        keys.extend(page.objects.into_iter().filter(|m| layout::output_name(&dir, m.key.as_str()).is_some()));
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return Ok(keys),
        }
    }
}

/// Seals the outputs of `attempt` of `run` (a run [`needed`] says is
/// sealed) at the generations `stored` lists (checked against what its
/// tasks wrote) and returns the version's document, to be created in the
/// commit that makes the run `succeeded`.
pub async fn seal(
    state: &AppState,
    run: &RunDoc,
    attempt: AttemptNo,
    stored: &[ObjectMeta],
    now: Timestamp,
) -> Result<ModelVersionDoc, ApiError> {
    let mut artifacts: Vec<_> = stored.iter().map(|m| (m.key.clone(), m.generation)).collect();
    let prefix = ObjectKey::parse(&layout::bundle(run.tenant(), run.project(), run.id()))
        .map_err(|e| ApiError::internal_from(format!("bundle prefix of {}", run.id()), e))?;
    let sealing = async {
        artifacts.extend(serving_files(state, run, attempt, &prefix, stored).await?);
        mapi_bundles::seal(&*state.objects, &*state.signer, &prefix, &artifacts).await
    };
    let sealed = match sealing.await {
        Ok(s) => s,
        Err(e) => {
            if matches!(e, BundleError::Integrity { .. }) {
                // Already logged as an ALARM by the bundle: a bundle of this
                // run is there and does not verify. The run waits (503) for
                // an operator rather than succeed without a version.
                state.metrics.bundle_integrity_failures.inc();
            }
            tracing::warn!(run = %run.id(), attempt = %attempt, error = %e, "sealing the run's outputs failed; the finalization is retried");
            return Err(ApiError::unavailable("the run's outputs could not be sealed yet; retry", 10));
        }
    };
    Ok(ModelVersionDoc {
        id: ModelVersionId::of_run(run.id()),
        tenant: run.tenant().clone(),
        project: run.project().clone(),
        run: run.id().clone(),
        attempt,
        method: run.method().to_owned(),
        bundle: prefix.to_string(),
        manifest_sha256: sealed.sha256,
        key_version: sealed.signature.key_version,
        artifact_count: u32::try_from(sealed.manifest.artifacts.len()).unwrap_or(u32::MAX),
        expired_at: None,
        bytes_since: Some(now),
        deprecated: None,
        created_at: now,
    })
}

/// Writes the serving descriptor of a model version served by Python (and
/// a plugin's package copy) under the bundle's prefix, create-only so a
/// retried seal keeps what the last one wrote, and returns them as artifacts
/// to seal; none for a model served by the Rust server. A package whose
/// bytes are not the digest the run recorded is an integrity failure.
async fn serving_files(
    state: &AppState,
    run: &RunDoc,
    attempt: AttemptNo,
    prefix: &ObjectKey,
    stored: &[ObjectMeta],
) -> Result<Vec<(ObjectKey, mapi_objects::Generation)>, BundleError> {
    use mapi_bundles::serving::{self, ServedCode, Serving};
    let integrity = |detail: String| BundleError::Integrity { bundle: prefix.to_string(), detail };
    let builtin = mapi_methods::find(run.method()).filter(|m| m.python.is_some());
    let (code, name, package) = match (run.plugin(), builtin) {
        (Some(code), _) => {
            let package = ObjectKey::parse(&code.object).map_err(BundleError::Objects)?;
            let (_, bytes) = state.objects.get(&package, None).await?;
            let digest = hex::encode(sha2::Sha256::digest(&bytes));
            if digest != code.sha256 {
                return Err(integrity(format!(
                    "package {} has SHA-256 {digest}, not {}",
                    code.object, code.sha256
                )));
            }
            let served = ServedCode::Plugin {
                plugin: code.name.clone(),
                version: code.version.clone(),
                method: code.method.clone(),
                package_sha256: code.sha256.clone(),
            };
            (served, code.model.clone().unwrap_or_default(), Some(bytes))
        }
        (None, Some(m)) => {
            let name = m.model.map(|s| s.file.to_owned()).unwrap_or_default();
            (ServedCode::Builtin { method: m.name.to_owned() }, name, None)
        }
        (None, None) => return Ok(Vec::new()),
    };
    let dir = layout::attempt_dir(run.tenant(), run.project(), run.id(), attempt);
    let model = stored
        .iter()
        .find(|m| {
            layout::output_name(&dir, m.key.as_str())
                .is_some_and(|n| n == name || n.ends_with(&format!("/{name}")))
        })
        .ok_or_else(|| integrity(format!("the model output {name} is not among the run's outputs")))?;
    let descriptor = Serving { code, model: model.key.to_string(), model_name: name };
    let mut files =
        vec![(serving::DESCRIPTOR, bytes::Bytes::from(descriptor.to_bytes()), "application/json")];
    files.extend(package.map(|bytes| (serving::PACKAGE, bytes, "application/x-tar")));
    let mut sealed = Vec::with_capacity(files.len());
    for (file, bytes, media) in files {
        let key = ObjectKey::parse(&serving::key(prefix.as_str(), file)).map_err(BundleError::Objects)?;
        let generation = mapi_bundles::put_once(&*state.objects, &key, bytes, media).await?;
        sealed.push((key, generation));
    }
    Ok(sealed)
}
