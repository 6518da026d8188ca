//! What a sandboxed task may ask of the platform: the rule of the one way
//! out of a gVisor sandbox. The task has no network; its HTTP requests go to
//! a forward proxy the executor owns, on a Unix socket bound into the
//! sandbox, which passes on a request only if [`Allowed::target`] allows it
//! and answers anything else `403`. Allowed, on the platform's own address
//! over plain HTTP (one machine) and nothing else:
//! - `GET` and `DELETE` of this execution's bootstrap object (its nonce's
//!   name; no other name of the bootstrap bucket);
//! - `GET` and `PUT` of the data bucket's objects through signed URLs
//!   (`/o/data/{key}?…&expires=…&sig=…`): the object route checks each
//!   signature, so only what the platform signed for this attempt (its
//!   dataset, its outputs, its checkpoint) is reachable.
//!
//! No other host, port, path, method, `CONNECT` tunnel, userinfo, dot
//! segment, empty segment or percent-encoding passes, so no spelling of a
//! path reaches another route of the platform, another execution's
//! bootstrap or anything beyond the platform.

use reqwest::{Method, Url};

/// Where the proxy's socket is inside the sandbox.
pub const SOCKET: &str = "/run/mapi/platform.sock";

/// What one execution's sandbox may ask of the platform.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Allowed {
    /// The platform's host, as its public URL names it.
    pub host: String,
    /// The platform's port.
    pub port: u16,
    /// The path of this execution's bootstrap object (`/o/bootstrap/{nonce}`).
    pub bootstrap: String,
}

/// Why a request was refused, in words for the proxy's log and its `403`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused: {0}")]
pub struct Refused(pub String);

impl Allowed {
    /// The path and query to send to the platform for `method target`
    /// (`target` as a forward proxy receives it: an absolute URL), if the
    /// sandbox may send it.
    ///
    /// # Errors
    ///
    /// [`Refused`] naming the rule the request broke.
    pub fn target(&self, method: &Method, target: &str) -> Result<String, Refused> {
        let refuse = |why: &str| Err(Refused(format!("{method} {}: {why}", shown(target))));
        if *method == Method::CONNECT {
            return refuse("no tunnels");
        }
        let Some(rest) = target.strip_prefix("http://") else {
            return refuse("only plain HTTP to the platform");
        };
        let path_and_query = rest.find('/').map_or("", |i| &rest[i..]);
        let (path, _) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        let odd = |seg: &str| seg.is_empty() || seg == "." || seg == "..";
        if path.contains('%') || path.strip_prefix('/').is_none_or(|p| p.split('/').any(odd)) {
            return refuse("no encoded, dot or empty path segments");
        }
        let Ok(url) = Url::parse(target) else { return refuse("not a URL") };
        if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
            return refuse("no userinfo or fragment");
        }
        if url.host_str() != Some(self.host.as_str()) || url.port_or_known_default() != Some(self.port) {
            return refuse("only the platform's own address");
        }
        let signed =
            url.query_pairs().any(|(k, _)| k == "sig") && url.query_pairs().any(|(k, _)| k == "expires");
        let allowed = if url.path() == self.bootstrap {
            matches!(*method, Method::GET | Method::DELETE)
        } else if url.path().strip_prefix("/o/data/").is_some_and(|key| !key.is_empty()) {
            matches!(*method, Method::GET | Method::PUT) && signed
        } else {
            false
        };
        if !allowed {
            return refuse("only this execution's bootstrap and signed data objects");
        }
        Ok(match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        })
    }
}

/// A target as a log shows it: at most 200 characters.
fn shown(target: &str) -> String {
    target.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Allowed {
        Allowed { host: "127.0.0.1".into(), port: 8080, bootstrap: "/o/bootstrap/n0nce1".into() }
    }

    const SIGNED: &str = "http://127.0.0.1:8080/o/data/t/dev/p/default/runs/run_1/a1/outputs/model.json?method=PUT&expires=9&sig=ab";

    #[test]
    fn the_bootstrap_and_signed_data_objects_pass_as_path_and_query() {
        let a = allowed();
        assert_eq!(
            a.target(&Method::GET, "http://127.0.0.1:8080/o/bootstrap/n0nce1"),
            Ok("/o/bootstrap/n0nce1".into())
        );
        assert_eq!(a.target(&Method::DELETE, "http://127.0.0.1:8080/o/bootstrap/n0nce1").map(|_| ()), Ok(()));
        let put = a.target(&Method::PUT, SIGNED).expect("a signed put");
        assert_eq!(
            put,
            "/o/data/t/dev/p/default/runs/run_1/a1/outputs/model.json?method=PUT&expires=9&sig=ab"
        );
        assert!(a.target(&Method::GET, &SIGNED.replace("PUT", "GET")).is_ok());
    }

    #[test]
    fn everything_else_is_refused() {
        let a = allowed();
        let refused = [
            (Method::GET, "http://127.0.0.1:8080/o/bootstrap/another"),
            (Method::PUT, "http://127.0.0.1:8080/o/bootstrap/n0nce1"),
            (Method::GET, "http://127.0.0.1:8080/o/data/t/dev/x.csv"),
            (Method::GET, "http://127.0.0.1:8080/o/data/t/dev/x.csv?sig=ab"),
            (Method::DELETE, SIGNED),
            (Method::POST, SIGNED),
            (Method::GET, "http://127.0.0.1:8080/v1/whoami"),
            (Method::GET, "http://127.0.0.1:8080/internal/events"),
            (Method::GET, "http://127.0.0.1:8080/o/data/?expires=9&sig=ab"),
            (Method::GET, "http://127.0.0.1:8080/o/data/../bootstrap/another?expires=9&sig=ab"),
            (Method::GET, "http://127.0.0.1:8080/o/data/%2e%2e/bootstrap/another?expires=9&sig=ab"),
            (Method::GET, "http://127.0.0.1:8080/o/data//t/x?expires=9&sig=ab"),
            (Method::GET, "http://127.0.0.1:8080/o/data/./t/x?expires=9&sig=ab"),
            (Method::GET, "http://127.0.0.1:8081/o/bootstrap/n0nce1"),
            (Method::GET, "http://localhost:8080/o/bootstrap/n0nce1"),
            (Method::GET, "http://169.254.169.254/computeMetadata/v1/"),
            (Method::GET, "http://user:pw@127.0.0.1:8080/o/bootstrap/n0nce1"),
            (Method::GET, "https://127.0.0.1:8080/o/bootstrap/n0nce1"),
            (Method::GET, "/o/bootstrap/n0nce1"),
            (Method::CONNECT, "127.0.0.1:8080"),
        ];
        for (method, target) in refused {
            let e = a.target(&method, target).expect_err(target);
            assert!(e.0.starts_with(&format!("{method} ")), "{e}");
        }
    }
}
