//! `mapi models versions download ID [--dir DIR] [--force]`: every artifact
//! of a model version, written into DIR (default `./<version id>/`).
//!
//! The URLs come from `POST /v1/model-versions/{id}/urls`, which mints them
//! only after the version's manifest verified; each answer carries the size
//! and SHA-256 the manifest pins. A file is downloaded to a temporary name
//! beside its target, checked against both, and only then renamed into
//! place: a mismatch deletes the temporary file and fails naming the
//! artifact, so no file that is not the signed artifact is ever left under
//! its name. An existing file with the pinned bytes is kept as it is; one
//! with other bytes is replaced only with `--force`, and without it nothing
//! is downloaded at all.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use mapi_api::views::{ArtifactUrl, ArtifactUrls};
use reqwest::Method;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::{Client, segment};

/// Why a download stopped.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("the platform named an artifact `{0}`, which is not a relative file path: nothing was written")]
    BadName(String),
    #[error("{} exists and is not a file: choose another --dir", .0.display())]
    NotAFile(PathBuf),
    #[error(
        "refusing to replace files whose bytes are not the version's artifacts ({}): pass --force to replace them, or choose another --dir",
        list(.0)
    )]
    WouldOverwrite(Vec<PathBuf>),
    #[error("{}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("artifact {name}: cannot download it: {source}")]
    Fetch {
        name: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "artifact {name}: its URL answered {status}; the URLs stay valid 15 minutes: run the command again"
    )]
    Status { name: String, status: u16 },
    #[error(
        "artifact {name}: the downloaded bytes ({got}) are not the ones the version's manifest pins ({pinned}): \
         nothing was kept; run the command again, and if it fails again the stored artifact has changed"
    )]
    Mismatch { name: String, got: String, pinned: String },
}

fn list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> DownloadError {
    let path = path.to_owned();
    move |source| DownloadError::Io { path, what, source }
}

/// What became of one artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Downloaded, verified and put in place.
    Written,
    /// Already there with the pinned bytes: left as it was.
    Unchanged,
}

/// One artifact in DIR.
#[derive(Debug, Serialize)]
pub struct Fetched {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub sha256: String,
    pub outcome: Outcome,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub model_version: String,
    pub dir: PathBuf,
    pub files: Vec<Fetched>,
}

