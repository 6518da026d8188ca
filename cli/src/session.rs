//! What the CLI remembers between commands: for each platform URL, the
//! token it acts with and the tenant and project in use, and which platform
//! is current. It lives in the user's configuration directory
//! (`$MAPI_CONFIG_DIR`, else `$XDG_CONFIG_HOME/mapi`, else
//! `~/.config/mapi`), never in the current directory, in a file only its
//! owner can read.
//!
//! Where a command's URL and token come from, first found wins: `--url` /
//! `MAPI_URL` and `--token` / `MAPI_TOKEN`; the saved entry of that URL (or
//! of the current platform); the file a `mapi dev` home holds for its own
//! CLI (`$MAPI_HOME/credentials.json`, else `./.mapi/credentials.json`).
//!
//! `mapi dev` adds its token for its URL when it starts, but never replaces
//! an entry a person signed in with (`mapi login`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use mapi_api::credentials::Credentials;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// The saved state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    /// The platform commands talk to when no URL is given.
    pub current: Option<String>,
    pub platforms: BTreeMap<String, Entry>,
}

/// One platform's entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub token: String,
    pub tenant: Option<String>,
    pub project: Option<String>,
    /// Signed in by a person (`mapi login`): `mapi dev` leaves it alone.
    #[serde(default)]
    pub session: bool,
}

/// What a command acts with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    pub url: Option<String>,
    pub token: Option<String>,
    pub tenant: Option<String>,
    pub project: Option<String>,
}

/// The configuration directory, when the environment names one.
pub fn config_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("MAPI_CONFIG_DIR")
        .or_else(|| var("XDG_CONFIG_HOME").map(|d| d.join("mapi")))
        .or_else(|| var("HOME").map(|h| h.join(".config").join("mapi")))
}

fn path() -> Option<PathBuf> {
    config_dir().map(|d| d.join("credentials.json"))
}

/// The saved state; empty when there is none (or it cannot be read).
pub fn load() -> Saved {
    path()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Saves `saved`, readable by its owner only.
pub fn save(saved: &Saved) -> Result<()> {
    let path = path().ok_or("no configuration directory: set HOME or MAPI_CONFIG_DIR")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    mapi_api::credentials::write_private(&path, &serde_json::to_vec_pretty(saved)?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// The credentials a `mapi dev` home holds for its CLI.
pub fn dev_home() -> Option<Credentials> {
    let home = std::env::var_os("MAPI_HOME").map_or_else(|| PathBuf::from("./.mapi"), PathBuf::from);
    serde_json::from_slice(&std::fs::read(home.join("credentials.json")).ok()?).ok()
}

/// The URL, token, tenant and project a command acts with.
pub fn resolve(
    url: Option<String>,
    token: Option<String>,
    saved: &Saved,
    dev: Option<&Credentials>,
) -> Resolved {
    let url = url
        .or_else(|| saved.current.clone())
        .or_else(|| dev.map(|d| d.url.clone()))
        .map(|u| u.trim_end_matches('/').to_owned());
    let entry = url.as_ref().and_then(|u| saved.platforms.get(u).cloned()).or_else(|| {
        let d = dev.filter(|d| Some(d.url.trim_end_matches('/')) == url.as_deref())?;
        Some(Entry {
            token: d.token.clone(),
            tenant: Some(d.tenant.to_string()),
            project: Some(d.project.to_string()),
            session: false,
        })
    });
    Resolved {
        url,
        token: token.or_else(|| entry.as_ref().map(|e| e.token.clone())),
        tenant: entry.as_ref().and_then(|e| e.tenant.clone()),
        project: entry.and_then(|e| e.project),
    }
}

/// `mapi dev`'s own entry for its URL, unless a person signed in there; it becomes the current
/// platform when there is none or the current one is on this machine. Whether the entry was
/// written (false: a session was kept).
pub fn register_dev(saved: &mut Saved, creds: &Credentials) -> bool {
    let url = creds.url.trim_end_matches('/').to_owned();
    let kept = saved.platforms.get(&url).is_some_and(|e| e.session);
    if !kept {
        let entry = Entry {
            token: creds.token.clone(),
            tenant: Some(creds.tenant.to_string()),
            project: Some(creds.project.to_string()),
            session: false,
        };
        saved.platforms.insert(url.clone(), entry);
    }
    if saved.current.as_deref().is_none_or(crate::client::is_local) {
        saved.current = Some(url);
    }
    !kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(url: &str, token: &str) -> Credentials {
        Credentials {
            url: url.to_owned(),
            token: token.to_owned(),
            tenant: mapi_domain::TenantId::parse("dev").expect("tenant"),
            project: mapi_domain::ProjectId::parse("default").expect("project"),
        }
    }

    fn session(token: &str, tenant: &str) -> Entry {
        Entry { token: token.into(), tenant: Some(tenant.into()), project: Some("p".into()), session: true }
    }

    #[test]
    fn flags_win_then_the_saved_entry_then_the_dev_home() {
        let mut saved = Saved::default();
        let d = dev("http://127.0.0.1:8080", "mapi_dev");
        let r = resolve(None, None, &saved, Some(&d));
        assert_eq!((r.url.as_deref(), r.token.as_deref()), (Some("http://127.0.0.1:8080"), Some("mapi_dev")));
        assert_eq!(r.tenant.as_deref(), Some("dev"));
        saved.platforms.insert("http://127.0.0.1:8080".into(), session("sess", "acme"));
        saved.current = Some("http://127.0.0.1:8080".into());
        let r = resolve(None, None, &saved, Some(&d));
        assert_eq!((r.token.as_deref(), r.tenant.as_deref()), (Some("sess"), Some("acme")));
        let r = resolve(Some("https://mapi.example.com/".into()), Some("tok".into()), &saved, Some(&d));
        assert_eq!((r.url.as_deref(), r.token.as_deref()), (Some("https://mapi.example.com"), Some("tok")));
        assert_eq!(r.tenant, None, "another platform's entry is not used");
        assert_eq!(resolve(None, None, &Saved::default(), None), Resolved::default());
    }

    #[test]
    fn mapi_dev_never_replaces_a_session_and_takes_current_only_from_local_platforms() {
        let url = "http://127.0.0.1:8080";
        let mut saved = Saved::default();
        assert!(register_dev(&mut saved, &dev(url, "mapi_one")));
        assert_eq!(saved.current.as_deref(), Some(url));
        assert!(register_dev(&mut saved, &dev(url, "mapi_two")), "its own old token is replaced");
        assert_eq!(saved.platforms[url].token, "mapi_two");
        saved.platforms.insert(url.into(), session("sess", "acme"));
        assert!(!register_dev(&mut saved, &dev(url, "mapi_three")), "a signed-in session is kept");
        assert_eq!(saved.platforms[url], session("sess", "acme"));
        saved.current = Some("https://mapi.example.com".into());
        register_dev(&mut saved, &dev("http://127.0.0.1:9000", "mapi_x"));
        assert_eq!(
            saved.current.as_deref(),
            Some("https://mapi.example.com"),
            "a cloud platform stays current"
        );
    }
}
