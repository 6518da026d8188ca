//! The Python the worker carries: the helper plugin and platform code is
//! given (`mapi`), the programs that run a method's entry point and serve a
//! model's `predict`, and the platform's own Python methods
//! (`worker/python/methods/`, run as the registry's `PythonCode` says).
//! Built into the binary, so the code a worker runs is the code it was built with.

use std::path::Path;

/// The helper module an entry point is given (`import mapi`).
pub const HELPER: &str = include_str!("../python/mapi.py");
/// The program that imports an entry point and calls it with a context.
pub const HOST: &str = include_str!("../python/mapi_plugin_host.py");
/// The program that imports a `predict` and answers a model server.
pub const SERVE: &str = include_str!("../python/mapi_plugin_serve.py");

/// The platform's Python methods, by module file.
pub const METHODS: [(&str, &str); 8] = [
    ("checks.py", include_str!("../python/methods/checks.py")),
    ("sk.py", include_str!("../python/methods/sk.py")),
    ("mmm.py", include_str!("../python/methods/mmm.py")),
    ("sci.py", include_str!("../python/methods/sci.py")),
    ("forecast.py", include_str!("../python/methods/forecast.py")),
    ("causal.py", include_str!("../python/methods/causal.py")),
    ("sbc.py", include_str!("../python/methods/sbc.py")),
    ("dl.py", include_str!("../python/methods/dl.py")),
];

/// Writes the platform's Python methods into `dir` (which must exist).
///
/// # Errors
///
/// The filesystem's.
pub fn write_methods(dir: &Path) -> std::io::Result<()> {
    for (name, text) in METHODS {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

/// The interpreter Python code runs on, unless `MAPI_PYTHON` names another:
/// the base image's (and, on one machine, the host's Debian) Python with
/// its scientific packages.
pub const PYTHON: &str = "/usr/bin/python3";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_python_entry_is_in_a_module_the_worker_carries() {
        for m in mapi_methods::all() {
            let Some(code) = m.python else { continue };
            for entry in std::iter::once(code.entry).chain(code.predict) {
                let (module, function) = entry.split_once(':').expect("module:function");
                let (_, text) = METHODS
                    .iter()
                    .find(|(file, _)| file.strip_suffix(".py") == Some(module))
                    .unwrap_or_else(|| panic!("{}: no module {module}", m.name));
                assert!(
                    text.contains(&format!("\ndef {function}(")),
                    "{}: {module} has no {function}",
                    m.name
                );
            }
        }
    }
}
