//! Unpacking a local OCI image into a root filesystem, verified.
//!
//! A "bring your own container" endpoint's revision runs a tenant's image on
//! one machine from an [OCI image layout]: a directory (or a tar archive of
//! one) holding `oci-layout`, `index.json` and content-addressed blobs.
//! [`unpack`] picks the linux/amd64 image, checks every blob it reads
//! against its descriptor's sha256 digest and size, applies the layers in
//! order (with their whiteouts) to a root filesystem directory, and returns
//! the image's run configuration.
//!
//! Architecture invariant: nothing in an image writes outside `rootfs`. The
//! unpacking runs as root on the host, so every entry's parent directory is
//! resolved inside `rootfs` the way the container will see it (an absolute
//! symlink points at `rootfs`, `..` stops at it), never through the host's
//! view; an entry path with `..` refuses the image; devices and FIFOs are
//! skipped; set-id and sticky bits, owners and extended attributes are
//! dropped (every file belongs to the unpacking user).
//!
//! [OCI image layout]: https://github.com/opencontainers/image-spec/blob/main/image-layout.md

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use flate2::read::GzDecoder;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The most bytes of file content an image may unpack to.
pub const MAX_UNPACKED: u64 = 16 << 30;
/// The most tar entries an image (all layers together) may hold.
pub const MAX_ENTRIES: u64 = 1_000_000;
/// The most bytes of an index, manifest or config blob.
const MAX_JSON: u64 = 4 << 20;
/// The most symlinks followed while resolving one path (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

const BUILD_HINT: &str = "build one with `docker buildx build --output type=oci,tar=false,dest=DIR` or `skopeo copy docker://IMG oci:DIR`";

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// What an image asks to run, from its config blob's `config` object. An
/// absent field is empty. Serializable, so a revision can keep it beside its rootfs.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `Env`'s `K=V` entries, in order (a bare `K` has an empty value).
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    /// The TCP ports of `ExposedPorts`, ascending.
    pub exposed_ports: Vec<u16>,
}

impl ImageConfig {
    /// The command the image runs: its entrypoint followed by its cmd.
    pub fn command(&self) -> Vec<String> {
        self.entrypoint.iter().chain(&self.cmd).cloned().collect()
    }
}

/// Why an image was not unpacked, in words saying what to fix. On any
/// error `rootfs` may hold part of the tree: the caller removes it.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{path} is not an OCI image layout: it has no {missing}; {BUILD_HINT}")]
    NotALayout { path: PathBuf, missing: &'static str },
    #[error("{path} has image layout version {version}; only version 1 layouts are supported; {BUILD_HINT}")]
    LayoutVersion { path: PathBuf, version: String },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("the root filesystem directory {0} is not empty; unpack into a new directory")]
    RootfsNotEmpty(PathBuf),
    #[error("{what} {digest} is not valid JSON of its kind: {source}")]
    Json { what: &'static str, digest: String, source: serde_json::Error },
    #[error("the digest {0} is not supported: only `sha256:` followed by 64 lowercase hex digits is")]
    UnsupportedDigest(String),
    #[error("blob {digest} is missing from the image layout: {source}; copy the image again")]
    MissingBlob { digest: String, source: io::Error },
    #[error(
        "blob {digest} does not match its descriptor: {detail}; the layout is corrupt or was changed, copy the image again"
    )]
    BlobMismatch { digest: String, detail: String },
    #[error("{what} {digest} is {size} bytes, more than the {MAX_JSON} a local image's {what} may be")]
    JsonTooLarge { what: &'static str, digest: String, size: u64 },
    #[error(
        "the image index {detail}; keep one linux/amd64 image in the layout (`docker buildx build --platform linux/amd64`)"
    )]
    NoImage { detail: String },
    #[error("{what} {digest} has media type {media_type}, which is not supported here")]
    UnsupportedMediaType { what: &'static str, digest: String, media_type: String },
    #[error(
        "layer {digest} has media type {media_type}, which is not supported: only uncompressed and gzip layers are; rebuild with `--output type=oci,compression=gzip` or convert with `skopeo copy --dest-compress-format gzip`"
    )]
    UnsupportedLayer { digest: String, media_type: String },
    #[error(
        "the image is built for {found}, and only linux/amd64 images run here: build it with `--platform linux/amd64`"
    )]
    WrongPlatform { found: String },
    #[error("the image unpacks to more than {limit}; make the image smaller")]
    TooLarge { limit: &'static str },
    #[error("layer {digest} is not a readable tar archive: {source}")]
    Layer { digest: String, source: io::Error },
    #[error(
        "layer {digest} has the entry {entry}, whose path leaves the root filesystem with `..`; rebuild the image"
    )]
    Escape { digest: String, entry: PathBuf },
    #[error("layer {digest}: cannot unpack {entry}: {source}")]
    Entry { digest: String, entry: PathBuf, source: io::Error },
}