/// Where an artifact goes under `dir`, refused unless its name is a
/// relative path of plain components (a fan-out's are `{task}/{name}`).
fn target(dir: &Path, name: &str) -> Result<PathBuf, DownloadError> {
    let parts: Vec<&str> = name.split('/').collect();
    let plain = |p: &&str| !p.is_empty() && *p != "." && *p != ".." && !p.contains(['\\', '\0']);
    if !parts.iter().all(plain) {
        return Err(DownloadError::BadName(name.to_owned()));
    }
    Ok(parts.iter().fold(dir.to_owned(), |path, part| path.join(part)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The size and hex SHA-256 of the file at `path`.
async fn digest_of(path: &Path) -> Result<(u64, String), DownloadError> {
    let mut file = tokio::fs::File::open(path).await.map_err(io(path, "cannot read it"))?;
    let (mut hasher, mut size, mut buf) = (Sha256::new(), 0u64, vec![0u8; 64 * 1024]);
    loop {
        let n = file.read(&mut buf).await.map_err(io(path, "cannot read it"))?;
        if n == 0 {
            return Ok((size, hex(&hasher.finalize())));
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
}

/// Whether the file at `path` holds exactly the artifact's pinned bytes;
/// `None` when there is no file.
async fn existing(path: &Path, a: &ArtifactUrl) -> Result<Option<bool>, DownloadError> {
    let meta = match tokio::fs::metadata(path).await {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, "cannot look at it")(e)),
    };
    if !meta.is_file() {
        return Err(DownloadError::NotAFile(path.to_owned()));
    }
    if meta.len() != a.size {
        return Ok(Some(false));
    }
    let (_, sha) = digest_of(path).await?;
    Ok(Some(sha == a.sha256))
}

/// Each artifact with its target and whether it is already there, checked
/// before anything is written: an existing different file fails it all
/// unless `force`.
async fn plan<'a>(
    dir: &Path,
    artifacts: &'a [ArtifactUrl],
    force: bool,
) -> Result<Vec<(&'a ArtifactUrl, PathBuf, bool)>, DownloadError> {
    let (mut planned, mut different) = (Vec::new(), Vec::new());
    for a in artifacts {
        let path = target(dir, &a.name)?;
        let there = existing(&path, a).await?;
        if there == Some(false) && !force {
            different.push(path.clone());
        }
        planned.push((a, path, there == Some(true)));
    }
    if !different.is_empty() {
        return Err(DownloadError::WouldOverwrite(different));
    }
    Ok(planned)
}

/// The file beside `path` an artifact is downloaded to before it is checked.
fn temp_of(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.mapi-download"))
}

/// Downloads `a` into `temp`, stopping as soon as it is longer than pinned;
/// the size and hex SHA-256 of what was written.
async fn fetch_to(
    http: &reqwest::Client,
    a: &ArtifactUrl,
    temp: &Path,
) -> Result<(u64, String), DownloadError> {
    let fetch = |source| DownloadError::Fetch { name: a.name.clone(), source };
    let mut resp = http.get(&a.url).send().await.map_err(fetch)?;
    if !resp.status().is_success() {
        return Err(DownloadError::Status { name: a.name.clone(), status: resp.status().as_u16() });
    }
    let mut file = tokio::fs::File::create(temp).await.map_err(io(temp, "cannot create it"))?;
    let (mut hasher, mut size) = (Sha256::new(), 0u64);
    while let Some(chunk) = resp.chunk().await.map_err(fetch)? {
        size += chunk.len() as u64;
        if size > a.size {
            return Ok((size, "(not computed: longer than pinned)".to_owned()));
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(io(temp, "cannot write it"))?;
    }
    file.sync_all().await.map_err(io(temp, "cannot write it"))?;
    Ok((size, hex(&hasher.finalize())))
}

/// Downloads `a` to `path` through a temporary file that is renamed into
/// place only when its size and SHA-256 are the pinned ones.
async fn fetch(http: &reqwest::Client, a: &ArtifactUrl, path: &Path) -> Result<(), DownloadError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io(parent, "cannot create the directory"))?;
    }
    let temp = temp_of(path);
    let checked = match fetch_to(http, a, &temp).await {
        Ok((size, sha)) if size == a.size && sha == a.sha256 => Ok(()),
        Ok((size, sha)) => Err(DownloadError::Mismatch {
            name: a.name.clone(),
            got: format!("{size} bytes, sha256 {sha}"),
            pinned: format!("{} bytes, sha256 {}", a.size, a.sha256),
        }),
        Err(e) => Err(e),
    };
    match checked {
        Ok(()) => tokio::fs::rename(&temp, path).await.map_err(io(path, "cannot put the download in place")),
        Err(e) => {
            // Best effort: the error that stopped the download is the one to report.
            let _ = tokio::fs::remove_file(&temp).await;
            Err(e)
        }
    }
}

/// The line a person reads for one file.
fn line(f: &Fetched) -> String {
    let size = crate::output::size(f.size);
    match f.outcome {
        Outcome::Written => format!("{}  {size}", f.path.display()),
        Outcome::Unchanged => format!("{}  {size}  (already there)", f.path.display()),
    }
}

/// Downloads every artifact of version `id` into `dir`.
pub async fn download(
    client: &Client,
    id: &str,
    dir: Option<PathBuf>,
    force: bool,
    json: bool,
) -> crate::error::Result<ExitCode> {
    let path = format!("/v1/model-versions/{}/urls", segment(id));
    let urls: ArtifactUrls = client.send(client.request(Method::POST, &path)).await?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(urls.model_version.as_str()));
    let planned = plan(&dir, &urls.artifacts, force).await?;
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(60))
        .build()?;
    let mut files = Vec::new();
    for (a, path, unchanged) in planned {
        if !unchanged {
            fetch(&http, a, &path).await?;
        }
        let outcome = if unchanged { Outcome::Unchanged } else { Outcome::Written };
        let f = Fetched { name: a.name.clone(), path, size: a.size, sha256: a.sha256.clone(), outcome };
        if !json {
            crate::output::line(&line(&f))?;
        }
        files.push(f);
    }
    if json {
        let report = Report { model_version: urls.model_version.to_string(), dir, files };
        crate::output::print(true, &report, String::new)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names_stay_under_the_directory() {
        let dir = Path::new("out");
        assert_eq!(target(dir, "model.json").ok(), Some(PathBuf::from("out/model.json")));
        assert_eq!(target(dir, "3/model.json").ok(), Some(PathBuf::from("out/3/model.json")));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./x", "a\\..\\x", "x/"] {
            assert!(matches!(target(dir, bad), Err(DownloadError::BadName(_))), "{bad:?}");
        }
    }

    #[test]
    fn the_temporary_file_is_a_hidden_sibling() {
        assert_eq!(temp_of(Path::new("out/3/model.json")), PathBuf::from("out/3/.model.json.mapi-download"));
    }
}
