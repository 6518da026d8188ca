//! A plugin's package: its directory as a tar archive (`pack`), checked as
//! a whole before anything is kept (`read`) and unpacked only into the
//! directory given (`unpack`).
//!
//! A package holds regular files and directories under relative paths of
//! plain components (no `..`, no absolute paths, no links, no devices),
//! `mapi-plugin.toml` at its root, and the module of every method's entry
//! point. Its identity is the SHA-256 of its bytes.

use std::io::Read;
use std::path::{Component, Path};

use sha2::{Digest, Sha256};

use crate::manifest::{self, Manifest, ManifestError};

/// The largest package accepted, in bytes.
pub const MAX_BYTES: usize = 8 << 20;
/// The most files one package holds.
pub const MAX_FILES: usize = 1024;

/// A package that read and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    pub manifest: Manifest,
    /// Lowercase hex SHA-256 of the package's bytes.
    pub sha256: String,
    /// Every file, by its path in the package, with its size.
    pub files: Vec<(String, u64)>,
}

/// Why a package was refused; each message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageError {
    #[error("the package is not a tar archive: {0}")]
    NotTar(String),
    #[error(
        "the package is {0} bytes; the limit is {MAX_BYTES}: leave data and caches out of the plugin's directory"
    )]
    TooLarge(usize),
    #[error("the package holds more than {MAX_FILES} files")]
    TooManyFiles,
    #[error("`{0}` is not a plain relative path: a package holds files under its own root only")]
    BadPath(String),
    #[error("`{0}` is not a regular file or directory: a package holds no links or devices")]
    NotAFile(String),
    #[error("the package has no {} at its root", manifest::FILE)]
    NoManifest,
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("{} is not UTF-8 text", manifest::FILE)]
    ManifestNotText,
    #[error(
        "method `{method}`'s module `{module}` is not in the package (as {path}.py or {path}/__init__.py)"
    )]
    MissingModule { method: String, module: String, path: String },
    #[error("unpacking into {path}: {message}")]
    Io { path: String, message: String },
}

/// Reads and validates a package.
pub fn read(bytes: &[u8]) -> Result<Package, PackageError> {
    let mut manifest_text = None;
    let mut files = Vec::new();
    visit(
        bytes,
        |path, entry| {
            if path == manifest::FILE {
                let mut text = Vec::new();
                entry.read_to_end(&mut text).map_err(|e| PackageError::NotTar(e.to_string()))?;
                manifest_text = Some(String::from_utf8(text).map_err(|_| PackageError::ManifestNotText)?);
            }
            Ok(())
        },
        &mut files,
    )?;
    let text = manifest_text.ok_or(PackageError::NoManifest)?;
    let manifest = manifest::parse(&text)?;
    for (m, module) in manifest.methods.iter().flat_map(|m| m.modules().map(move |module| (m, module))) {
        let path = module.replace('.', "/");
        let found =
            files.iter().any(|(f, _)| *f == format!("{path}.py") || *f == format!("{path}/__init__.py"));
        if !found {
            return Err(PackageError::MissingModule {
                method: m.name.clone(),
                module: module.to_owned(),
                path,
            });
        }
    }
    Ok(Package { manifest, sha256: hex::encode(Sha256::digest(bytes)), files })
}

/// Checks a package as [`read`] does and, only if it passes, writes its
/// files under `into` (which must exist); the package that read.
pub fn unpack(bytes: &[u8], into: &Path) -> Result<Package, PackageError> {
    let package = read(bytes)?;
    let io = |path: &Path, e: std::io::Error| PackageError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut files = Vec::new();
    visit(
        bytes,
        |path, entry| {
            let target = into.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            let mut out = std::fs::File::create(&target).map_err(|e| io(&target, e))?;
            std::io::copy(entry, &mut out).map_err(|e| io(&target, e))?;
            Ok(())
        },
        &mut files,
    )?;
    Ok(package)
}

/// Calls `each` with every regular file of the archive (its checked path),
/// recording each in `files`; refuses what a package may not hold.
fn visit(
    bytes: &[u8],
    mut each: impl FnMut(&str, &mut dyn Read) -> Result<(), PackageError>,
    files: &mut Vec<(String, u64)>,
) -> Result<(), PackageError> {
    if bytes.len() > MAX_BYTES {
        return Err(PackageError::TooLarge(bytes.len()));
    }
    let not_tar = |e: std::io::Error| PackageError::NotTar(e.to_string());
    let mut archive = tar::Archive::new(bytes);
    for entry in archive.entries().map_err(not_tar)? {
        let mut entry = entry.map_err(not_tar)?;
        let raw = entry.path().map_err(not_tar)?.into_owned();
        let shown = raw.display().to_string();
        let plain = raw.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        let path =
            raw.components().filter(|c| !matches!(c, Component::CurDir)).collect::<std::path::PathBuf>();
        let path = path.to_str().map(str::to_owned).filter(|p| plain && !p.is_empty());
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            // A directory writes nothing; `.` (what `tar -cf x.tar .` starts with) is the root.
            if !plain {
                return Err(PackageError::BadPath(shown));
            }
            continue;
        }
        if !kind.is_file() {
            return Err(PackageError::NotAFile(shown));
        }
        let path = path.ok_or(PackageError::BadPath(shown))?;
        if files.len() == MAX_FILES {
            return Err(PackageError::TooManyFiles);
        }
        files.push((path.clone(), entry.size()));
        each(&path, &mut entry)?;
    }
    Ok(())
}

