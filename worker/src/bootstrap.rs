//! Where a task's bootstrap is, and how it is read and taken.
//!
//! `MAPI_BOOTSTRAP_URL` (with `{nonce}` replaced by the task's nonce) is
//! either an `http(s)://` URL the platform serves (the embedded object
//! store's route), or `gs://{bucket}/{object}`: an object in Cloud Storage,
//! read and deleted through the JSON API with the execution's own service
//! account (an access token from the metadata server, as on Cloud Run).
//! `MAPI_GCS_ENDPOINT` points the JSON API elsewhere: a local fake over
//! plain HTTP is called without a token, unless `GCE_METADATA_HOST` names a
//! (fake) metadata server to take one from.

use serde_json::Value;

const GOOGLE_STORAGE: &str = "https://storage.googleapis.com";
const METADATA_HOST: &str = "metadata.google.internal";

/// Where the bootstrap is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// An object route that answers GET and a generation-pinned DELETE
    /// (`x-goog-if-generation-match`).
    Http(String),
    /// A Cloud Storage object.
    Gcs {
        /// The JSON API's root, without a trailing slash.
        api: String,
        bucket: String,
        object: String,
        /// Where access tokens come from (`GCE_METADATA_HOST` or Google's);
        /// `None`: no token (a plain-HTTP fake without a metadata server).
        metadata_host: Option<String>,
    },
}

/// Percent-encodes everything but RFC 3986's unreserved characters, as a
/// Cloud Storage object name in a JSON API path must be.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Source {
    /// The source `url` names; `get` looks up the environment.
    pub fn parse(url: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<Source, String> {
        if url.starts_with("http://") || url.starts_with("https://") {
            return Ok(Source::Http(url.to_owned()));
        }
        let Some(rest) = url.strip_prefix("gs://") else {
            return Err(format!("unsupported bootstrap URL `{url}`: use http(s):// or gs://bucket/object"));
        };
        let (bucket, object) = rest
            .split_once('/')
            .filter(|(b, o)| !b.is_empty() && !o.is_empty())
            .ok_or_else(|| format!("bootstrap URL `{url}` names no object: use gs://bucket/object"))?;
        let non_empty = |k: &str| get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let api = non_empty("MAPI_GCS_ENDPOINT")
            .unwrap_or_else(|| GOOGLE_STORAGE.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let metadata_host = match non_empty("GCE_METADATA_HOST") {
            Some(host) => Some(host),
            None if api.starts_with("http://") => None,
            None => Some(METADATA_HOST.to_owned()),
        };
        Ok(Source::Gcs { api, bucket: bucket.to_owned(), object: object.to_owned(), metadata_host })
    }

    /// The bearer token requests need: none for an `http(s)://` route or a
    /// plain-HTTP fake without a metadata server, else the execution's
    /// service account's.
    async fn token(&self, http: &reqwest::Client) -> Result<Option<String>, String> {
        let Source::Gcs { metadata_host: Some(metadata_host), .. } = self else { return Ok(None) };
        let url =
            format!("http://{metadata_host}/computeMetadata/v1/instance/service-accounts/default/token");
        let resp = http
            .get(&url)
            .header("Metadata-Flavor", "Google")
            .send()
            .await
            .map_err(|e| format!("metadata server: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("metadata server answered {} for a token", resp.status().as_u16()));
        }
        let body: Value = resp.json().await.map_err(|e| format!("metadata server token: {e}"))?;
        body["access_token"]
            .as_str()
            .map(|t| Some(t.to_owned()))
            .ok_or_else(|| "the metadata server's answer has no access_token".to_owned())
    }

    /// The request that reads the bootstrap's bytes (the answer carries
    /// its generation in `x-goog-generation`).
    pub async fn read(&self, http: &reqwest::Client) -> Result<reqwest::RequestBuilder, String> {
        let token = self.token(http).await?;
        let req = match self {
            Source::Http(url) => http.get(url),
            Source::Gcs { api, bucket, object, .. } => {
                http.get(format!("{api}/storage/v1/b/{}/o/{}?alt=media", encode(bucket), encode(object)))
            }
        };
        Ok(match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        })
    }

    /// The request that deletes the bootstrap only if it still has
    /// `generation`: one reader wins.
    pub async fn take(
        &self,
        http: &reqwest::Client,
        generation: &str,
    ) -> Result<reqwest::RequestBuilder, String> {
        let token = self.token(http).await?;
        let req = match self {
            Source::Http(url) => http.delete(url).header("x-goog-if-generation-match", generation),
            Source::Gcs { api, bucket, object, .. } => http
                .delete(format!("{api}/storage/v1/b/{}/o/{}", encode(bucket), encode(object)))
                .query(&[("ifGenerationMatch", generation)]),
        };
        Ok(match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn sources_are_parsed_from_the_url() {
        assert_eq!(
            Source::parse("http://127.0.0.1:1/o/bootstrap/n1", &env(&[])),
            Ok(Source::Http("http://127.0.0.1:1/o/bootstrap/n1".into()))
        );
        assert_eq!(
            Source::parse("gs://mapi-prod-bootstrap/n1.t0", &env(&[])),
            Ok(Source::Gcs {
                api: GOOGLE_STORAGE.into(),
                bucket: "mapi-prod-bootstrap".into(),
                object: "n1.t0".into(),
                metadata_host: Some(METADATA_HOST.into()),
            })
        );
        let fake = env(&[("MAPI_GCS_ENDPOINT", "http://127.0.0.1:9/"), ("GCE_METADATA_HOST", "127.0.0.1:8")]);
        match Source::parse("gs://b/o", &fake) {
            Ok(Source::Gcs { api, metadata_host, .. }) => {
                assert_eq!(
                    (api.as_str(), metadata_host.as_deref()),
                    ("http://127.0.0.1:9", Some("127.0.0.1:8"))
                );
            }
            other => panic!("{other:?}"),
        }
        for bad in ["ftp://x/y", "gs://bucket-only", "gs:///object", "gs://b/"] {
            let e = Source::parse(bad, &env(&[])).expect_err(bad);
            assert!(e.contains("gs://bucket/object") || e.contains("http(s)://"), "{bad}: {e}");
        }
    }

    #[test]
    fn object_names_are_percent_encoded() {
        assert_eq!(encode("a/b c~d.e_f-g"), "a%2Fb%20c~d.e_f-g");
    }

    #[tokio::test]
    async fn gcs_requests_use_the_json_api_and_pin_the_delete() {
        let http = reqwest::Client::new();
        let s = Source::parse("gs://boot/n 1", &env(&[("MAPI_GCS_ENDPOINT", "http://127.0.0.1:9")]))
            .expect("source");
        let read = s.read(&http).await.expect("read").build().expect("request");
        assert_eq!(read.url().as_str(), "http://127.0.0.1:9/storage/v1/b/boot/o/n%201?alt=media");
        assert!(read.headers().get("authorization").is_none(), "no token towards a plain-HTTP fake");
        let take = s.take(&http, "17").await.expect("take").build().expect("request");
        assert_eq!(take.method(), reqwest::Method::DELETE);
        assert_eq!(take.url().as_str(), "http://127.0.0.1:9/storage/v1/b/boot/o/n%201?ifGenerationMatch=17");
    }
}