/// Unpacks the image at `image` (an OCI image layout directory, or a tar
/// archive of one) into `rootfs` (created if absent; it must be empty) and
/// returns its run configuration.
///
/// An archive is extracted into a temporary directory next to `rootfs`,
/// removed on return.
pub fn unpack(image: &Path, rootfs: &Path) -> Result<ImageConfig, OciError> {
    unpack_within(image, rootfs, Limits { bytes: MAX_UNPACKED, entries: MAX_ENTRIES })
}

/// The bounds of one unpacking ([`MAX_UNPACKED`], [`MAX_ENTRIES`]; tests use smaller ones).
#[derive(Clone, Copy, Debug)]
struct Limits {
    bytes: u64,
    entries: u64,
}

impl Limits {
    fn take_entry(&mut self) -> Result<(), OciError> {
        self.entries = self
            .entries
            .checked_sub(1)
            .ok_or(OciError::TooLarge { limit: "MAX_ENTRIES (1,000,000 files, directories and links)" })?;
        Ok(())
    }

    fn take_bytes(&mut self, n: u64) -> Result<(), OciError> {
        self.bytes = self
            .bytes
            .checked_sub(n)
            .ok_or(OciError::TooLarge { limit: "MAX_UNPACKED (16 GiB of file content)" })?;
        Ok(())
    }
}

