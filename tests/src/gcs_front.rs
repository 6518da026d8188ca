//! What fake-gcs-server does not do for signed URLs, written from Google's
//! documentation of the XML API:
//!
//! - [`SigningFront`]: checks V4 signed URLs (`GOOG4-RSA-SHA256`) and V4
//!   POST policies as Cloud Storage does — signature under the account's
//!   public key over the canonical request it rebuilds from what it was
//!   sent, signed headers present and equal, expiry, policy conditions —
//!   and answers Cloud Storage's XML errors (`SignatureDoesNotMatch` 403,
//!   `ExpiredToken` 400, `AccessDenied` 403, `PreconditionFailed` 412).
//!   Valid requests go on to fake-gcs-server: a GET as is, a PUT or form
//!   upload as a JSON-API multipart upload (fake-gcs has no XML PUT and
//!   ignores preconditions on form uploads). An account without
//!   `storage.objects.delete` cannot replace an object, as IAM has it.
//! - [`FakeSignBlob`]: the IAM Credentials `signBlob` method, signing with
//!   the test accounts' keys, with 429/503 answers on demand.
//! - [`TestAccount`]: a service account with a fresh RSA key.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::KeyPair as _;
use aws_lc_rs::signature::{RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256, UnparsedPublicKey};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A service account with an RSA key made for the test.
#[derive(Clone)]
pub struct TestAccount {
    pub email: String,
    /// Whether IAM gives it `storage.objects.delete` (needed to replace).
    pub can_delete: bool,
    key: Arc<KeyPair>,
}

impl std::fmt::Debug for TestAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestAccount").field("email", &self.email).finish_non_exhaustive()
    }
}

impl TestAccount {
    pub fn new(email: &str, can_delete: bool) -> TestAccount {
        let key = KeyPair::generate(KeySize::Rsa2048).expect("generate an RSA key");
        TestAccount { email: email.to_owned(), can_delete, key: Arc::new(key) }
    }

    /// A JSON key file as the console downloads it.
    pub fn key_file_json(&self) -> String {
        let der: Pkcs8V1Der<'static> = self.key.as_der().expect("PKCS#8");
        serde_json::json!({
            "type": "service_account",
            "project_id": "fake",
            "private_key_id": "k1",
            "private_key": mapi_signer::pem_encode("PRIVATE KEY", der.as_ref()),
            "client_email": self.email,
        })
        .to_string()
    }

    fn sign(&self, blob: &[u8]) -> Vec<u8> {
        let mut out = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &aws_lc_rs::rand::SystemRandom::new(), blob, &mut out)
            .expect("sign");
        out
    }

    fn verify(&self, blob: &[u8], signature: &[u8]) -> bool {
        let public = self.key.public_key().as_ref().to_vec();
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public).verify(blob, signature).is_ok()
    }
}

/// Cloud Storage's XML error.
pub fn xml_error(status: StatusCode, code: &str, message: &str, details: &str) -> Response {
    let body = format!(
        "<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message><Details>{details}</Details></Error>"
    );
    (status, [("content-type", "application/xml; charset=UTF-8")], body).into_response()
}

fn denied(details: &str) -> Response {
    xml_error(StatusCode::FORBIDDEN, "SignatureDoesNotMatch", "Access denied.", details)
}

fn invalid(details: &str) -> Response {
    xml_error(StatusCode::BAD_REQUEST, "InvalidArgument", "Invalid argument.", details)
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn sha256_hex(s: &str) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `YYYYMMDD'T'HHMMSS'Z'`.
fn parse_goog_date(s: &str) -> Option<OffsetDateTime> {
    let f = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::PrimitiveDateTime::parse(s, f).ok().map(|t| t.assume_utc())
}

/// One upload the front passes on.
struct Write<'a> {
    bucket: &'a str,
    object: &'a str,
    content_type: &'a str,
    body: Bytes,
    precondition: Option<i64>,
}

struct FrontState {
    target: String,
    accounts: Vec<TestAccount>,
    http: reqwest::Client,
}

impl FrontState {
    fn account(&self, email: &str) -> Option<&TestAccount> {
        self.accounts.iter().find(|a| a.email == email)
    }

