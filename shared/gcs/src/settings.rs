//! The Cloud Storage adapter's settings, read through a lookup function
//! (the environment in production).

use std::path::PathBuf;

use mapi_settings::{Env, Var};

/// `MAPI_GCS_BUCKET`.
pub const BUCKET: Var = Var::required(
    "MAPI_GCS_BUCKET",
    "none (necessary with MAPI_OBJECTS=gcs)",
    "gcs: the bucket of all objects",
);
/// `MAPI_GCS_ENDPOINT`.
pub const ENDPOINT: Var = Var::derived(
    "MAPI_GCS_ENDPOINT",
    "Google's",
    "gcs: root of the Cloud Storage JSON API (a fake's in tests)",
);
/// `MAPI_GCS_URL_BASE`.
pub const URL_BASE_VAR: Var = Var::new(
    "MAPI_GCS_URL_BASE",
    URL_BASE,
    "gcs: root of the XML API that signed URLs and POST policies point to",
);
/// `MAPI_GCS_SIGNING_SERVICE_ACCOUNT`.
pub const SIGNING_SERVICE_ACCOUNT: Var = Var::derived(
    "MAPI_GCS_SIGNING_SERVICE_ACCOUNT",
    "none",
    "gcs: the account that signs URLs through IAM Credentials signBlob (the service's own on Cloud Run)",
);
/// `MAPI_GCS_SIGNING_KEY_FILE`.
pub const SIGNING_KEY_FILE: Var = Var::derived(
    "MAPI_GCS_SIGNING_KEY_FILE",
    "none",
    "gcs: a service-account JSON key that signs URLs instead of signBlob",
);
/// `MAPI_GCS_UPLOADER_SERVICE_ACCOUNT`.
pub const UPLOADER_SERVICE_ACCOUNT: Var = Var::derived(
    "MAPI_GCS_UPLOADER_SERVICE_ACCOUNT",
    "none",
    "gcs: the create-only account (objects.create, no objects.delete) that signs POST policies through signBlob",
);
/// `MAPI_GCS_UPLOADER_KEY_FILE`.
pub const UPLOADER_KEY_FILE: Var = Var::derived(
    "MAPI_GCS_UPLOADER_KEY_FILE",
    "none",
    "gcs: a JSON key of the create-only account, instead of signBlob",
);
/// `MAPI_IAM_CREDENTIALS_ENDPOINT`.
pub const IAM_CREDENTIALS_ENDPOINT: Var = Var::derived(
    "MAPI_IAM_CREDENTIALS_ENDPOINT",
    "Google's",
    "gcs: root of the IAM Credentials API for signBlob (a fake's in tests)",
);

/// Every variable the Cloud Storage store reads (the platform's README
/// table is built from this with the others).
pub const VARIABLES: &[Var] = &[
    BUCKET,
    ENDPOINT,
    URL_BASE_VAR,
    SIGNING_SERVICE_ACCOUNT,
    SIGNING_KEY_FILE,
    UPLOADER_SERVICE_ACCOUNT,
    UPLOADER_KEY_FILE,
    IAM_CREDENTIALS_ENDPOINT,
];

/// Who signs: a key in the process, or Google through signBlob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignerSettings {
    /// A service-account JSON key file.
    KeyFile(PathBuf),
    /// IAM Credentials `signBlob` as this account.
    SignBlob(String),
}

/// Settings of the Cloud Storage object store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `MAPI_GCS_BUCKET`.
    pub bucket: String,
    /// `MAPI_GCS_ENDPOINT`: `None` is Google's.
    pub endpoint: Option<String>,
    /// `MAPI_GCS_URL_BASE`.
    pub url_base: String,
    /// `MAPI_GCS_SIGNING_*`: who signs URLs; `None`: signed URLs are refused.
    pub signer: Option<SignerSettings>,
    /// `MAPI_GCS_UPLOADER_*`: who signs POST policies; `None`: refused.
    pub uploader: Option<SignerSettings>,
    /// `MAPI_IAM_CREDENTIALS_ENDPOINT`: `None` is Google's.
    pub iam_credentials_endpoint: Option<String>,
}

/// Google's XML API root.
pub const URL_BASE: &str = "https://storage.googleapis.com";

impl Settings {
    /// The defaults for `bucket`: Google's endpoints, nobody signs.
    pub fn new(bucket: impl Into<String>) -> Settings {
        Settings {
            bucket: bucket.into(),
            endpoint: None,
            url_base: URL_BASE.to_owned(),
            signer: None,
            uploader: None,
            iam_credentials_endpoint: None,
        }
    }