fn unpack_within(image: &Path, rootfs: &Path, mut limits: Limits) -> Result<ImageConfig, OciError> {
    let root = prepare_rootfs(rootfs)?;
    let meta = fs::metadata(image).map_err(|source| OciError::Read { path: image.to_path_buf(), source })?;
    let extracted = if meta.is_dir() { None } else { Some(extract_archive(image, &root, limits)?) };
    let layout = Layout::open(extracted.as_ref().map_or(image, |t| t.path()), image)?;

    let mut target = select(&layout.index()?.manifests)?.clone();
    if [OCI_INDEX, DOCKER_LIST].contains(&target.media_type.as_str()) {
        let nested: Index = layout.json(&target, "image index")?;
        target = select(&nested.manifests)?.clone();
    }
    if ![OCI_MANIFEST, DOCKER_MANIFEST].contains(&target.media_type.as_str()) {
        return Err(OciError::UnsupportedMediaType {
            what: "manifest",
            digest: target.digest,
            media_type: target.media_type,
        });
    }
    let manifest: Manifest = layout.json(&target, "manifest")?;
    let config: ConfigBlob = layout.json(&manifest.config, "config")?;
    config.check_platform()?;
    let layers = manifest
        .layers
        .iter()
        .map(|d| match d.media_type.as_str() {
            "application/vnd.oci.image.layer.v1.tar" => Ok((d, false)),
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Ok((d, true)),
            other => {
                Err(OciError::UnsupportedLayer { digest: d.digest.clone(), media_type: other.to_string() })
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (layer, gzip) in layers {
        layout.apply_layer(layer, gzip, &root, &mut limits)?;
    }
    Ok(config.config.unwrap_or_default().into())
}

/// Creates `rootfs` if absent, checks it is empty, and returns its canonical path.
fn prepare_rootfs(rootfs: &Path) -> Result<PathBuf, OciError> {
    let write = |source| OciError::Write { path: rootfs.to_path_buf(), source };
    fs::create_dir_all(rootfs).map_err(write)?;
    if fs::read_dir(rootfs).map_err(write)?.next().is_some() {
        return Err(OciError::RootfsNotEmpty(rootfs.to_path_buf()));
    }
    rootfs.canonicalize().map_err(write)
}

/// Extracts the layout files of the archive `archive` (regular files and
/// directories only) into a temporary directory next to `root`.
fn extract_archive(archive: &Path, root: &Path, mut limits: Limits) -> Result<tempfile::TempDir, OciError> {
    let read = |source| OciError::Read { path: archive.to_path_buf(), source };
    let parent = root.parent().unwrap_or(root);
    let dir = tempfile::Builder::new()
        .prefix(".oci-layout-")
        .tempdir_in(parent)
        .map_err(|source| OciError::Write { path: parent.to_path_buf(), source })?;
    let mut tar = tar::Archive::new(BufReader::new(File::open(archive).map_err(read)?));
    tar.set_preserve_permissions(false);
    for entry in tar.entries().map_err(read)? {
        let mut entry = entry.map_err(read)?;
        limits.take_entry()?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        limits.take_bytes(entry.size())?;
        entry.unpack_in(dir.path()).map_err(read)?;
    }
    Ok(dir)
}

/// An OCI image layout directory, checked to have its two top files.
struct Layout {
    dir: PathBuf,
    /// The path the caller named, for messages.
    named: PathBuf,
}

impl Layout {
    fn open(dir: &Path, named: &Path) -> Result<Self, OciError> {
        let not = |missing| OciError::NotALayout { path: named.to_path_buf(), missing };
        let marker = dir.join("oci-layout");
        let text = fs::read(&marker).map_err(|_| not("oci-layout file"))?;
        let marker: LayoutMarker = serde_json::from_slice(&text).map_err(|_| not("valid oci-layout file"))?;
        if !marker.image_layout_version.starts_with("1.") {
            return Err(OciError::LayoutVersion {
                path: named.to_path_buf(),
                version: marker.image_layout_version,
            });
        }
        if !dir.join("index.json").is_file() {
            return Err(not("index.json"));
        }
        Ok(Self { dir: dir.to_path_buf(), named: named.to_path_buf() })
    }

    fn index(&self) -> Result<Index, OciError> {
        let path = self.dir.join("index.json");
        let read = |source| OciError::Read { path: self.named.join("index.json"), source };
        let mut bytes = Vec::new();
        File::open(&path).map_err(read)?.take(MAX_JSON).read_to_end(&mut bytes).map_err(read)?;
        serde_json::from_slice(&bytes).map_err(|source| OciError::Json {
            what: "index",
            digest: "index.json".into(),
            source,
        })
    }

    /// Opens the blob of `d`, counting and hashing what is read from it.
    fn blob(&self, d: &Descriptor) -> Result<Verifying, OciError> {
        let hex = d
            .digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or_else(|| OciError::UnsupportedDigest(d.digest.clone()))?;
        let path = self.dir.join("blobs/sha256").join(hex);
        let missing = |source| OciError::MissingBlob { digest: d.digest.clone(), source };
        if !fs::symlink_metadata(&path).map_err(missing)?.is_file() {
            return Err(OciError::BlobMismatch {
                digest: d.digest.clone(),
                detail: "it is not a regular file".into(),
            });
        }
        let file = File::open(&path).map_err(missing)?;
        Ok(Verifying {
            // One byte past the size, so a longer blob shows as longer.
            inner: BufReader::new(file).take(d.size.saturating_add(1)),
            path,
            hasher: Sha256::new(),
            read: 0,
        })
    }

    /// Reads and parses the JSON blob of `d`.
    fn json<T: serde::de::DeserializeOwned>(
        &self,
        d: &Descriptor,
        what: &'static str,
    ) -> Result<T, OciError> {
        if d.size > MAX_JSON {
            return Err(OciError::JsonTooLarge { what, digest: d.digest.clone(), size: d.size });
        }
        let mut blob = self.blob(d)?;
        let mut bytes = Vec::new();
        blob.read_to_end(&mut bytes).map_err(|source| OciError::Read { path: blob.path.clone(), source })?;
        blob.finish(d)?;
        serde_json::from_slice(&bytes).map_err(|source| OciError::Json {
            what,
            digest: d.digest.clone(),
            source,
        })
    }

    /// Applies the layer `d` to `root`; a digest mismatch is reported
    /// before whatever else went wrong while reading it.
    fn apply_layer(
        &self,
        d: &Descriptor,
        gzip: bool,
        root: &Path,
        limits: &mut Limits,
    ) -> Result<(), OciError> {
        let mut blob = self.blob(d)?;
        let applied = if gzip {
            apply_tar(GzDecoder::new(&mut blob), &d.digest, root, limits)
        } else {
            apply_tar(&mut blob, &d.digest, root, limits)
        };
        blob.finish(d)?;
        applied
    }
}

/// A blob being read, with its size and sha256 so far.
struct Verifying {
    inner: io::Take<BufReader<File>>,
    path: PathBuf,
    hasher: Sha256,
    read: u64,
}

impl Read for Verifying {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

impl Verifying {
    /// Reads the rest of the blob and checks it against `d`.
    fn finish(mut self, d: &Descriptor) -> Result<(), OciError> {
        let mismatch = |detail| OciError::BlobMismatch { digest: d.digest.clone(), detail };
        io::copy(&mut self, &mut io::sink())
            .map_err(|source| OciError::Read { path: self.path.clone(), source })?;
        if self.read != d.size {
            let size = if self.read > d.size { "more".to_string() } else { self.read.to_string() };
            return Err(mismatch(format!("it is {size} bytes, and its descriptor says {}", d.size)));
        }
        let actual = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        if actual != d.digest {
            return Err(mismatch(format!("its content hashes to {actual}")));
        }
        Ok(())
    }
}

/// Picks the linux/amd64 image of an index's manifests when they name
/// platforms, else the only one.
fn select(manifests: &[Descriptor]) -> Result<&Descriptor, OciError> {
    let named = manifests.iter().any(|d| d.platform.is_some());
    let mut candidates: Vec<&Descriptor> = manifests
        .iter()
        .filter(|d| {
            !named || d.platform.as_ref().is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
        })
        .collect();
    candidates.sort_by(|a, b| a.digest.cmp(&b.digest));
    candidates.dedup_by(|a, b| a.digest == b.digest);
    match candidates.as_slice() {
        [one] => Ok(one),
        [] if named => {
            let found: Vec<String> = manifests
                .iter()
                .filter_map(|d| d.platform.as_ref())
                .map(|p| format!("{}/{}", p.os, p.architecture))
                .collect();
            Err(OciError::NoImage {
                detail: format!("has no linux/amd64 image (it has {})", found.join(", ")),
            })
        }
        [] => Err(OciError::NoImage { detail: "lists no manifest".into() }),
        many => Err(OciError::NoImage {
            detail: format!("lists {} different images and cannot tell which to run", many.len()),
        }),
    }
}

/// Applies one layer's tar stream to `root`, with OCI whiteouts.
fn apply_tar(reader: impl Read, digest: &str, root: &Path, limits: &mut Limits) -> Result<(), OciError> {
    let layer_err = |source| OciError::Layer { digest: digest.to_string(), source };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    // What this layer wrote: an opaque whiteout hides lower layers only.
    let mut written: HashSet<PathBuf> = HashSet::new();
    for entry in archive.entries().map_err(layer_err)? {
        let mut entry = entry.map_err(layer_err)?;
        limits.take_entry()?;
        let path = entry.path().map_err(layer_err)?.into_owned();
        let entry_err = |source| OciError::Entry { digest: digest.to_string(), entry: path.clone(), source };
        let parts = relative(&path)
            .ok_or_else(|| OciError::Escape { digest: digest.to_string(), entry: path.clone() })?;
        let Some((name, parent)) = parts.split_last() else { continue };

        if name == ".wh..wh..opq" {
            if let Some(dir) = resolve(root, parent, false).map_err(entry_err)? {
                clear_lower(&dir, &written).map_err(entry_err)?;
            }
            continue;
        }
        if let Some(hidden) = name.to_str().and_then(|n| n.strip_prefix(".wh.")) {
            let one_name =
                matches!(Path::new(hidden).components().collect::<Vec<_>>()[..], [Component::Normal(_)]);
            if one_name && let Some(dir) = resolve(root, parent, false).map_err(entry_err)? {
                let target = dir.join(hidden);
                if !written.contains(&target) {
                    remove(&target).map_err(entry_err)?;
                }
            }
            continue;
        }

        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        match kind {
            T::Regular | T::Continuous | T::GNUSparse => limits.take_bytes(entry.size())?,
            T::Directory | T::Symlink | T::Link => {}
            // Devices, FIFOs and kinds unknown here.
            _ => continue,
        }
        let Some(dir) = resolve(root, parent, true).map_err(entry_err)? else { continue };
        let dst = dir.join(name);
        make_way(&dst, kind.is_dir()).map_err(entry_err)?;
        if kind.is_hard_link() {
            let target = entry.link_name().map_err(entry_err)?.map(|t| t.into_owned()).unwrap_or_default();
            let target = relative(&target)
                .and_then(|t| {
                    let (name, parent) = t.split_last()?;
                    Some(resolve(root, parent, false).map(|dir| dir.map(|d| d.join(name))))
                })
                .ok_or_else(|| OciError::Escape { digest: digest.to_string(), entry: path.clone() })?
                .map_err(entry_err)?
                .ok_or_else(|| {
                    entry_err(io::Error::new(io::ErrorKind::NotFound, "its link target is missing"))
                })?;
            fs::hard_link(&target, &dst).map_err(entry_err)?;
        } else {
            entry.unpack(&dst).map_err(entry_err)?;
        }
        // The directories it lies in are this layer's too (an opaque
        // marker after it keeps them).
        for path in dst.ancestors().take_while(|p| *p != root) {
            if !written.insert(path.to_path_buf()) {
                break;
            }
        }
    }
    Ok(())
}

/// The `Normal` components of an entry path (a leading `/` and `.` are
/// dropped); `None` when it has `..`.
fn relative(path: &Path) -> Option<Vec<OsString>> {
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::ParentDir => return None,
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(parts)
}

/// The real directory that `parts` names inside `root`, following symlinks
/// as the container would see them: an absolute target starts again at
/// `root`, and `..` never climbs above it. Missing directories are created
/// when `create`; otherwise a missing one (or a file in the way) gives `None`.
fn resolve(root: &Path, parts: &[OsString], create: bool) -> io::Result<Option<PathBuf>> {
    let up = OsStr::new("..");
    let mut pending: VecDeque<OsString> = parts.iter().cloned().collect();
    let mut done: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        if part == up {
            done.pop();
            continue;
        }
        let path: PathBuf =
            root.iter().chain(done.iter().map(OsString::as_os_str)).chain([part.as_os_str()]).collect();
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(io::Error::other(format!(
                        "too many levels of symbolic links at {}",
                        path.display()
                    )));
                }
                let target = fs::read_link(&path)?;
                if target.has_root() {
                    done.clear();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(p) => pending.push_front(p.to_os_string()),
                        Component::ParentDir => pending.push_front(up.to_os_string()),
                        Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                    }
                }
            }
            Ok(m) if m.is_dir() => done.push(part),
            Ok(_) if create => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", path.display()),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                fs::DirBuilder::new().mode(0o755).create(&path)?;
                done.push(part);
            }
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(root.iter().chain(done.iter().map(OsString::as_os_str)).collect()))
}