    /// Checks a V4 signed URL; the signing account if it holds.
    fn check_url(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<&TestAccount, Box<Response>> {
        let mut params: Vec<(String, String)> = Vec::new();
        for pair in uri.query().unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (Some(k), Some(v)) = (decode(k), decode(v)) else {
                return Err(Box::new(invalid("bad query encoding")));
            };
            params.push((k, v));
        }
        let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let (Some(alg), Some(cred), Some(date), Some(expires), Some(signed), Some(sig)) = (
            get("X-Goog-Algorithm"),
            get("X-Goog-Credential"),
            get("X-Goog-Date"),
            get("X-Goog-Expires"),
            get("X-Goog-SignedHeaders"),
            get("X-Goog-Signature"),
        ) else {
            return Err(Box::new(invalid("a V4 signed URL needs every X-Goog-* parameter")));
        };
        if alg != "GOOG4-RSA-SHA256" {
            return Err(Box::new(invalid("X-Goog-Algorithm must be GOOG4-RSA-SHA256")));
        }
        let Some(signed_at) = parse_goog_date(date) else { return Err(Box::new(invalid("bad X-Goog-Date"))) };
        let Ok(expires) = expires.parse::<i64>() else { return Err(Box::new(invalid("bad X-Goog-Expires"))) };
        if !(1..=604_800).contains(&expires) {
            return Err(Box::new(invalid("X-Goog-Expires must be between 1 and 604800")));
        }
        if OffsetDateTime::now_utc() > signed_at + time::Duration::seconds(expires) {
            return Err(Box::new(xml_error(
                StatusCode::BAD_REQUEST,
                "ExpiredToken",
                "Invalid argument.",
                &format!("Request has expired: {date}"),
            )));
        }
        let Some((email, scope)) = cred.split_once('/') else {
            return Err(Box::new(invalid("bad X-Goog-Credential")));
        };
        if !scope.starts_with(&date[..8]) || !scope.ends_with("/storage/goog4_request") {
            return Err(Box::new(denied("the credential scope does not match X-Goog-Date")));
        }
        let names: Vec<&str> = signed.split(';').collect();
        if !names.contains(&"host") || names.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Box::new(invalid("X-Goog-SignedHeaders must list host, sorted")));
        }
        let mut canonical_headers = String::new();
        for name in &names {
            let Some(v) = headers.get(*name).and_then(|v| v.to_str().ok()) else {
                return Err(Box::new(denied(&format!("the signed header {name} was not sent"))));
            };
            canonical_headers.push_str(&format!("{name}:{}\n", v.trim()));
        }
        let mut query: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| k != "X-Goog-Signature")
            .map(|(k, v)| (encode(k), encode(v)))
            .collect();
        query.sort();
        let query = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
        let request =
            format!("{method}\n{}\n{query}\n{canonical_headers}\n{signed}\nUNSIGNED-PAYLOAD", uri.path());
        let to_sign = format!("GOOG4-RSA-SHA256\n{date}\n{scope}\n{}", sha256_hex(&request));
        let account = self.account(email).ok_or_else(|| Box::new(denied("unknown service account")))?;
        match unhex(sig) {
            Some(sig) if account.verify(to_sign.as_bytes(), &sig) => Ok(account),
            _ => Err(Box::new(denied(&format!(
                "The request signature we calculated does not match. String to sign: {to_sign}"
            )))),
        }
    }

    /// Uploads to fake-gcs through its JSON API, honouring `if_generation`.
    async fn upload(
        &self,
        bucket: &str,
        object: &str,
        content_type: &str,
        body: Bytes,
        if_generation: Option<i64>,
    ) -> Result<Value, StatusCode> {
        let boundary = "mapi-front-boundary";
        let meta = serde_json::json!({ "name": object, "contentType": content_type }).to_string();
        let mut multipart = format!(
            "--{boundary}\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .into_bytes();
        multipart.extend_from_slice(&body);
        multipart.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let mut req = self
            .http
            .post(format!("{}/upload/storage/v1/b/{bucket}/o", self.target))
            .query(&[("uploadType", "multipart")])
            .header("content-type", format!("multipart/related; boundary={boundary}"))
            .body(multipart);
        if let Some(g) = if_generation {
            req = req.query(&[("ifGenerationMatch", g)]);
        }
        let r = req.send().await.map_err(|_| StatusCode::BAD_GATEWAY)?;
        if !r.status().is_success() {
            return Err(StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY));
        }
        r.json().await.map_err(|_| StatusCode::BAD_GATEWAY)
    }

    /// A write by `account`: with its precondition, and create-only when
    /// the account may not delete (replacing needs `objects.delete`).
    async fn write(&self, account: &TestAccount, w: Write<'_>, success: StatusCode) -> Response {
        let Write { bucket, object, content_type, body, precondition } = w;
        let forced = !account.can_delete && precondition != Some(0);
        let if_generation = if forced { Some(0) } else { precondition };
        match self.upload(bucket, object, content_type, body, if_generation).await {
            Ok(o) => {
                let mut h = HeaderMap::new();
                if let Some(g) =
                    o.get("generation").and_then(Value::as_str).and_then(|g| HeaderValue::from_str(g).ok())
                {
                    h.insert("x-goog-generation", g);
                }
                (success, h).into_response()
            }
            Err(StatusCode::PRECONDITION_FAILED) if forced => xml_error(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                "Access denied.",
                &format!(
                    "{} does not have storage.objects.delete access to {bucket}/{object}.",
                    account.email
                ),
            ),
            Err(StatusCode::PRECONDITION_FAILED) => xml_error(
                StatusCode::PRECONDITION_FAILED,
                "PreconditionFailed",
                "At least one of the pre-conditions you specified did not hold.",
                "",
            ),
            Err(s) => xml_error(s, "InternalError", "fake-gcs-server refused the upload", ""),
        }
    }

    async fn object(&self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        let account = match self.check_url(&method, &uri, &headers) {
            Ok(a) => a.clone(),
            Err(r) => return *r,
        };
        let path = uri.path().trim_start_matches('/');
        let Some((bucket, object)) = path.split_once('/').and_then(|(b, o)| Some((decode(b)?, decode(o)?)))
        else {
            return invalid("the path is not /bucket/object");
        };
        if method == Method::GET {
            let r = self.http.get(format!("{}/{bucket}/{}", self.target, encode_path(&object))).send().await;
            let Ok(r) = r else { return StatusCode::BAD_GATEWAY.into_response() };
            if r.status() == 404 {
                return xml_error(
                    StatusCode::NOT_FOUND,
                    "NoSuchKey",
                    "The specified key does not exist.",
                    "",
                );
            }
            let mut h = HeaderMap::new();
            for (k, v) in r.headers() {
                if k == "content-type" || k.as_str().starts_with("x-goog-") {
                    h.insert(k, v.clone());
                }
            }
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            return (status, h, r.bytes().await.unwrap_or_default()).into_response();
        }
        let precondition = match headers
            .get("x-goog-if-generation-match")
            .map(|v| v.to_str().ok().and_then(|v| v.parse().ok()))
        {
            None => None,
            Some(Some(g)) => Some(g),
            Some(None) => return invalid("bad x-goog-if-generation-match"),
        };
        let content_type =
            headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/octet-stream");
        let w = Write { bucket: &bucket, object: &object, content_type, body, precondition };
        self.write(&account, w, StatusCode::OK).await
    }

    async fn form(&self, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        let bucket = uri.path().trim_matches('/').to_owned();
        let ct = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let Some(boundary) = ct.strip_prefix("multipart/form-data; boundary=") else {
            return invalid("a form upload is multipart/form-data");
        };
        let Some(fields) = parse_form(&body, boundary) else {
            return invalid("malformed multipart/form-data");
        };
        let field = |n: &str| fields.get(n).map(|v| String::from_utf8_lossy(v).into_owned());
        let (Some(policy), Some(sig), Some(cred), Some(alg), Some(date), Some(key), Some(file)) = (
            field("policy"),
            field("x-goog-signature"),
            field("x-goog-credential"),
            field("x-goog-algorithm"),
            field("x-goog-date"),
            field("key"),
            fields.get("file"),
        ) else {
            return invalid("a V4 form upload needs policy, x-goog-* fields, key and file");
        };
        if alg != "GOOG4-RSA-SHA256" {
            return invalid("x-goog-algorithm must be GOOG4-RSA-SHA256");
        }
        let Some((email, scope)) = cred.split_once('/') else { return invalid("bad x-goog-credential") };
        if parse_goog_date(&date).is_none() || !scope.starts_with(date.get(..8).unwrap_or("-")) {
            return denied("the credential scope does not match x-goog-date");
        }
        let Some(account) = self.account(email).cloned() else { return denied("unknown service account") };
        if !unhex(&sig).is_some_and(|s| account.verify(policy.as_bytes(), &s)) {
            return denied("The policy signature does not match.");
        }
        let Some(doc) = STANDARD.decode(&policy).ok().and_then(|d| serde_json::from_slice::<Value>(&d).ok())
        else {
            return invalid("the policy is not base64 JSON");
        };
        let expiration = doc
            .get("expiration")
            .and_then(Value::as_str)
            .and_then(|e| OffsetDateTime::parse(e, &Rfc3339).ok());
        if expiration.is_none_or(|e| e <= OffsetDateTime::now_utc()) {
            return xml_error(
                StatusCode::BAD_REQUEST,
                "InvalidPolicyDocument",
                "Invalid according to Policy: Policy expired.",
                "",
            );
        }
        let mut covered = vec!["file", "policy", "x-goog-signature"];
        let form_value = |name: &str| -> Option<String> {
            if name == "bucket" { Some(bucket.clone()) } else { field(name) }
        };
        for c in doc.get("conditions").and_then(Value::as_array).into_iter().flatten() {
            let ok = match c {
                Value::Object(m) => m.iter().all(|(k, v)| {
                    covered.push(k.as_str());
                    v.as_str().is_some_and(|v| form_value(k).as_deref() == Some(v))
                }),
                Value::Array(a) => match (a.first().and_then(Value::as_str), a.get(1), a.get(2)) {
                    (Some("content-length-range"), Some(min), Some(max)) => {
                        let n = file.len() as u64;
                        min.as_u64().is_some_and(|m| n >= m) && max.as_u64().is_some_and(|m| n <= m)
                    }
                    (Some(op @ ("eq" | "starts-with")), Some(Value::String(f)), Some(Value::String(v))) => {
                        let name = f.trim_start_matches('$');
                        covered.push(name);
                        let got = form_value(name).unwrap_or_default();
                        if op == "eq" { got == *v } else { got.starts_with(v.as_str()) }
                    }
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                return xml_error(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    "Invalid according to Policy: Policy Condition failed.",
                    &c.to_string(),
                );
            }
        }
        if let Some(extra) = fields.keys().find(|k| !covered.contains(&k.as_str())) {
            return xml_error(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                "Invalid according to Policy: Extra input fields.",
                extra,
            );
        }
        let content_type = field("content-type").unwrap_or_else(|| "application/octet-stream".to_owned());
        let body = Bytes::copy_from_slice(file);
        let w =
            Write { bucket: &bucket, object: &key, content_type: &content_type, body, precondition: None };
        self.write(&account, w, StatusCode::NO_CONTENT).await
    }
}

