//! Cloud Storage's V4 signing (`GOOG4-RSA-SHA256`) for path-style XML API
//! URLs, as Google documents it: a canonical request, its SHA-256 in a
//! string to sign, and the signature in hex as `X-Goog-Signature`.
//!
//! The pieces are public so that a test can compare them with a canonical
//! request written by hand, and so that the tests' verifying front can
//! rebuild them from a URL it is sent.

use std::time::Duration;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::macros::format_description;

use crate::signing::{BlobSigner, SigningError};

/// The algorithm name in URLs and policies.
pub const ALGORITHM: &str = "GOOG4-RSA-SHA256";

/// The longest a V4 signature may live: 7 days.
pub const MAX_EXPIRES: Duration = Duration::from_secs(604_800);

/// The location part of the credential scope; Cloud Storage accepts `auto`.
pub const REGION: &str = "auto";

/// What one signed URL allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlRequest<'a> {
    /// `GET` or `PUT`.
    pub method: &'a str,
    /// Where the URL points: `https://storage.googleapis.com` or a test front.
    pub base: &'a str,
    pub bucket: &'a str,
    pub object: &'a str,
    /// Headers the user of the URL must send exactly, besides `host`
    /// (lowercase names).
    pub headers: &'a [(&'a str, &'a str)],
    pub expires_in: Duration,
}

/// Percent-encodes everything but RFC 3986's unreserved characters (and
/// `/` when `keep_slash`).
pub fn percent_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `YYYYMMDD'T'HHMMSS'Z'` of `t` (UTC).
pub fn timestamp(t: OffsetDateTime) -> Result<String, SigningError> {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.format(format_description!("[year][month][day]T[hour][minute][second]Z"))
        .map_err(|e| SigningError::Config(format!("cannot write the signing time: {e}")))
}

/// `{date}/auto/storage/goog4_request`.
pub fn scope(date_time: &str) -> String {
    format!("{}/{REGION}/storage/goog4_request", &date_time[..8.min(date_time.len())])
}

/// The host a URL of `base` is sent to, with its port if it has one.
pub fn host_of(base: &str) -> Result<&str, SigningError> {
    let rest = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"))
        .ok_or_else(|| SigningError::Config(format!("URL base `{base}` is not http(s)://host")))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return Err(SigningError::Config(format!("URL base `{base}` has no host")));
    }
    Ok(host)
}

/// The pieces of one signature, before the signing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canonical {
    /// The query string without `X-Goog-Signature`, in canonical order.
    pub query: String,
    pub canonical_request: String,
    pub string_to_sign: String,
    /// `/bucket/object`, percent-encoded.
    pub path: String,
}

