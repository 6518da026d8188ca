//! Python tools the suites install from PyPI on first use: a venv under
//! `$HOME/.cache/mapi-emulators/<label>-<hash of the pins>/`, built once
//! under a file lock, so a change of pins installs afresh beside the old.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The cache directory of a tool set named `label` whose pins are `pins`.
pub fn cache_dir(label: &str, pins: &str) -> PathBuf {
    let root = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => std::env::var_os("HOME")
            .filter(|d| !d.is_empty())
            .map_or_else(std::env::temp_dir, |h| PathBuf::from(h).join(".cache")),
    };
    // FNV-1a of the pins.
    let hash = pins
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    root.join("mapi-emulators").join(format!("{label}-{hash:016x}"))
}

/// Runs `program args` in `dir`; its stderr in the error when it fails.
pub fn run(program: &Path, args: &[&str], dir: &Path) -> Result<(), String> {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{} {} failed ({}): {}",
        program.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// A venv in `dir` with `requirements` installed, once: its Python. `more`
/// runs under the same lock before the install is marked done (the browser
/// suite installs its npm packages there).
pub fn venv(
    dir: &Path,
    requirements: &str,
    more: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = std::fs::File::create(dir.join(".lock")).map_err(|e| format!("{}: {e}", dir.display()))?;
    lock.lock().map_err(|e| format!("locking {}: {e}", dir.display()))?;
    let python = dir.join("venv/bin/python");
    if !dir.join(".installed").exists() {
        run(Path::new("python3"), &["-m", "venv", "--clear", "venv"], dir)?;
        std::fs::write(dir.join("requirements.txt"), requirements).map_err(|e| e.to_string())?;
        let pip =
            ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements.txt"];
        run(&python, &pip, dir)?;
        more(dir)?;
        std::fs::write(dir.join(".installed"), "").map_err(|e| e.to_string())?;
    }
    drop(lock);
    Ok(python)
}

/// The Python of a venv holding the pinned stock inference clients (`tests/endpoints/requirements.txt`).
pub fn stock_clients() -> PathBuf {
    const PINS: &str = include_str!("../endpoints/requirements.txt");
    let dir = cache_dir("stock-clients", PINS);
    venv(&dir, PINS, |_| Ok(())).unwrap_or_else(|e| panic!("installing the stock clients: {e}"))
}

/// Runs the stock client script `tests/endpoints/{script}` with [`stock_clients`]'s Python and
/// `env`, on a blocking thread; panics with what it printed unless it passed (exit 0 and a
/// `PASS:` line).
pub async fn stock_client(script: &str, env: Vec<(&'static str, String)>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("endpoints").join(script);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(stock_clients()).arg(path).envs(env).output().expect("run python")
    })
    .await
    .expect("joined");
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && printed.contains("PASS:"), "{script}:\n{printed}");
}