/// Removes what is at `dst` unless it is a directory and a directory comes.
fn make_way(dst: &Path, dir_comes: bool) -> io::Result<()> {
    match fs::symlink_metadata(dst) {
        Ok(m) if m.is_dir() && dir_comes => Ok(()),
        Ok(_) => remove(dst),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes `path` (a directory with its content), not following a symlink.
fn remove(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Empties `dir` of what lower layers put there, keeping what this layer wrote.
fn clear_lower(dir: &Path, written: &HashSet<PathBuf>) -> io::Result<()> {
    for child in fs::read_dir(dir)? {
        let path = child?.path();
        if !written.contains(&path) {
            remove(&path)?;
        } else if fs::symlink_metadata(&path)?.is_dir() {
            clear_lower(&path, written)?;
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LayoutMarker {
    image_layout_version: String,
}

#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Clone, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct ConfigBlob {
    architecture: Option<String>,
    os: Option<String>,
    config: Option<RunConfig>,
}

impl ConfigBlob {
    fn check_platform(&self) -> Result<(), OciError> {
        let os = self.os.as_deref().unwrap_or("linux");
        let arch = self.architecture.as_deref().unwrap_or("amd64");
        if (os, arch) == ("linux", "amd64") {
            Ok(())
        } else {
            Err(OciError::WrongPlatform { found: format!("{os}/{arch}") })
        }
    }
}

/// The config blob's `config` object, as Docker spells its keys.
#[derive(Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig {
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    env: Option<Vec<String>>,
    working_dir: Option<String>,
    exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
}

impl From<RunConfig> for ImageConfig {
    fn from(c: RunConfig) -> Self {
        let mut exposed_ports: Vec<u16> = c
            .exposed_ports
            .unwrap_or_default()
            .keys()
            .filter_map(|k| match k.split_once('/') {
                Some((port, "tcp")) | Some((port, "")) => port.parse().ok(),
                Some(_) => None,
                None => k.parse().ok(),
            })
            .collect();
        exposed_ports.sort_unstable();
        exposed_ports.dedup();
        Self {
            entrypoint: c.entrypoint.unwrap_or_default(),
            cmd: c.cmd.unwrap_or_default(),
            env: c
                .env
                .unwrap_or_default()
                .into_iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (kv, String::new()),
                })
                .collect(),
            working_dir: c.working_dir.filter(|d| !d.is_empty()),
            exposed_ports,
        }
    }
}

#[cfg(test)]
mod tests;