fn encode_path(object: &str) -> String {
    object.split('/').map(encode).collect::<Vec<_>>().join("/")
}

/// The fields of a `multipart/form-data` body, by name.
fn parse_form(body: &[u8], boundary: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    let delimiter = format!("--{boundary}").into_bytes();
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
    };
    let mut fields = BTreeMap::new();
    let mut at = find(body, &delimiter, 0)? + delimiter.len();
    loop {
        if body.get(at..at + 2)? == b"--" {
            return Some(fields);
        }
        at += 2; // CRLF after the delimiter
        let head_end = find(body, b"\r\n\r\n", at)?;
        let head = std::str::from_utf8(&body[at..head_end]).ok()?;
        let name = head
            .split("\r\n")
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?
            .split(';')
            .find_map(|p| p.trim().strip_prefix("name=\""))?
            .split('"')
            .next()?
            .to_owned();
        let value_start = head_end + 4;
        let mut end_marker = b"\r\n".to_vec();
        end_marker.extend_from_slice(&delimiter);
        let value_end = find(body, &end_marker, value_start)?;
        fields.insert(name, body[value_start..value_end].to_vec());
        at = value_end + end_marker.len();
    }
}

/// A `multipart/form-data` body of `fields` with `file` last; its content type.
pub fn form_body(fields: &[(String, String)], file: &[u8]) -> (String, Vec<u8>) {
    let boundary = "mapi-test-form-boundary";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n").as_bytes(),
        );
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn front(
    State(s): State<Arc<FrontState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let segments = uri.path().trim_matches('/').split('/').count();
    match method {
        Method::POST if segments == 1 => s.form(uri, headers, body).await,
        Method::GET | Method::PUT if segments >= 2 => s.object(method, uri, headers, body).await,
        _ => xml_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "The front serves signed GET, PUT and form POST.",
            "",
        ),
    }
}

