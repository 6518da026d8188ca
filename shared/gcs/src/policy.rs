//! V4 POST policies: an HTML-form upload of one object, limited in key,
//! bucket, size and time, signed like a URL (`GOOG4-RSA-SHA256`) over the
//! base64 of the policy document.
//!
//! Cloud Storage has no generation precondition for form uploads: a
//! policy is create-only because the account that signs it (the
//! uploader) may create objects but not delete them, and replacing an
//! object needs `storage.objects.delete`. So sign policies only with
//! such an account (`MAPI_GCS_UPLOADER_*`).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::signing::{BlobSigner, SigningError};
use crate::v4::{ALGORITHM, MAX_EXPIRES, scope, timestamp};

/// What one form upload may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRequest<'a> {
    /// Where the form posts: `https://storage.googleapis.com` or a test front.
    pub base: &'a str,
    pub bucket: &'a str,
    pub object: &'a str,
    /// The most bytes the upload may have.
    pub max_bytes: u64,
    pub expires_in: Duration,
}

/// A signed form: POST `url` as `multipart/form-data` with `fields`, then
/// the file as the last field, named `file`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostPolicy {
    pub url: String,
    pub fields: Vec<(String, String)>,
}

/// The policy document of `req` by `email` at `now`, as JSON.
pub fn document(req: &PolicyRequest<'_>, email: &str, now: OffsetDateTime) -> Result<String, SigningError> {
    if req.expires_in.is_zero() || req.expires_in > MAX_EXPIRES {
        return Err(SigningError::Config(format!(
            "a V4 POST policy lives 1 s to 7 days, not {} s",
            req.expires_in.as_secs()
        )));
    }
    let date_time = timestamp(now)?;
    let expires_in = time::Duration::try_from(req.expires_in)
        .map_err(|e| SigningError::Config(format!("policy lifetime: {e}")))?;
    let expiration = (now.to_offset(time::UtcOffset::UTC) + expires_in)
        .replace_nanosecond(0)
        .map_err(|e| SigningError::Config(e.to_string()))?
        .format(&Rfc3339)
        .map_err(|e| SigningError::Config(e.to_string()))?;
    let doc = serde_json::json!({
        "conditions": [
            {"bucket": req.bucket},
            {"key": req.object},
            ["content-length-range", 0, req.max_bytes],
            {"x-goog-date": date_time},
            {"x-goog-credential": format!("{email}/{}", scope(&date_time))},
            {"x-goog-algorithm": ALGORITHM},
        ],
        "expiration": expiration,
    });
    Ok(doc.to_string())
}

/// Signs the POST policy of `req` with `signer` at `now`.
pub async fn sign_policy(
    signer: &dyn BlobSigner,
    req: &PolicyRequest<'_>,
    now: OffsetDateTime,
) -> Result<PostPolicy, SigningError> {
    let date_time = timestamp(now)?;
    let policy = STANDARD.encode(document(req, signer.email(), now)?);
    let signature = hex::encode(signer.sign(policy.as_bytes()).await?);
    let fields = [
        ("key", req.object.to_owned()),
        ("x-goog-date", date_time.clone()),
        ("x-goog-credential", format!("{}/{}", signer.email(), scope(&date_time))),
        ("x-goog-algorithm", ALGORITHM.to_owned()),
        ("policy", policy),
        ("x-goog-signature", signature),
    ];
    Ok(PostPolicy {
        url: format!("{}/{}", req.base.trim_end_matches('/'), req.bucket),
        fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_limits_bucket_key_size_and_time() {
        let now = time::macros::datetime!(2026-11-30 12:00:00 UTC);
        let req = PolicyRequest {
            base: "https://storage.googleapis.com",
            bucket: "b",
            object: "t/x/in.csv",
            max_bytes: 1024,
            expires_in: Duration::from_secs(600),
        };
        let doc: serde_json::Value =
            serde_json::from_str(&document(&req, "up@p.iam.gserviceaccount.com", now).expect("doc"))
                .expect("json");
        assert_eq!(
            doc,
            serde_json::json!({
                "conditions": [
                    {"bucket": "b"},
                    {"key": "t/x/in.csv"},
                    ["content-length-range", 0, 1024],
                    {"x-goog-date": "20261130T120000Z"},
                    {"x-goog-credential": "up@p.iam.gserviceaccount.com/20261130/auto/storage/goog4_request"},
                    {"x-goog-algorithm": "GOOG4-RSA-SHA256"},
                ],
                "expiration": "2026-11-30T12:10:00Z",
            })
        );
        let long = PolicyRequest { expires_in: MAX_EXPIRES * 2, ..req };
        assert!(document(&long, "e", now).is_err());
    }
}
