//! The Firestore store's settings (`MAPI_STORE=firestore`).

use mapi_settings::{Env, Var};

/// `MAPI_FIRESTORE_PROJECT`.
pub const PROJECT: Var = Var::required(
    "MAPI_FIRESTORE_PROJECT",
    "none (necessary)",
    "firestore: the project that holds the database",
);
/// `MAPI_FIRESTORE_DATABASE`.
pub const DATABASE: Var = Var::new("MAPI_FIRESTORE_DATABASE", DEFAULT_DATABASE, "firestore: the database id");
/// `MAPI_FIRESTORE_ENDPOINT`.
pub const ENDPOINT: Var = Var::derived(
    "MAPI_FIRESTORE_ENDPOINT",
    "Google's",
    "firestore: gRPC endpoint; an http:// one (an emulator) is used without credentials",
);

/// Every variable the Firestore store reads (the platform's README table
/// is built from this with the others).
pub const VARIABLES: &[Var] = &[PROJECT, DATABASE, ENDPOINT];

/// The default database id, Firestore's own.
pub const DEFAULT_DATABASE: &str = "(default)";

/// Settings of the Firestore store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `MAPI_FIRESTORE_PROJECT`.
    pub project: String,
    /// `MAPI_FIRESTORE_DATABASE`.
    pub database: String,
    /// `MAPI_FIRESTORE_ENDPOINT`: `None` for Google's.
    pub endpoint: Option<String>,
}

impl Settings {
    /// The table's defaults for `project`.
    pub fn new(project: impl Into<String>) -> Settings {
        Settings { project: project.into(), database: DEFAULT_DATABASE.to_owned(), endpoint: None }
    }

    /// Reads the settings through `get` (the environment in production).
    pub fn from_env(env: Env<'_>) -> Result<Settings, String> {
        let project = PROJECT.require(env, "MAPI_STORE=firestore").map_err(|e| e.0)?;
        let mut s = Settings::new(project);
        s.database = DATABASE.raw(env).unwrap_or(s.database);
        s.endpoint = ENDPOINT.get(env);
        s.validate()?;
        Ok(s)
    }

    /// Refuses settings that cannot name a database or reach it.
    pub fn validate(&self) -> Result<(), String> {
        // Project ids: 6-30 of [a-z0-9-]; the emulator accepts any path
        // segment, so only what would break the resource name is refused.
        let segment_ok = |v: &str| {
            !v.is_empty() && v.len() <= 63 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !segment_ok(&self.project) {
            return Err(format!(
                "MAPI_FIRESTORE_PROJECT={} is not a project id (letters, digits and '-')",
                self.project
            ));
        }
        if self.database != DEFAULT_DATABASE && !segment_ok(&self.database) {
            return Err(format!(
                "MAPI_FIRESTORE_DATABASE={} is not a database id: use (default) or letters, digits and '-'",
                self.database
            ));
        }
        if let Some(e) = &self.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(format!(
                "MAPI_FIRESTORE_ENDPOINT={e} must start with https:// (Firestore) or http:// (an emulator)"
            ));
        }
        Ok(())
    }

    /// `projects/{project}/databases/{database}`.
    pub fn database_path(&self) -> String {
        format!("projects/{}/databases/{}", self.project, self.database)
    }
}

#[cfg(test)]
mod tests {
    use mapi_settings::env_of as env;

    use super::*;

    #[test]
    fn defaults_are_the_table() {
        let s = Settings::from_env(&env(&[("MAPI_FIRESTORE_PROJECT", "mapi-prod")])).expect("settings");
        assert_eq!(s, Settings::new("mapi-prod"));
        assert_eq!(s.database, "(default)");
        assert_eq!(s.endpoint, None);
        assert_eq!(s.database_path(), "projects/mapi-prod/databases/(default)");
        let table: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(table, ["MAPI_FIRESTORE_PROJECT", "MAPI_FIRESTORE_DATABASE", "MAPI_FIRESTORE_ENDPOINT"]);
        mapi_settings::assert_reads_exactly(VARIABLES, &env(&[("MAPI_FIRESTORE_PROJECT", "p")]), |e| {
            Settings::from_env(e).expect("settings");
        });
    }

    #[test]
    fn every_variable_is_read() {
        let s = Settings::from_env(&env(&[
            ("MAPI_FIRESTORE_PROJECT", "p-1"),
            ("MAPI_FIRESTORE_DATABASE", "mapi-eu"),
            ("MAPI_FIRESTORE_ENDPOINT", " http://127.0.0.1:8080 "),
        ]))
        .expect("settings");
        assert_eq!(s.database_path(), "projects/p-1/databases/mapi-eu");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:8080"));
    }

    #[test]
    fn bad_settings_are_refused_with_the_variable_named() {
        let e = Settings::from_env(&env(&[])).expect_err("project is necessary");
        assert!(e.contains("MAPI_FIRESTORE_PROJECT"), "{e}");
        let e = Settings::from_env(&env(&[("MAPI_FIRESTORE_PROJECT", "a/b")])).expect_err("slash");
        assert!(e.contains("MAPI_FIRESTORE_PROJECT"), "{e}");
        let e =
            Settings::from_env(&env(&[("MAPI_FIRESTORE_PROJECT", "p"), ("MAPI_FIRESTORE_DATABASE", "x y")]))
                .expect_err("space");
        assert!(e.contains("MAPI_FIRESTORE_DATABASE"), "{e}");
        let e = Settings::from_env(&env(&[
            ("MAPI_FIRESTORE_PROJECT", "p"),
            ("MAPI_FIRESTORE_ENDPOINT", "127.0.0.1:8080"),
        ]))
        .expect_err("no scheme");
        assert!(e.contains("MAPI_FIRESTORE_ENDPOINT"), "{e}");
    }
}
