//! Every argument and nested block that `terraform/` sets on a `resource` or
//! `data` block is one the hashicorp/google provider (v6.x) has: an offline
//! stand-in for `terraform validate`, which needs the provider binary. The
//! provider's arguments are `tests/fixtures/google-provider-arguments.txt`,
//! read from its docs (the header names the commit), one `TYPE PATH` a line,
//! PATH the dotted nesting of blocks (`template.containers.env.name`).
//!
//! Meta-arguments are terraform's, not the provider's, and are skipped; a
//! `dynamic "x"` block counts as block `x` with its `content` as the body.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hcl::{Block, Body};

const FIXTURE: &str = "tests/fixtures/google-provider-arguments.txt";

/// Meta-arguments and meta-blocks of a `resource` or `data` block.
const META: &[&str] =
    &["count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fixture's lines, comments and blank lines left out.
fn fixture_lines() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo().join(FIXTURE)).unwrap_or_else(|e| panic!("read {FIXTURE}: {e}"));
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect()
}

/// The provider's documented argument paths, by type.
fn provider_arguments() -> BTreeMap<String, BTreeSet<String>> {
    let mut args: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in fixture_lines() {
        let (kind, path) =
            line.split_once(' ').unwrap_or_else(|| panic!("{FIXTURE}: `{line}` is not `TYPE PATH`"));
        args.entry(kind.to_owned()).or_default().insert(path.to_owned());
    }
    args
}

/// Every `.tf` file under `dir`, relative to `terraform/`, parsed.
fn tf_files(root: &Path, dir: &Path, out: &mut Vec<(String, Body)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != ".terraform") {
                tf_files(root, &p, out);
            }
        } else if p.extension().is_some_and(|e| e == "tf") {
            let rel = p.strip_prefix(root).expect("under terraform/").to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {rel}: {e}"));
            let body = hcl::parse(&text).unwrap_or_else(|e| panic!("{rel} does not parse: {e}"));
            out.push((rel, body));
        }
    }
}

/// The path of every attribute and nested block in `body`, under `prefix`.
fn used_paths(body: &Body, prefix: &str, top: bool, out: &mut BTreeSet<String>) {
    let path = |name: &str| if prefix.is_empty() { name.to_owned() } else { format!("{prefix}.{name}") };
    for a in body.attributes() {
        if !(top && META.contains(&a.key())) {
            out.insert(path(a.key()));
        }
    }
    for b in body.blocks() {
        let (name, inner) = if b.identifier() == "dynamic" {
            let name = b.labels().first().map(|l| l.as_str()).unwrap_or_default();
            (name, b.body().blocks().find(|c| c.identifier() == "content").map(Block::body))
        } else {
            (b.identifier(), Some(b.body()))
        };
        if top && META.contains(&name) {
            continue;
        }
        let p = path(name);
        if let Some(inner) = inner {
            used_paths(inner, &p, false, out);
        }
        out.insert(p);
    }
}

#[test]
fn every_argument_terraform_sets_is_the_providers() {
    let args = provider_arguments();
    let root = repo().join("terraform");
    let mut files = Vec::new();
    tf_files(&root, &root, &mut files);
    assert!(!files.is_empty(), "no .tf file under terraform/");

    let mut problems = BTreeSet::new();
    for (file, body) in &files {
        for b in body.blocks().filter(|b| matches!(b.identifier(), "resource" | "data")) {
            let kind = b.labels().first().map(|l| l.as_str()).unwrap_or_default();
            let Some(known) = args.get(kind) else {
                problems.insert(format!(
                    "{file}: {} \"{kind}\" has no entry in {FIXTURE}: add its arguments from the provider's \
                     docs (website/docs/r/ or d/<name>.html.markdown at the commit the header names)",
                    b.identifier()
                ));
                continue;
            };
            let mut used = BTreeSet::new();
            used_paths(b.body(), "", true, &mut used);
            for path in used.iter().filter(|p| !known.contains(*p)) {
                problems.insert(format!(
                    "{file}: {kind} {path} is not an argument of the provider ({FIXTURE}, from the provider's \
                     docs)"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "terraform sets arguments the hashicorp/google provider (~> 6.0) does not have; fix the .tf (or, if \
         the provider's docs do have it, the fixture):\n{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn provider_arguments_fixture_is_sorted_without_duplicates() {
    let lines = fixture_lines();
    assert!(!lines.is_empty(), "{FIXTURE} lists no argument");
    let bad: Vec<String> = lines
        .windows(2)
        .filter(|w| w[0] >= w[1])
        .map(|w| {
            let what = if w[0] == w[1] { "is listed twice" } else { "is out of order" };
            format!("`{}` {what} (after `{}`)", w[1], w[0])
        })
        .chain(
            lines.iter().filter(|l| l.split(' ').count() != 2).map(|l| format!("`{l}` is not `TYPE PATH`")),
        )
        .collect();
    assert!(
        bad.is_empty(),
        "{FIXTURE} must be sorted (byte order), one `TYPE PATH` a line:\n{}",
        bad.join("\n")
    );
}
