//! The README, run as printed: every command of its walkthrough sections,
//! in order, through a shell with the built `mapi` on `PATH`, against a
//! platform started in this process, in a fresh directory holding
//! `examples/longley.csv` (as a reader's checkout does). The ids a reader
//! copies (`ds_01…`, `run_01…`, `mv_01…`, `job_01…`) are taken from what the
//! commands before printed, and every output line the README shows
//! (`#   …`, `…` standing for anything) must appear in what the command
//! printed. A command whose shown output begins `error:` must fail, one
//! showing `(exit status N)` must end with N; every other command must
//! succeed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mapi_tests::{TestPlatform, binary};

/// The sections run, in the README's order. (Deploying and the executors' evidence need things
/// a reader brings.)
const SECTIONS: &[&str] = &[
    "Walkthrough: fit a linear model",
    "Model versions",
    "Endpoints: serve a model version, score it, promote another",
    "Workflows: a sweep, validated by a second person, then served",
    "The Python client: the walkthrough in Python",
    "Item jobs: one method on every item of a list",
    "Tenants, people and tokens",
    "A tenant's end: export and deletion",
    "Quotas, cost and usage",
];

/// Ids a reader copies from one command's output into the next: each
/// prefix and the length of what follows it.
const ID_PREFIXES: &[(&str, usize)] =
    &[("ds", 26), ("run", 26), ("mv", 26), ("job", 26), ("wfr", 26), ("val", 24)];

#[derive(Debug)]
struct Step {
    section: String,
    command: String,
    shown: Vec<String>,
}

/// The shell steps of `sections`, with the output lines shown under each.
fn steps(readme: &str, sections: &[&str]) -> Vec<Step> {
    let (mut out, mut section, mut in_block) = (Vec::<Step>::new(), String::new(), false);
    let mut pending = String::new();
    for line in readme.lines() {
        if let Some(h) = line.strip_prefix("## ").or_else(|| line.strip_prefix("### ")) {
            section = h.trim().to_owned();
            continue;
        }
        if line.starts_with("```") {
            in_block = !in_block && line.trim() == "```sh";
            continue;
        }
        if !in_block || !sections.contains(&section.as_str()) {
            continue;
        }
        if let Some(shown) = line.strip_prefix("#   ") {
            if let Some(last) = out.last_mut() {
                last.shown.push(shown.trim().to_owned());
            }
            continue;
        }
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let text = strip_comment(line);
        if let Some(head) = text.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        let command = format!("{pending}{text}");
        pending.clear();
        // The alias and the platform itself (`cargo run`, after any VAR=value) are what this
        // test provides.
        let program = command.split_whitespace().find(|w| !w.contains('='));
        if command.starts_with("alias mapi=") || program == Some("cargo") {
            continue;
        }
        out.push(Step { section: section.clone(), command, shown: Vec::new() });
    }
    out
}

/// `line` without a trailing `  # comment` (a `#` inside the command is kept).
fn strip_comment(line: &str) -> String {
    match line.find("  # ") {
        Some(i) => line[..i].trim_end().to_owned(),
        None => line.trim_end().to_owned(),
    }
}

/// The ids in `text`, by prefix, last one wins.
fn ids_in(text: &str, seen: &mut BTreeMap<&'static str, String>) {
    for &(prefix, len) in ID_PREFIXES {
        let marker = format!("{prefix}_");
        let mut rest = text;
        while let Some(i) = rest.find(&marker) {
            let after = &rest[i + marker.len()..];
            let id: String = after.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            let starts_word = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
            if starts_word
                && id.len() == len
                && id.chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
            {
                seen.insert(prefix, format!("{marker}{id}"));
            }
            rest = &rest[i + marker.len()..];
        }
    }
}

/// `command` with each `ds_01…`, `ds_…` (and so on) replaced by the last such id seen.
fn with_ids(command: &str, seen: &BTreeMap<&'static str, String>) -> String {
    let mut out = command.to_owned();
    for (prefix, id) in seen {
        for placeholder in [format!("{prefix}_01…"), format!("{prefix}_…")] {
            out = out.replace(&placeholder, id);
        }
    }
    out
}

