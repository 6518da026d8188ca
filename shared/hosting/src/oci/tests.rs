//! Unpacking images built here, byte by byte: layers written with `tar`,
//! digests computed, and the tricks a hostile layer may try.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use super::*;

const TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const TAR_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// One tar stream, entries named raw (so `..` and absolute names go in as they are).
struct Layer(tar::Builder<Vec<u8>>);

impl Layer {
    fn new() -> Self {
        Self(tar::Builder::new(Vec::new()))
    }
    fn entry(mut self, kind: EntryType, path: &str, mode: u32, data: &[u8], link: &str) -> Self {
        let mut h = Header::new_gnu();
        let gnu = h.as_gnu_mut().expect("a GNU header");
        gnu.name[..path.len()].copy_from_slice(path.as_bytes());
        gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        self.0.append(&h, data).expect("append");
        self
    }
    fn file(self, path: &str, data: &str) -> Self {
        self.entry(EntryType::Regular, path, 0o644, data.as_bytes(), "")
    }
    fn dir(self, path: &str) -> Self {
        self.entry(EntryType::Directory, path, 0o755, b"", "")
    }
    fn symlink(self, path: &str, target: &str) -> Self {
        self.entry(EntryType::Symlink, path, 0o777, b"", target)
    }
    fn bytes(self) -> Vec<u8> {
        self.0.into_inner().expect("finish the tar")
    }
    fn gzip(self) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&self.bytes()).expect("gzip");
        gz.finish().expect("gzip")
    }
}

/// Writes `bytes` as a blob of the layout at `dir`; returns its descriptor.
fn blob(dir: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let hex = hex::encode(Sha256::digest(bytes));
    fs::create_dir_all(dir.join("blobs/sha256")).expect("blobs dir");
    fs::write(dir.join("blobs/sha256").join(&hex), bytes).expect("write blob");
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
}

/// Writes an OCI image layout at `dir` with `layers` and the run `config`,
/// its manifest inside a nested index beside an arm64 one when `nested`.
fn layout(dir: &Path, layers: &[(&str, Vec<u8>)], config: Value, nested: bool) -> Vec<Value> {
    fs::create_dir_all(dir).expect("layout dir");
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    let layers: Vec<Value> = layers.iter().map(|(mt, bytes)| blob(dir, mt, bytes)).collect();
    let config = json!({"architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": []}});
    let config = blob(dir, "application/vnd.oci.image.config.v1+json", config.to_string().as_bytes());
    let manifest = json!({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": layers});
    let mut manifest = blob(dir, OCI_MANIFEST, manifest.to_string().as_bytes());
    let top = if nested {
        manifest["platform"] = json!({"architecture": "amd64", "os": "linux"});
        let arm = json!({"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", "0".repeat(64)), "size": 2,
            "platform": {"architecture": "arm64", "os": "linux"}});
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [arm, manifest]});
        blob(dir, OCI_INDEX, index.to_string().as_bytes())
    } else {
        manifest
    };
    fs::write(dir.join("index.json"), json!({"schemaVersion": 2, "manifests": [top]}).to_string())
        .expect("index");
    layers
}

/// Every path under `root` with its kind and content, sorted.
fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for child in fs::read_dir(dir).expect("read dir") {
            let path = child.expect("entry").path();
            let rel = path.strip_prefix(root).expect("under root").display().to_string();
            let meta = fs::symlink_metadata(&path).expect("meta");
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", fs::read_link(&path).expect("link").display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/ {mode:o}"));
                walk(root, &path, out);
            } else {
                out.push(format!("{rel} {mode:o} {}", fs::read_to_string(&path).expect("read")));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn rootfs(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("rootfs")
}

#[test]
fn layers_apply_in_order_with_whiteouts_and_opaque_directories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let lower = Layer::new()
        .dir("etc/")
        .file("etc/a", "a")
        .file("etc/b", "b")
        .dir("opq/")
        .file("opq/old", "old")
        .dir("opq/sub/")
        .file("opq/sub/x", "x")
        .entry(EntryType::Fifo, "fifo", 0o644, b"", "")
        .entry(EntryType::Char, "dev-null", 0o666, b"", "")
        .bytes();
    // The upper layer writes into opq/sub before its opaque marker: what
    // it wrote stays, whatever the order.
    let upper = Layer::new()
        .file("etc/.wh.a", "")
        .file("opq/sub/y", "y")
        .file("opq/.wh..wh..opq", "")
        .file("opq/new", "new")
        .file("/etc/b", "b2")
        .gzip();
    layout(&tmp.path().join("img"), &[(TAR, lower), (TAR_GZIP, upper)], json!({}), true);

    unpack(&tmp.path().join("img"), &rootfs(&tmp)).expect("unpack");

    assert_eq!(
        tree(&rootfs(&tmp)),
        ["etc/ 755", "etc/b 644 b2", "opq/ 755", "opq/new 644 new", "opq/sub/ 755", "opq/sub/y 644 y"]
    );
}