/// The verifying front. Stops when dropped.
pub struct SigningFront {
    /// The XML API root signed URLs point to (`MAPI_GCS_URL_BASE`).
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for SigningFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningFront").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Drop for SigningFront {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SigningFront {
    /// A front for fake-gcs at `target` that trusts `accounts`' keys.
    pub async fn start(target: &str, accounts: Vec<TestAccount>) -> SigningFront {
        let state = Arc::new(FrontState {
            target: target.trim_end_matches('/').to_owned(),
            accounts,
            http: reqwest::Client::new(),
        });
        let app = axum::Router::new().fallback(front).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the front");
        let url = format!("http://{}", listener.local_addr().expect("front address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SigningFront { url, server }
    }
}

#[derive(Default)]
struct SignBlobState {
    accounts: Vec<TestAccount>,
    faults: VecDeque<StatusCode>,
    calls: u32,
}

/// The IAM Credentials `signBlob` method. Stops when dropped.
pub struct FakeSignBlob {
    pub url: String,
    state: Arc<Mutex<SignBlobState>>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeSignBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSignBlob").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Drop for FakeSignBlob {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn google_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"code": status.as_u16(), "message": message}});
    (status, axum::Json(body)).into_response()
}

async fn sign_blob(
    State(s): State<Arc<Mutex<SignBlobState>>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let email = uri
        .path()
        .strip_prefix("/v1/projects/-/serviceAccounts/")
        .and_then(|p| p.strip_suffix(":signBlob"))
        .and_then(decode);
    let (Method::POST, Some(email)) = (method, email) else {
        return google_error(StatusCode::NOT_FOUND, "the fake serves signBlob only");
    };
    let (account, fault) = {
        let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
        s.calls += 1;
        let fault = s.faults.pop_front();
        (s.accounts.iter().find(|a| a.email == email).cloned(), fault)
    };
    if let Some(status) = fault {
        return google_error(status, "injected");
    }
    let Some(account) = account else {
        return google_error(StatusCode::FORBIDDEN, "Permission 'iam.serviceAccounts.signBlob' denied");
    };
    let payload = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("payload").and_then(Value::as_str).and_then(|p| STANDARD.decode(p).ok()));
    let Some(payload) = payload else {
        return google_error(StatusCode::BAD_REQUEST, "payload must be base64");
    };
    axum::Json(serde_json::json!({"keyId": "k1", "signedBlob": STANDARD.encode(account.sign(&payload))}))
        .into_response()
}

impl FakeSignBlob {
    pub async fn start(accounts: Vec<TestAccount>) -> FakeSignBlob {
        let state = Arc::new(Mutex::new(SignBlobState { accounts, ..SignBlobState::default() }));
        let app = axum::Router::new().fallback(sign_blob).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSignBlob { url, state, server }
    }

    /// Answers the next call with `status` (429, 503, ...).
    pub fn fail_next(&self, status: StatusCode) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).faults.push_back(status);
    }

    /// Calls so far.
    pub fn calls(&self) -> u32 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).calls
    }
}
