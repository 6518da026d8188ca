//! A one-layer OCI image layout around a host binary, for the tests of
//! "bring your own container" endpoints: [`build_layout`] puts the binary
//! at `/app/server` with the shared libraries `ldd` finds for it (at the
//! same absolute paths, as regular files) and a minimal `/etc`, so it runs
//! in a root filesystem holding nothing else; [`archive`] writes a layout
//! as a tar archive, the other form `mapi_hosting::oci::unpack` takes.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What the image's config says to run.
#[derive(Clone, Debug, Default)]
pub struct ImageSpec {
    /// Empty means `["/app/server"]`.
    pub entrypoint: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub exposed_port: Option<u16>,
}

/// Writes at `dir` an OCI image layout (one linux/amd64 manifest) whose
/// single layer, gzip-compressed when `gzip`, holds `binary` at
/// `/app/server` (mode 0755), the shared libraries and program interpreter
/// it needs, `/etc/passwd` and `/etc/group` naming nobody, and `/tmp`.
pub fn build_layout(dir: &Path, binary: &Path, spec: &ImageSpec, gzip: bool) -> io::Result<()> {
    let layer = root_layer(binary)?;
    let diff_id = format!("sha256:{}", hex::encode(Sha256::digest(&layer)));
    let (layer, media_type) = if gzip {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&layer)?;
        (gz.finish()?, "application/vnd.oci.image.layer.v1.tar+gzip")
    } else {
        (layer, "application/vnd.oci.image.layer.v1.tar")
    };
    fs::create_dir_all(dir.join("blobs/sha256"))?;
    let layer = write_blob(dir, media_type, &layer)?;

    let entrypoint =
        if spec.entrypoint.is_empty() { vec!["/app/server".to_string()] } else { spec.entrypoint.clone() };
    let mut run = json!({
        "Entrypoint": entrypoint,
        "Env": spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
    });
    if let Some(wd) = &spec.working_dir {
        run["WorkingDir"] = json!(wd);
    }
    if let Some(port) = spec.exposed_port {
        run["ExposedPorts"] = json!({ format!("{port}/tcp"): {} });
    }
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": run,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    });
    let config = write_blob(dir, "application/vnd.oci.image.config.v1+json", config.to_string().as_bytes())?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": [layer],
    });
    let mut manifest =
        write_blob(dir, "application/vnd.oci.image.manifest.v1+json", manifest.to_string().as_bytes())?;
    manifest["platform"] = json!({"architecture": "amd64", "os": "linux"});
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest],
    });
    fs::write(dir.join("index.json"), index.to_string())?;
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
}

/// Writes the layout at `layout` as the tar archive `tar_path`.
pub fn archive(layout: &Path, tar_path: &Path) -> io::Result<()> {
    let mut builder = tar::Builder::new(fs::File::create(tar_path)?);
    builder.append_dir_all(".", layout)?;
    builder.into_inner()?.sync_all()
}

/// Writes `bytes` as a blob of the layout at `dir`; returns its descriptor.
fn write_blob(dir: &Path, media_type: &str, bytes: &[u8]) -> io::Result<Value> {
    let hex = hex::encode(Sha256::digest(bytes));
    fs::write(dir.join("blobs/sha256").join(&hex), bytes)?;
    Ok(json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()}))
}

/// The layer's tar stream.
fn root_layer(binary: &Path) -> io::Result<Vec<u8>> {
    let libraries = shared_libraries(binary)?;
    let mut files: Vec<(PathBuf, u32, Vec<u8>)> = vec![
        ("app/server".into(), 0o755, fs::read(binary)?),
        (
            "etc/passwd".into(),
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                .to_vec(),
        ),
        ("etc/group".into(), 0o644, b"root:x:0:\nnogroup:x:65534:\n".to_vec()),
    ];
    for library in libraries {
        let relative = library.strip_prefix("/").map_err(io::Error::other)?.to_path_buf();
        // The content, as a regular file, where the loader looks for it.
        files.push((relative, 0o755, fs::read(&library)?));
    }
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::from([PathBuf::from("tmp")]);
    for (path, _, _) in &files {
        dirs.extend(path.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()).map(Path::to_path_buf));
    }

    let mut builder = tar::Builder::new(Vec::new());
    for dir in &dirs {
        let mut header =
            header(tar::EntryType::Directory, if dir == Path::new("tmp") { 0o777 } else { 0o755 }, 0);
        builder.append_data(&mut header, dir, io::empty())?;
    }
    for (path, mode, content) in &files {
        let mut header = header(tar::EntryType::Regular, *mode, content.len() as u64);
        builder.append_data(&mut header, path, content.as_slice())?;
    }
    builder.into_inner()
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(1_700_000_000);
    header
}

/// The absolute paths of the shared libraries and program interpreter
/// that `ldd` resolves for `binary`; none for a static binary.
fn shared_libraries(binary: &Path) -> io::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if stdout.contains("not a dynamic executable")
            || String::from_utf8_lossy(&out.stderr).contains("not a dynamic")
        {
            return Ok(Vec::new());
        }
        return Err(io::Error::other(format!(
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut paths = Vec::new();
    for line in stdout.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or the
        // interpreter `/lib64/ld-linux-x86-64.so.2 (0x...)`, or the vDSO.
        let resolved = line.split_once("=>").map_or(line, |(_, r)| r).trim();
        if resolved.starts_with("not found") {
            return Err(io::Error::other(format!("ldd {}: {}", binary.display(), line.trim())));
        }
        if let Some(path) = resolved.split_whitespace().next().filter(|p| p.starts_with('/')) {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image of a host binary unpacks with `mapi_hosting::oci`, from
    /// the layout and from its archive, with the libraries it needs.
    #[test]
    fn a_layout_around_a_host_binary_unpacks_with_its_libraries() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let binary = Path::new("/bin/true");
        let spec = ImageSpec {
            exposed_port: Some(8000),
            env: vec![("A".into(), "b".into())],
            ..ImageSpec::default()
        };
        build_layout(&tmp.path().join("img"), binary, &spec, true).expect("build the layout");
        archive(&tmp.path().join("img"), &tmp.path().join("img.tar")).expect("archive");

        for (image, rootfs) in [("img", "rootfs"), ("img.tar", "rootfs2")] {
            let rootfs = tmp.path().join(rootfs);
            let config = mapi_hosting::oci::unpack(&tmp.path().join(image), &rootfs).expect("unpack");
            assert_eq!(config.command(), ["/app/server"]);
            assert_eq!(config.exposed_ports, [8000]);
            assert_eq!(config.env, [("A".to_string(), "b".to_string())]);
            assert!(rootfs.join("app/server").is_file());
            assert!(rootfs.join("etc/passwd").is_file() && rootfs.join("tmp").is_dir());
            for library in shared_libraries(binary).expect("ldd") {
                assert!(
                    rootfs.join(library.strip_prefix("/").expect("absolute")).is_file(),
                    "{}",
                    library.display()
                );
            }
        }
    }
}