    /// Reads the settings through `get`.
    pub fn from_env(env: Env<'_>) -> Result<Settings, String> {
        let bucket = BUCKET.require(env, "MAPI_OBJECTS=gcs").map_err(|e| e.0)?;
        let signer = |account: &Var, key: &Var| match (account.get(env), key.get(env)) {
            (Some(_), Some(_)) => Err(format!("set {} or {}, not both", account.name, key.name)),
            (Some(a), None) => Ok(Some(SignerSettings::SignBlob(a))),
            (None, Some(k)) => Ok(Some(SignerSettings::KeyFile(PathBuf::from(k)))),
            (None, None) => Ok(None),
        };
        let s = Settings {
            bucket,
            endpoint: ENDPOINT.get(env),
            url_base: URL_BASE_VAR.raw(env).unwrap_or_else(|| URL_BASE.to_owned()),
            signer: signer(&SIGNING_SERVICE_ACCOUNT, &SIGNING_KEY_FILE)?,
            uploader: signer(&UPLOADER_SERVICE_ACCOUNT, &UPLOADER_KEY_FILE)?,
            iam_credentials_endpoint: IAM_CREDENTIALS_ENDPOINT.get(env),
        };
        s.validate()?;
        Ok(s)
    }

    /// Refuses settings the adapter cannot use.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.');
        if self.bucket.len() < 3 || self.bucket.len() > 222 || !self.bucket.bytes().all(ok) {
            return Err(format!(
                "MAPI_GCS_BUCKET=`{}` is not a bucket name (3 to 222 of a-z, 0-9, `-`, `_`, `.`)",
                self.bucket
            ));
        }
        let http = |v: &str| v.starts_with("https://") || v.starts_with("http://");
        for (name, value) in [
            ("MAPI_GCS_ENDPOINT", self.endpoint.as_deref()),
            ("MAPI_GCS_URL_BASE", Some(self.url_base.as_str())),
            ("MAPI_IAM_CREDENTIALS_ENDPOINT", self.iam_credentials_endpoint.as_deref()),
        ] {
            if let Some(v) = value.filter(|v| !http(v)) {
                return Err(format!("{name}=`{v}` is not an http(s):// URL"));
            }
        }
        for s in [&self.signer, &self.uploader].into_iter().flatten() {
            if let SignerSettings::SignBlob(a) = s
                && !a.contains('@')
            {
                return Err(format!("`{a}` is not a service account's email"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use mapi_settings::env_of as env;

    use super::*;

    #[test]
    fn defaults_and_every_variable_is_listed() {
        let s = Settings::from_env(&env(&[("MAPI_GCS_BUCKET", "mapi-prod-data")])).expect("settings");
        assert_eq!(s, Settings::new("mapi-prod-data"));
        assert_eq!(s.url_base, "https://storage.googleapis.com");
        let s = Settings::from_env(&env(&[
            ("MAPI_GCS_BUCKET", "b-1"),
            ("MAPI_GCS_ENDPOINT", "http://127.0.0.1:1"),
            ("MAPI_GCS_SIGNING_SERVICE_ACCOUNT", "api@p.iam.gserviceaccount.com"),
            ("MAPI_GCS_UPLOADER_KEY_FILE", "/k.json"),
        ]))
        .expect("settings");
        assert_eq!(s.signer, Some(SignerSettings::SignBlob("api@p.iam.gserviceaccount.com".into())));
        assert_eq!(s.uploader, Some(SignerSettings::KeyFile("/k.json".into())));
        mapi_settings::assert_reads_exactly(VARIABLES, &env(&[("MAPI_GCS_BUCKET", "b-1")]), |e| {
            Settings::from_env(e).expect("settings");
        });
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = Settings::from_env(&env(&[])).expect_err("bucket is necessary");
        assert!(e.contains("MAPI_GCS_BUCKET"), "{e}");
        let e = Settings::from_env(&env(&[("MAPI_GCS_BUCKET", "Bad Bucket")])).expect_err("name");
        assert!(e.contains("MAPI_GCS_BUCKET"), "{e}");
        let e = Settings::from_env(&env(&[
            ("MAPI_GCS_BUCKET", "b-1"),
            ("MAPI_GCS_SIGNING_SERVICE_ACCOUNT", "a@p"),
            ("MAPI_GCS_SIGNING_KEY_FILE", "/k.json"),
        ]))
        .expect_err("both");
        assert!(e.contains("not both"), "{e}");
        let e = Settings::from_env(&env(&[("MAPI_GCS_BUCKET", "b-1"), ("MAPI_GCS_ENDPOINT", "localhost:1")]))
            .expect_err("scheme");
        assert!(e.contains("MAPI_GCS_ENDPOINT"), "{e}");
    }
}
