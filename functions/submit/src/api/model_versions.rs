//! Model versions: the signed bundles of the outputs of succeeded runs of
//! model-producing methods (sealed by `meter` in the commit that makes such
//! a run `succeeded`; other runs have none). Listed from their
//! records; read and downloaded only through their manifest, which is
//! verified at every request before anything of it is shown or any URL is
//! minted. Authorized exactly as the run they come from (reading a run).
//!
//! Minting artifact URLs is audited. An integrity failure (a manifest that does not verify or is not the one
//! recorded, a signature of an untrusted key, an artifact replaced or gone)
//! answers `INTEGRITY_FAILURE`, is audited with who asked and what failed,
//! logged as an `ALARM` and counted in `mapi_bundle_integrity_failures_total`.

use std::time::Duration;

use axum::extract::State;
use mapi_access::{Action, Resource};
use mapi_api::views::{
    ArtifactUrl, ArtifactUrls, ArtifactView, ManifestSignature, ModelVersionPage, ModelVersionSummary,
    ModelVersionView, SignedManifest, SigningKey, SigningKeys,
};
use mapi_bundles::BundleError;
use mapi_domain::{ModelVersionId, ProjectId, TenantId};
use mapi_identity::{Audit, Caller, Granted, Target, audit, authorize};
use mapi_objects::ObjectKey;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, ProblemCode, Query};
use mapi_schema::{Doc, ModelVersionDoc, Outcome, layout};
use mapi_signer::KeyMaterial;

use super::datasets::{PageQuery, newest_first, require_project};

/// How long artifact URLs stay valid.
const URL_TTL: Duration = Duration::from_secs(900);

/// Loads a version `caller` may read. A version of another tenant, or of a
/// project the caller cannot see, answers exactly as a missing one.
async fn load_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<(ModelVersionDoc, Granted), ApiError> {
    let what = format!("model version {}", id.chars().take(64).collect::<String>());
    let not_found = || ApiError::not_found(format!("{what} not found"));
    let id = ModelVersionId::parse(id).map_err(|_| not_found())?;
    let version =
        mapi_schema::get::<ModelVersionDoc>(&*state.store, id.as_str()).await?.ok_or_else(not_found)?;
    let granted = authorize(
        state,
        caller,
        Target::project(&version.tenant, &version.project, &what),
        Resource::Model,
        Action::Read,
    )
    .await?;
    Ok((version, granted))
}

/// `version`, unless its bytes expired: `410 GONE` saying when and why.
pub(crate) fn kept(version: ModelVersionDoc) -> Result<ModelVersionDoc, ApiError> {
    match version.expiry() {
        Some(why) => Err(ApiError::new(ProblemCode::Gone, why)),
        None => Ok(version),
    }
}

/// How the audit log names a version.
fn resource_of(version: &ModelVersionDoc) -> String {
    format!("{}/{}", ModelVersionDoc::COLLECTION, version.id)
}

fn prefix_of(version: &ModelVersionDoc) -> Result<ObjectKey, ApiError> {
    ObjectKey::parse(&version.bundle)
        .map_err(|e| ApiError::internal_from(format!("bundle prefix of {}", version.id), e))
}

/// Turns a bundle's failure into the answer. An integrity failure is
/// refused, audited, logged as an `ALARM` and counted.
pub(crate) async fn refuse(
    state: &AppState,
    caller: &Caller,
    version: &ModelVersionDoc,
    action: &str,
    e: BundleError,
) -> ApiError {
    match e {
        BundleError::Integrity { detail, .. } => {
            state.metrics.bundle_integrity_failures.inc();
            tracing::error!(
                model_version = %version.id,
                tenant = %version.tenant,
                caller = %caller.user(),
                action,
                %detail,
                "a model version failed its integrity check: refused (the bundle's ALARM line says where)"
            );
            let entry = Audit::by(caller, action, resource_of(version))
                .tenant(&version.tenant)
                .project(&version.project)
                .outcome(Outcome::Failed, ProblemCode::IntegrityFailure)
                .detail(detail);
            audit(state, entry).await;
            ApiError::new(
                ProblemCode::IntegrityFailure,
                format!(
                    "model version {} failed its integrity check (its manifest or an artifact is not what was signed): refused, and the refusal is audited",
                    version.id
                ),
            )
        }
        BundleError::Objects(e) => e.into(),
        BundleError::Sign(e) => ApiError::internal_from(format!("bundle of {}", version.id), e),
    }
}