/// Packs the directory `dir` the same way every time: its files in path
/// order, owned by no one, dated at 0, mode 0644; hidden files and
/// directories and Python's caches are left out.
pub fn pack(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut paths = Vec::new();
    collect(dir, dir, &mut paths)?;
    paths.sort();
    let mut builder = tar::Builder::new(Vec::new());
    for rel in paths {
        let bytes = std::fs::read(dir.join(&rel))?;
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, &rel, bytes.as_slice())?;
    }
    builder.into_inner()
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "__pycache__" {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect(root, &entry.path(), out)?;
        } else if kind.is_file() {
            let rel = entry
                .path()
                .strip_prefix(root)
                .map_err(std::io::Error::other)?
                .to_string_lossy()
                .into_owned();
            out.push(rel);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "name = \"echo\"\nversion = \"0.1.0\"\nbase = \"base-ml\"\n\n[[methods]]\nname = \"run\"\nentry = \"pkg.main:run\"\noutputs = [\"out.json\"]\n";

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        }
        dir
    }

    #[test]
    fn a_packed_directory_reads_and_unpacks_the_same_every_time() {
        let dir = dir_with(&[
            (manifest::FILE, MANIFEST),
            ("pkg/__init__.py", ""),
            ("pkg/main.py", "def run(ctx):\n    pass\n"),
            ("pkg/__pycache__/main.cpython-311.pyc", "x"),
            (".git/config", "x"),
        ]);
        let bytes = pack(dir.path()).expect("pack");
        assert_eq!(pack(dir.path()).expect("again"), bytes, "packing is deterministic");
        let p = read(&bytes).expect("reads");
        let paths: Vec<&str> = p.files.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(paths, [manifest::FILE, "pkg/__init__.py", "pkg/main.py"]);
        assert_eq!(p.sha256, hex::encode(Sha256::digest(&bytes)));
        let out = tempfile::tempdir().expect("out");
        unpack(&bytes, out.path()).expect("unpack");
        assert_eq!(
            std::fs::read_to_string(out.path().join("pkg/main.py")).expect("read"),
            "def run(ctx):\n    pass\n"
        );
    }

    #[test]
    fn an_entry_module_must_be_in_the_package() {
        let dir = dir_with(&[(manifest::FILE, MANIFEST), ("main.py", "")]);
        let e = read(&pack(dir.path()).expect("pack")).expect_err("refused");
        assert!(matches!(&e, PackageError::MissingModule { module, .. } if module == "pkg.main"), "{e}");
        let serving =
            MANIFEST.replace("outputs", "model = \"out.json\"\npredict = \"serve:predict\"\noutputs");
        let dir = dir_with(&[(manifest::FILE, &serving), ("pkg/main.py", "")]);
        let e = read(&pack(dir.path()).expect("pack")).expect_err("refused");
        assert!(matches!(&e, PackageError::MissingModule { module, .. } if module == "serve"), "{e}");
    }

    /// An archive entry of `kind` at `path`, written without the builder's own path checks.
    fn raw_entry(path: &str, kind: tar::EntryType, link: Option<&str>) -> Vec<u8> {
        let mut header = tar::Header::new_gnu();
        let name = &mut header.as_gnu_mut().expect("gnu").name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_size(0);
        header.set_entry_type(kind);
        if let Some(l) = link {
            header.set_link_name(l).expect("link");
        }
        header.set_mode(0o644);
        header.set_cksum();
        let mut b = tar::Builder::new(Vec::new());
        b.append(&header, std::io::empty()).expect("append");
        b.into_inner().expect("tar")
    }

    #[test]
    fn escaping_paths_links_and_devices_are_refused() {
        let out = tempfile::tempdir().expect("out");
        let cases = [
            raw_entry("../evil.py", tar::EntryType::Regular, None),
            raw_entry("/etc/evil.py", tar::EntryType::Regular, None),
            raw_entry("link.py", tar::EntryType::Symlink, Some("/etc/passwd")),
            raw_entry("dev", tar::EntryType::Char, None),
        ];
        for bytes in cases {
            let e = unpack(&bytes, out.path()).expect_err("refused");
            assert!(matches!(e, PackageError::BadPath(_) | PackageError::NotAFile(_)), "{e}");
            assert!(matches!(read(&bytes), Err(PackageError::BadPath(_) | PackageError::NotAFile(_))));
        }
        assert_eq!(std::fs::read_dir(out.path()).expect("ls").count(), 0, "nothing was written");
        assert!(matches!(read(b"not a tar"), Err(PackageError::NotTar(_) | PackageError::NoManifest)));
        let root = raw_entry(".", tar::EntryType::Directory, None);
        assert!(
            matches!(read(&root), Err(PackageError::NoManifest)),
            "the root directory entry is no problem"
        );
        assert!(matches!(read(&vec![0u8; MAX_BYTES + 1]), Err(PackageError::TooLarge(_))));
    }
}
