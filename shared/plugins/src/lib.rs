//! Plugins: tenant code that adds methods, published per project and run
//! only in a sandbox.
//!
//! A plugin is a directory with a manifest ([`manifest`],
//! `mapi-plugin.toml`) and Python source, packed into a tar archive
//! ([`package`]) that is validated as a whole when published and kept
//! content-addressed (its SHA-256) and immutable per version. Its methods
//! are named `p.{plugin}.{method}` ([`method_name`]), a namespace no
//! built-in method uses, so a plugin can never shadow one.

pub mod manifest;
pub mod package;

pub use manifest::{Manifest, ManifestError, PluginMethod, PluginParam};
pub use package::{Package, PackageError};

/// What every plugin method's name starts with.
pub const PREFIX: &str = "p.";

/// The full name runs use for `method` of `plugin`.
pub fn method_name(plugin: &str, method: &str) -> String {
    format!("{PREFIX}{plugin}.{method}")
}

/// The plugin and method a full name names (`p.churn.logit` → `churn`,
/// `logit`); `None` for a built-in method's name.
pub fn split_method(full: &str) -> Option<(&str, &str)> {
    let rest = full.strip_prefix(PREFIX)?;
    let (plugin, method) = rest.split_once('.')?;
    (!plugin.is_empty() && !method.is_empty() && !method.contains('.')).then_some((plugin, method))
}

/// The media type an output named `name` is stored and served with, by its
/// extension.
pub fn media_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()).as_deref() {
        Some("json") => "application/json",
        Some("csv") => "text/csv",
        Some("txt" | "log" | "md") => "text/plain; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("html") => "text/html; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_methods_have_their_own_namespace() {
        assert_eq!(method_name("churn", "logit"), "p.churn.logit");
        assert_eq!(split_method("p.churn.logit"), Some(("churn", "logit")));
        for builtin in mapi_methods::registry::all() {
            assert_eq!(split_method(builtin.name), None, "{}", builtin.name);
            assert!(!builtin.name.starts_with(PREFIX), "{} would be in the plugins' namespace", builtin.name);
        }
        assert_eq!(split_method("p.churn"), None);
        assert_eq!(split_method("p.churn.a.b"), None);
    }

    #[test]
    fn outputs_have_a_media_type_by_extension() {
        assert_eq!(media_type("model.json"), "application/json");
        assert_eq!(media_type("plot.PNG"), "image/png");
        assert_eq!(media_type("model.pkl"), "application/octet-stream");
        assert_eq!(media_type("noext"), "application/octet-stream");
    }
}
