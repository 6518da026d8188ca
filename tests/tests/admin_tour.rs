//! The administration walkthrough (`docs/snippets/admin_tour.sh`) passes
//! end to end against a fresh `mapi dev`.

use std::process::Command;

use mapi_tests::{DevProcess, binary, free_port};

#[test]
fn the_admin_tour_passes() {
    let home = tempfile::tempdir().expect("tempdir");
    let dev = DevProcess::start(home.path(), free_port(), &[]);
    let bin_dir = binary("mapi").parent().expect("bin dir").to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let script = format!("{}/../docs/snippets/admin_tour.sh", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(&script)
        .env("PATH", path)
        .env("MAPI_HOME", home.path())
        .env("MAPI_CONFIG_DIR", DevProcess::config_dir(home.path()))
        .env("MAPI_URL", &dev.url)
        .env_remove("MAPI_TOKEN")
        .output()
        .expect("run the tour");
    dev.stop();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the tour failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("admin tour: every step passed"), "{stdout}");
}