fn squeezed(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether one line of `output` holds the fragments of `shown` (split at `…`) in order.
fn shows(output: &str, shown: &str) -> bool {
    let fragments: Vec<String> = squeezed(shown).split('…').map(str::trim).map(str::to_owned).collect();
    output.lines().map(squeezed).any(|line| {
        let mut at = 0;
        fragments.iter().all(|f| match line[at..].find(f.as_str()) {
            Some(i) => {
                at += i + f.len();
                true
            }
            None => false,
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_runs_as_printed() {
    let p = TestPlatform::start(&[]).await;
    run_sections(&p, SECTIONS, 25);
}

/// The containers' section, with the toy v2 server's image layout and its archive where it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_container_section_runs_as_printed() {
    let p = TestPlatform::start(&[]).await;
    run_sections_in(&p, &["Your own model server in a container"], 4, |dir| {
        use mapi_tests::oci_image::{ImageSpec, archive, build_layout};
        let toy = Path::new(env!("CARGO_BIN_EXE_toy_model_server"));
        let spec = ImageSpec { entrypoint: vec!["/app/server".into()], ..ImageSpec::default() };
        build_layout(&dir.join("toy-image"), toy, &spec, true).expect("an image layout");
        archive(&dir.join("toy-image"), &dir.join("toy-image-2.tar")).expect("its archive");
    });
}

/// The plugins' section, on the gvisor executor it asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_plugin_section_runs_as_printed_on_gvisor() {
    let p = TestPlatform::start(&[("MAPI_EXECUTOR", "gvisor")]).await;
    run_sections(&p, &["Plugins: your own Python methods"], 9);
}

/// The Python methods' section: a forecast, and a logistic regression served by an endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_python_methods_section_runs_as_printed() {
    let p = TestPlatform::start(&[]).await;
    run_sections(&p, &["Methods on scikit-learn, statsmodels and scipy"], 9);
}

/// The deep-learning section, on a machine without a GPU whatever this one has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_gpu_section_runs_as_printed() {
    let p = TestPlatform::start(&[("MAPI_LOCAL_GPUS", "0")]).await;
    run_sections(&p, &["Deep learning and the GPU class"], 3);
}

/// Runs every shell step of `sections` (at least `min_steps`) against `p` as a reader would.
fn run_sections(p: &TestPlatform, sections: &[&str], min_steps: usize) {
    run_sections_in(p, sections, min_steps, |_| {});
}

/// [`run_sections`], with `prepare` given the directory the commands run in first.
fn run_sections_in(p: &TestPlatform, sections: &[&str], min_steps: usize, prepare: impl Fn(&Path)) {
    let dir = tempfile::tempdir().expect("tempdir");
    prepare(dir.path());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    mapi_tests::copy_tree(&examples, &dir.path().join("examples"));
    // The Python client, as a checkout holds it (`pip install ./clients/python`).
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    mapi_tests::copy_tree(&client, &dir.path().join("clients/python"));
    // What `mapi dev` leaves in its home for the CLI.
    let home = dir.path().join("dev-home");
    std::fs::create_dir(&home).expect("mkdir");
    let creds = serde_json::to_vec(&p.platform.credentials).expect("json");
    std::fs::write(home.join("credentials.json"), creds).expect("write");
    let bin_dir = binary("mapi").parent().expect("bin dir").to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());

    let readme = include_str!("../../README.md");
    let steps = steps(readme, sections);
    assert!(steps.len() >= min_steps, "the walkthrough's commands were found: {steps:#?}");
    let mut seen = BTreeMap::new();
    for step in &steps {
        let command = with_ids(&step.command, &seen);
        assert!(!command.contains('…'), "[{}] `{}`: no id to fill in yet", step.section, step.command);
        let out = Command::new("bash")
            .args(["-c", &command])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("MAPI_HOME", &home)
            .env("MAPI_CONFIG_DIR", dir.path().join("config"))
            .env_remove("MAPI_URL")
            .env_remove("MAPI_TOKEN")
            .env_remove("MAPI_TENANT")
            .env_remove("MAPI_PROJECT")
            .output()
            .expect("run bash");
        let printed =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let must_fail = step.shown.first().is_some_and(|s| s.starts_with("error:"));
        let status =
            step.shown.iter().find_map(|s| s.strip_prefix("(exit status ")?.strip_suffix(')')?.parse().ok());
        match status {
            Some(code) => {
                assert_eq!(out.status.code(), Some(code), "[{}] `{command}`:\n{printed}", step.section)
            }
            None => assert_eq!(
                out.status.success(),
                !must_fail,
                "[{}] `{command}` {}:\n{printed}",
                step.section,
                if must_fail { "should fail as the README shows" } else { "failed" }
            ),
        }
        for shown in step.shown.iter().filter(|s| !s.starts_with("(exit status ")) {
            assert!(
                shows(&printed, shown),
                "[{}] `{command}` does not print `{shown}`:\n{printed}",
                step.section
            );
        }
        ids_in(&printed, &mut seen);
    }
}

#[test]
fn placeholders_and_shown_lines_are_matched_as_a_reader_reads_them() {
    let mut seen = BTreeMap::new();
    ids_in("uploaded ds_01m8tejes26g20hmnsr7bmbfk7 (16 rows); not ds_short", &mut seen);
    ids_in("validation val_0123456789abcdef01234567 pending; not val_0123", &mut seen);
    assert_eq!(with_ids("approve val_…", &seen), "approve val_0123456789abcdef01234567");
    assert_eq!(
        with_ids("mapi runs submit --dataset ds_01… && x ds_…", &seen),
        "mapi runs submit --dataset ds_01m8tejes26g20hmnsr7bmbfk7 && x ds_01m8tejes26g20hmnsr7bmbfk7"
    );
    assert!(shows("a\nstate     succeeded\n", "state succeeded"));
    assert!(shows("uploaded ds_01x (16 rows, columns a, b)", "uploaded ds_01… (16 rows, columns …)"));
    assert!(
        !shows("uploaded (16 rows)\nds_01", "uploaded ds_01… (16 rows"),
        "fragments on one line, in order"
    );
    assert_eq!(strip_comment("mapi x --reason \"a\"   # why"), "mapi x --reason \"a\"");
    let readme =
        "## A\n```sh\nmapi one \\\n  --two   # c\n#   shown …\n# note\n```\n## B\n```sh\nmapi three\n```\n";
    let s = steps(readme, &["A"]);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].command.as_str(), s[0].shown.as_slice()),
        ("mapi one   --two", &["shown …".to_owned()][..])
    );
}

/// The plugin the README shows is the one it publishes, `examples/plugins/churn`, and the Python
/// walkthrough the one it runs, `examples/python/walkthrough.py`, word for word.
#[test]
fn the_readme_shows_the_example_plugin_as_it_is() {
    let readme = include_str!("../../README.md");
    for (fence, file) in [
        ("```toml\n", include_str!("../../examples/plugins/churn/mapi-plugin.toml")),
        ("```python\n", include_str!("../../examples/plugins/churn/model.py")),
        ("```python\n", include_str!("../../examples/python/walkthrough.py")),
    ] {
        assert!(readme.contains(&format!("{fence}{file}```")), "the README shows another {fence}");
    }
}