/// Canonical query, request and string to sign of `req` by `email` at `now`.
pub fn canonical(req: &UrlRequest<'_>, email: &str, now: OffsetDateTime) -> Result<Canonical, SigningError> {
    if req.expires_in.is_zero() || req.expires_in > MAX_EXPIRES {
        return Err(SigningError::Config(format!(
            "a V4 signed URL lives 1 s to 7 days, not {} s",
            req.expires_in.as_secs()
        )));
    }
    let host = host_of(req.base)?;
    let date_time = timestamp(now)?;
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .chain(std::iter::once(("host".to_owned(), host.to_owned())))
        .collect();
    headers.sort();
    let signed_headers = headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(";");
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let credential = format!("{email}/{}", scope(&date_time));
    let mut query = [
        ("X-Goog-Algorithm", ALGORITHM.to_owned()),
        ("X-Goog-Credential", credential),
        ("X-Goog-Date", date_time.clone()),
        ("X-Goog-Expires", req.expires_in.as_secs().to_string()),
        ("X-Goog-SignedHeaders", signed_headers.clone()),
    ];
    query.sort_by(|a, b| a.0.cmp(b.0));
    let query = query
        .iter()
        .map(|(k, v)| format!("{}={}", percent_encode(k, false), percent_encode(v, false)))
        .collect::<Vec<_>>()
        .join("&");
    let path = format!("/{}/{}", percent_encode(req.bucket, false), percent_encode(req.object, true));
    let canonical_request =
        format!("{}\n{path}\n{query}\n{canonical_headers}\n{signed_headers}\nUNSIGNED-PAYLOAD", req.method);
    let string_to_sign = format!(
        "{ALGORITHM}\n{date_time}\n{}\n{}",
        scope(&date_time),
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    Ok(Canonical { query, canonical_request, string_to_sign, path })
}

/// A signed URL for `req`, signed by `signer` at `now`.
pub async fn sign_url(
    signer: &dyn BlobSigner,
    req: &UrlRequest<'_>,
    now: OffsetDateTime,
) -> Result<String, SigningError> {
    let c = canonical(req, signer.email(), now)?;
    let signature = signer.sign(c.string_to_sign.as_bytes()).await?;
    Ok(format!(
        "{}{}?{}&X-Goog-Signature={}",
        req.base.trim_end_matches('/'),
        c.path,
        c.query,
        hex::encode(signature)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_request_as_google_documents_it() {
        // Written by hand from Google's "V4 signing process" page: a GET of
        // `cat pics/tabby.jpeg` in `example-bucket`, signed 2026-11-30
        // 12:00:00 UTC for 15 minutes.
        let now = time::macros::datetime!(2026-11-30 12:00:00 UTC);
        let req = UrlRequest {
            method: "GET",
            base: "https://storage.googleapis.com",
            bucket: "example-bucket",
            object: "cat pics/tabby.jpeg",
            headers: &[],
            expires_in: Duration::from_secs(900),
        };
        let c = canonical(&req, "signer@p.iam.gserviceaccount.com", now).expect("canonical");
        let query = "X-Goog-Algorithm=GOOG4-RSA-SHA256\
            &X-Goog-Credential=signer%40p.iam.gserviceaccount.com%2F20261130%2Fauto%2Fstorage%2Fgoog4_request\
            &X-Goog-Date=20261130T120000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host";
        let request = format!(
            "GET\n/example-bucket/cat%20pics/tabby.jpeg\n{query}\nhost:storage.googleapis.com\n\nhost\nUNSIGNED-PAYLOAD"
        );
        assert_eq!(c.query, query);
        assert_eq!(c.canonical_request, request);
        let hash = hex::encode(Sha256::digest(request.as_bytes()));
        assert_eq!(
            c.string_to_sign,
            format!("GOOG4-RSA-SHA256\n20261130T120000Z\n20261130/auto/storage/goog4_request\n{hash}")
        );
    }

    #[test]
    fn signed_headers_are_sorted_lowercase_and_listed() {
        let now = time::macros::datetime!(2026-11-30 12:00:00 UTC);
        let req = UrlRequest {
            method: "PUT",
            base: "http://127.0.0.1:9000",
            bucket: "b",
            object: "t/x/out.json",
            headers: &[("X-Goog-If-Generation-Match", " 0 ")],
            expires_in: Duration::from_secs(60),
        };
        let c = canonical(&req, "u@p.iam.gserviceaccount.com", now).expect("canonical");
        assert!(c.query.ends_with("X-Goog-SignedHeaders=host%3Bx-goog-if-generation-match"), "{}", c.query);
        assert!(c.canonical_request.contains(
            "\nhost:127.0.0.1:9000\nx-goog-if-generation-match:0\n\nhost;x-goog-if-generation-match\n"
        ));
        assert!(c.canonical_request.starts_with("PUT\n/b/t/x/out.json\n"));
    }

    #[test]
    fn refusals() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let mut req = UrlRequest {
            method: "GET",
            base: "https://storage.googleapis.com",
            bucket: "b",
            object: "o",
            headers: &[],
            expires_in: MAX_EXPIRES + Duration::from_secs(1),
        };
        assert!(canonical(&req, "e", now).is_err(), "longer than 7 days");
        req.expires_in = Duration::ZERO;
        assert!(canonical(&req, "e", now).is_err());
        req.expires_in = Duration::from_secs(1);
        req.base = "storage.googleapis.com";
        assert!(canonical(&req, "e", now).is_err(), "no scheme");
    }

    /// The official crate's V4 signer (`SignedUrlBuilder`) and ours, with
    /// the same key at the same second, must give the same bytes: RSA
    /// PKCS#1 v1.5 is deterministic, so any difference in the canonical
    /// request shows.
    #[tokio::test]
    async fn urls_are_byte_identical_to_the_official_crates() {
        use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
        use google_cloud_storage::builder::storage::SignedUrlBuilder;

        let key = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("key");
        let der: Pkcs8V1Der<'static> = key.as_der().expect("PKCS#8");
        let email = "signer@p.iam.gserviceaccount.com";
        let json = serde_json::json!({
            "type": "service_account",
            "project_id": "p",
            "private_key_id": "k1",
            "private_key": mapi_signer::pem_encode("PRIVATE KEY", der.as_ref()),
            "client_email": email,
            "client_id": "1",
            "token_uri": "https://oauth2.googleapis.com/token",
        });
        let official = google_cloud_auth::credentials::service_account::Builder::new(json.clone())
            .build_signer()
            .expect("the official signer");
        let ours = crate::signing::KeySigner::from_json(&json.to_string()).expect("our signer");
        let object = "t/dev/p/default/datasets/ds_1.v=2-a.csv";
        let cases: [(&str, &[(&str, &str)]); 3] =
            [("GET", &[]), ("PUT", &[]), ("PUT", &[("x-goog-if-generation-match", "0")])];
        for (method, headers) in cases {
            let mut b = SignedUrlBuilder::for_object("projects/_/buckets/mapi-prod-data", object)
                .with_method(method.parse().expect("method"))
                .with_expiration(Duration::from_secs(900))
                .with_endpoint("https://storage.googleapis.com");
            for (k, v) in headers {
                b = b.with_header(*k, *v);
            }
            let theirs = b.sign_with(&official).await.expect("official URL");
            let date = theirs.split("X-Goog-Date=").nth(1).and_then(|d| d.get(..16)).expect("date");
            let f = format_description!("[year][month][day]T[hour][minute][second]Z");
            let at = time::PrimitiveDateTime::parse(date, f).expect("date").assume_utc();
            let req = UrlRequest {
                method,
                base: "https://storage.googleapis.com",
                bucket: "mapi-prod-data",
                object,
                headers,
                expires_in: Duration::from_secs(900),
            };
            let mine = sign_url(&ours, &req, at).await.expect("our URL");
            assert_eq!(mine, theirs, "{method} {headers:?}");
        }
    }
}