#[test]
fn a_changed_blob_is_refused_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let img = tmp.path().join("img");
    let layers = layout(&img, &[(TAR, Layer::new().file("f", "hello").bytes())], json!({}), false);
    let digest = layers[0]["digest"].as_str().expect("digest").to_string();
    let path = img.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let mut bytes = fs::read(&path).expect("read");
    let at = bytes.windows(5).position(|w| w == b"hello").expect("content");
    bytes[at] = b'j';
    fs::write(&path, &bytes).expect("write");

    let err = unpack(&img, &rootfs(&tmp)).expect_err("a changed layer");
    assert!(matches!(err, OciError::BlobMismatch { .. }), "{err}");
    assert!(err.to_string().contains(&digest), "{err}");

    // A blob cut short says so, and so does a config that changed.
    bytes.truncate(bytes.len() - 1);
    fs::write(&path, &bytes).expect("write");
    let err = unpack(&img, &tmp.path().join("rootfs2")).expect_err("a short layer");
    assert!(err.to_string().contains("its descriptor says"), "{err}");
}

#[test]
fn entries_never_write_outside_the_root_filesystem() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).expect("outside");
    fs::write(outside.join("keep"), "keep").expect("keep");
    let outside_abs = outside.to_str().expect("utf-8").to_string();

    // `..` in a path refuses the image.
    let img = tmp.path().join("dotdot");
    layout(&img, &[(TAR, Layer::new().file("../escape", "x").bytes())], json!({}), false);
    let err = unpack(&img, &rootfs(&tmp)).expect_err("`..`");
    assert!(matches!(err, OciError::Escape { .. }), "{err}");
    assert!(!tmp.path().join("escape").exists());

    // Symlinked parents resolve inside the root, the way the container sees them.
    let img = tmp.path().join("links");
    let lower = Layer::new().symlink("abs", &outside_abs).symlink("up", "../../../../../..").bytes();
    let upper = Layer::new()
        .file("abs/pwned", "x")
        .file("up/escaped", "x")
        .file("abs/.wh.keep", "")
        .entry(EntryType::Link, "hard", 0o644, b"", &format!("{outside_abs}/keep"))
        .bytes();
    layout(&img, &[(TAR, lower), (TAR, upper)], json!({}), false);
    let root = tmp.path().join("rootfs2");
    let err = unpack(&img, &root).expect_err("the hard link's target is not in the image");
    assert!(err.to_string().contains("hard"), "{err}");
    assert_eq!(tree(&outside), ["keep 644 keep"], "nothing written or removed outside");
    assert!(root.join(outside_abs.trim_start_matches('/')).join("pwned").is_file());
    assert!(root.join("escaped").is_file());

    // A hard link climbing out with `..` refuses the image too.
    let img = tmp.path().join("hardlink");
    let layer = Layer::new().entry(EntryType::Link, "hard", 0o644, b"", "../outside/keep").bytes();
    layout(&img, &[(TAR, layer)], json!({}), false);
    let err = unpack(&img, &tmp.path().join("rootfs3")).expect_err("`..` link");
    assert!(matches!(err, OciError::Escape { .. }), "{err}");
    assert_eq!(fs::metadata(outside.join("keep")).expect("keep").nlink(), 1);
}

#[test]
fn set_id_and_sticky_bits_are_dropped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let img = tmp.path().join("img");
    let layer = Layer::new()
        .entry(EntryType::Directory, "tmp/", 0o1777, b"", "")
        .entry(EntryType::Regular, "suid", 0o4755, b"x", "")
        .entry(EntryType::Regular, "sgid", 0o2711, b"x", "")
        .bytes();
    layout(&img, &[(TAR, layer)], json!({}), false);
    unpack(&img, &rootfs(&tmp)).expect("unpack");
    assert_eq!(tree(&rootfs(&tmp)), ["sgid 711 x", "suid 755 x", "tmp/ 777"]);
}