/// List a project's model versions, newest first.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/model-versions",
    tag = "model-versions",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), PageQuery),
    responses((status = 200, body = ModelVersionPage), (status = 400, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<PageQuery>,
) -> Result<Json<ModelVersionPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Model, Action::Read).await?;
    let (docs, next_page_token) = newest_first::<ModelVersionDoc>(&state, &tenant, &project, &q).await?;
    let model_versions = docs.iter().map(ModelVersionSummary::from).collect();
    Ok(Json(ModelVersionPage { model_versions, next_page_token }))
}

/// A model version: its record and the artifacts of its manifest, which
/// verified for this answer.
#[utoipa::path(
    get,
    path = "/v1/model-versions/{id}",
    tag = "model-versions",
    params(("id" = mapi_domain::ModelVersionId, Path)),
    responses(
        (status = 200, body = ModelVersionView),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "INTEGRITY_FAILURE: the manifest does not verify; refused and audited"),
        (status = 410, body = mapi_problem::Problem, description = "GONE: its bytes expired (the list still shows its record)"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn get_version(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ModelVersionView>, ApiError> {
    let version = kept(load_for(&state, &caller, &id).await?.0)?;
    let prefix = prefix_of(&version)?;
    let sealed =
        match mapi_bundles::open_pinned(&*state.objects, &*state.signer, &prefix, &version.manifest_sha256)
            .await
        {
            Ok(s) => s,
            Err(e) => return Err(refuse(&state, &caller, &version, "model_version.read", e).await),
        };
    let dir = layout::attempt_dir(&version.tenant, &version.project, &version.run, version.attempt);
    let artifacts = sealed
        .manifest
        .artifacts
        .iter()
        .map(|a| ArtifactView {
            name: layout::output_name(&dir, a.key.as_str()).unwrap_or_else(|| a.key.to_string()),
            key: a.key.to_string(),
            generation: a.generation.0,
            size: a.size,
            sha256: a.sha256.clone(),
        })
        .collect();
    Ok(Json(ModelVersionView {
        id: version.id,
        tenant: version.tenant,
        project: version.project,
        run: version.run,
        attempt: version.attempt,
        method: version.method,
        bundle: version.bundle,
        manifest_sha256: version.manifest_sha256,
        key_version: sealed.signature.key_version,
        created_at: version.created_at,
        artifacts,
        deprecated: version.deprecated.map(|d| mapi_api::views::DeprecationView {
            by: d.by,
            at: d.at,
            reason: d.reason,
        }),
    }))
}

/// Signed GET URLs to every artifact of a model version, minted only after
/// its manifest verified and every artifact is still the one it pins.
#[utoipa::path(
    post,
    path = "/v1/model-versions/{id}/urls",
    tag = "model-versions",
    params(("id" = mapi_domain::ModelVersionId, Path)),
    responses(
        (status = 200, body = ArtifactUrls),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "INTEGRITY_FAILURE: the manifest does not verify or an artifact changed; no URL is minted, the refusal is audited"),
        (status = 410, body = mapi_problem::Problem, description = "GONE: its bytes expired"),
        (status = 429, body = mapi_problem::Problem, description = "The tenant's egress of the month would pass its limit (QUOTA_EXCEEDED)"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn urls(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ArtifactUrls>, ApiError> {
    let (version, granted) = load_for(&state, &caller, &id).await?;
    let version = kept(version)?;
    let prefix = prefix_of(&version)?;
    let minted = mapi_bundles::artifact_urls(
        &*state.objects,
        &*state.signer,
        &prefix,
        Some(&version.manifest_sha256),
        URL_TTL,
    )
    .await;
    let minted = match minted {
        Ok(m) => m,
        Err(e) => return Err(refuse(&state, &caller, &version, "model_version.urls", e).await),
    };
    // Every batch of artifact links is audited before it is given, the
    // artifacts' bytes counted against the tenant's egress of the month.
    let bytes = minted.iter().map(|(a, _)| a.size).sum::<u64>();
    let record = Audit::by(&caller, "model_version.urls", resource_of(&version))
        .tenant(&version.tenant)
        .project(&version.project)
        .operator(granted.as_operator)
        .detail(format!("{} artifact URLs ({bytes} bytes), valid {} s", minted.len(), URL_TTL.as_secs()))
        .into_doc(state.clock.now(), &*state.entropy);
    let what = format!("{}/urls", resource_of(&version));
    super::egress::admit_link(&state, &caller, &granted, &version.tenant, bytes, &record, what).await?;
    let dir = layout::attempt_dir(&version.tenant, &version.project, &version.run, version.attempt);
    let artifacts = minted
        .into_iter()
        .map(|(a, url)| ArtifactUrl {
            name: layout::output_name(&dir, a.key.as_str()).unwrap_or_else(|| a.key.to_string()),
            key: a.key.to_string(),
            size: a.size,
            sha256: a.sha256,
            url,
        })
        .collect();
    Ok(Json(ArtifactUrls { model_version: version.id, expires_in_s: URL_TTL.as_secs(), artifacts }))
}

/// A model version's manifest exactly as it was signed, with its
/// signature, after it verified here: for a verifier outside the platform
/// (docs/bundle-format.md says how), with the keys of `GET /v1/signing-keys`.
#[utoipa::path(
    get,
    path = "/v1/model-versions/{id}/manifest",
    tag = "model-versions",
    params(("id" = mapi_domain::ModelVersionId, Path)),
    responses(
        (status = 200, body = SignedManifest),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "INTEGRITY_FAILURE: the manifest does not verify or is not the one recorded; the refusal is audited"),
        (status = 410, body = mapi_problem::Problem, description = "GONE: its bytes expired"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn manifest(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SignedManifest>, ApiError> {
    use base64::Engine;
    let version = kept(load_for(&state, &caller, &id).await?.0)?;
    let prefix = prefix_of(&version)?;
    let signed =
        mapi_bundles::signed_manifest(&*state.objects, &*state.signer, &prefix, &version.manifest_sha256)
            .await;
    let (bytes, signature) = match signed {
        Ok(s) => s,
        Err(e) => return Err(refuse(&state, &caller, &version, "model_version.manifest", e).await),
    };
    let manifest = String::from_utf8(bytes.to_vec())
        .map_err(|e| ApiError::internal_from(format!("manifest of {}", version.id), e))?;
    Ok(Json(SignedManifest {
        model_version: version.id,
        manifest_sha256: version.manifest_sha256,
        manifest,
        signature: ManifestSignature {
            key_version: signature.key_version,
            algorithm: signature.algorithm.as_str().to_owned(),
            value: base64::engine::general_purpose::STANDARD.encode(&signature.value),
        },
    }))
}

/// The public keys the platform's bundle signatures verify under (the
/// active one and every one still trusted), as a JSON Web Key Set. Public
/// keys only: anyone may read them, without credentials.
#[utoipa::path(
    get,
    path = "/v1/signing-keys",
    tag = "model-versions",
    responses((status = 200, body = SigningKeys)),
)]
pub async fn signing_keys(State(state): State<AppState>) -> Result<Json<SigningKeys>, ApiError> {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut keys = Vec::new();
    for k in state.signer.trusted_keys().export() {
        let material = k.material().map_err(|e| ApiError::internal_from("a trusted public key", e))?;
        let (kty, crv, x, y, n, e) = match material {
            KeyMaterial::Ec { x, y } => {
                ("EC", Some("P-256".to_owned()), Some(b64(&x)), Some(b64(&y)), None, None)
            }
            KeyMaterial::Rsa { n, e } => ("RSA", None, None, None, Some(b64(&n)), Some(b64(&e))),
        };
        keys.push(SigningKey {
            kid: k.key_version.clone(),
            kty: kty.to_owned(),
            alg: k.algorithm.jose().to_owned(),
            use_: "sig".to_owned(),
            algorithm: k.algorithm.as_str().to_owned(),
            crv,
            x,
            y,
            n,
            e,
        });
    }
    Ok(Json(SigningKeys { keys, active: state.signer.key_version().to_owned() }))
}
