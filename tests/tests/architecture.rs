//! The architecture's rules that the compiler does not hold by itself:
//!
//! - within a function crate or the CLI, no two sibling modules import each
//!   other, directly or around a circle (a circle means one module's
//!   concern is spread over several: take it out into a module of its own);
//! - nothing under `shared/` depends on a function crate (`functions/*`,
//!   `embedded`, `console`, the CLI): libraries are below the programs.
//!
//! Crate dependencies cannot form a circle (cargo refuses one); modules
//! inside a crate can, which is what the first rule reads the sources for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `.rs` files directly in `dir`, by module name (`mod.rs` and
/// `lib.rs`/`main.rs` are the parent, not a sibling).
fn siblings(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("entry").path();
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        let text = if path.is_dir() {
            // A module in a directory: its files, read as one.
            let mut all = String::new();
            for f in walk(&path) {
                all.push_str(&std::fs::read_to_string(f).expect("source"));
            }
            all
        } else if path.extension().is_some_and(|e| e == "rs")
            && !["mod", "lib", "main"].contains(&name.as_str())
        {
            std::fs::read_to_string(&path).expect("source")
        } else {
            continue;
        };
        out.insert(name, text);
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Which siblings each module names, through `prefix` (`crate::` for the
/// crate root's children, `super::` for a directory module's).
fn imports(modules: &BTreeMap<String, String>, prefixes: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, text) in modules {
        let mut named = BTreeSet::new();
        for other in modules.keys().filter(|o| *o != name) {
            let uses = prefixes.iter().any(|p| {
                [
                    format!("{p}{other}::"),
                    format!("{p}{other};"),
                    format!("{p}{other}}}"),
                    format!("{p}{{{other}"),
                ]
                .iter()
                .any(|needle| text.contains(needle.as_str()))
            });
            if uses {
                named.insert(other.clone());
            }
        }
        graph.insert(name.clone(), named);
    }
    graph
}

/// A circle of `graph`, if it has one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut c = path[at..].to_vec();
            c.push(node.to_owned());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The source directories whose sibling modules must not import each other
/// around a circle, and how their modules name each other.
fn trees() -> Vec<(PathBuf, Vec<&'static str>)> {
    let root = root();
    let mut out = vec![(root.join("cli/src"), vec!["crate::"])];
    for entry in std::fs::read_dir(root.join("functions")).expect("functions") {
        let src = entry.expect("entry").path().join("src");
        out.push((src.clone(), vec!["crate::"]));
        for sub in std::fs::read_dir(&src).expect("src") {
            let sub = sub.expect("entry").path();
            if sub.is_dir() {
                let name = sub.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
                // A directory module's children name each other through
                // `super::` or through the module's path from the root.
                let from_root: &'static str = Box::leak(format!("crate::{name}::").into_boxed_str());
                out.push((sub, vec!["super::", from_root]));
            }
        }
    }
    out
}

#[test]
fn no_two_modules_of_a_function_or_the_cli_import_each_other_around_a_circle() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for (dir, prefixes) in trees() {
        let modules = siblings(&dir);
        checked += modules.len();
        if let Some(c) = circle(&imports(&modules, &prefixes)) {
            bad.push(format!("{}: {}", dir.display(), c.join(" -> ")));
        }
    }
    assert!(checked > 60, "the trees were read ({checked} modules)");
    assert!(bad.is_empty(), "module circles:\n{}", bad.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle_and_no_false_one() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry((*a).to_owned()).or_default().insert((*b).to_owned());
            g.entry((*b).to_owned()).or_default();
        }
        g
    };
    assert_eq!(circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).map(|c| c.len()), Some(4));
    assert_eq!(circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    let text: BTreeMap<String, String> = [
        ("runs".to_owned(), "use super::run_views::find;".to_owned()),
        ("run_views".to_owned(), "super::runs::narrowed(q)".to_owned()),
    ]
    .into();
    assert!(circle(&imports(&text, &["super::"])).is_some(), "two files naming each other");
}

#[test]
fn nothing_under_shared_depends_on_a_program() {
    let root = root();
    let programs = [
        "mapi-submit",
        "mapi-tasks",
        "mapi-push-events",
        "mapi-reconcile-tick",
        "mapi-meter",
        "mapi-admin",
        "mapi-embedded",
        "mapi-console",
        "mapi-cli",
        "mapi-worker",
    ];
    let mut bad = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(root.join("shared")).expect("shared") {
        let manifest = entry.expect("entry").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
        crates += 1;
        for line in text.lines() {
            let dep = line.split(['.', ' ', '=']).next().unwrap_or_default();
            if programs.contains(&dep) {
                bad.push(format!("{} depends on {dep}", manifest.display()));
            }
        }
    }
    assert!(crates > 30, "the shared crates were read ({crates})");
    assert!(bad.is_empty(), "{bad:#?}");
}