#[test]
fn an_archive_of_a_layout_unpacks_the_same() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let img = tmp.path().join("img");
    let layer = Layer::new().dir("app/").file("app/server", "bin").symlink("link", "/app/server").gzip();
    layout(&img, &[(TAR_GZIP, layer)], json!({"Cmd": ["/app/server"]}), true);
    let archive = tmp.path().join("img.tar");
    let mut builder = tar::Builder::new(fs::File::create(&archive).expect("create"));
    builder.append_dir_all(".", &img).expect("archive");
    builder.into_inner().expect("finish").flush().expect("flush");

    let from_dir = unpack(&img, &tmp.path().join("a")).expect("unpack the directory");
    let from_tar = unpack(&archive, &tmp.path().join("b")).expect("unpack the archive");
    assert_eq!(from_dir, from_tar);
    assert_eq!(tree(&tmp.path().join("a")), tree(&tmp.path().join("b")));
    assert_eq!(tree(&tmp.path().join("b")), ["app/ 755", "app/server 644 bin", "link -> /app/server"]);
    let leftovers: Vec<_> = fs::read_dir(tmp.path())
        .expect("read")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".oci-layout-"))
        .collect();
    assert!(leftovers.is_empty(), "the extracted layout is removed");
}

#[test]
fn the_config_gives_the_command_environment_and_ports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let img = tmp.path().join("img");
    let config = json!({
        "Entrypoint": ["/bin/serve", "--flag"],
        "Cmd": ["model"],
        "Env": ["PATH=/usr/bin:/bin", "EMPTY=", "A=b=c"],
        "WorkingDir": "/app",
        "ExposedPorts": {"9000": {}, "8000/tcp": {}, "53/udp": {}},
    });
    layout(&img, &[], config, false);
    let config = unpack(&img, &rootfs(&tmp)).expect("unpack");
    assert_eq!(
        config,
        ImageConfig {
            entrypoint: vec!["/bin/serve".into(), "--flag".into()],
            cmd: vec!["model".into()],
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("EMPTY".into(), String::new()),
                ("A".into(), "b=c".into())
            ],
            working_dir: Some("/app".into()),
            exposed_ports: vec![8000, 9000],
        }
    );
    assert_eq!(config.command(), ["/bin/serve", "--flag", "model"]);

    let img = tmp.path().join("bare");
    layout(&img, &[], json!(null), false);
    assert_eq!(unpack(&img, &tmp.path().join("r2")).expect("unpack"), ImageConfig::default());
}

#[test]
fn zstd_layers_and_other_platforms_are_refused_in_words() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let img = tmp.path().join("img");
    layout(&img, &[("application/vnd.oci.image.layer.v1.tar+zstd", vec![1, 2, 3])], json!({}), false);
    let err = unpack(&img, &rootfs(&tmp)).expect_err("zstd");
    assert!(err.to_string().contains("application/vnd.oci.image.layer.v1.tar+zstd"), "{err}");

    let img = tmp.path().join("arm");
    fs::create_dir_all(&img).expect("dir");
    fs::write(img.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    let arm = json!({"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", "0".repeat(64)), "size": 2,
        "platform": {"architecture": "arm64", "os": "linux"}});
    fs::write(img.join("index.json"), json!({"schemaVersion": 2, "manifests": [arm]}).to_string())
        .expect("index");
    let err = unpack(&img, &tmp.path().join("r2")).expect_err("arm64 only");
    assert!(err.to_string().contains("no linux/amd64 image (it has linux/arm64)"), "{err}");
}

#[test]
fn a_directory_that_is_not_a_layout_says_how_to_make_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::create_dir(tmp.path().join("img")).expect("dir");
    fs::write(tmp.path().join("img/oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    let err = unpack(&tmp.path().join("img"), &rootfs(&tmp)).expect_err("no index");
    let msg = err.to_string();
    assert!(msg.contains("is not an OCI image layout: it has no index.json"), "{msg}");
    assert!(msg.contains("skopeo copy docker://IMG oci:DIR"), "{msg}");
}

#[test]
fn the_limits_are_named_when_reached() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let img = tmp.path().join("img");
    layout(&img, &[(TAR, Layer::new().file("a", "12345").file("b", "67890").bytes())], json!({}), false);
    let err =
        unpack_within(&img, &tmp.path().join("r1"), Limits { bytes: 9, entries: 10 }).expect_err("bytes");
    assert!(err.to_string().contains("MAX_UNPACKED"), "{err}");
    let err =
        unpack_within(&img, &tmp.path().join("r2"), Limits { bytes: 100, entries: 1 }).expect_err("entries");
    assert!(err.to_string().contains("MAX_ENTRIES"), "{err}");
    unpack_within(&img, &tmp.path().join("r3"), Limits { bytes: 10, entries: 2 })
        .expect("exactly at the limits");
}
