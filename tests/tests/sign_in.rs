//! Sign-in with stock clients: a standard OpenID Connect client library
//! completes the authorization-code flow against the development identity
//! provider, and the ID token it gets signs a person in to the platform.

use std::process::Command;

use mapi_tests::TestPlatform;
use serde_json::Value;

/// Authlib, a widely used Python OAuth/OIDC client, and what it needs, pinned.
const AUTHLIB: &str = "Authlib==1.3.2\nrequests==2.32.3\ncryptography==43.0.3\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_oidc_client_library_signs_in_against_the_dev_identity_provider() {
    let p = TestPlatform::start(&[]).await;
    let dir = mapi_tests::python_tools::cache_dir("authlib", AUTHLIB);
    let python = mapi_tests::python_tools::venv(&dir, AUTHLIB, |_| Ok(())).expect("Authlib installs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/oidc_stock_client.py");
    let issuer = format!("{}/dev/idp", p.platform.url);
    let audience = p.platform.state.config.oidc_audience.clone();
    let redirect = format!("{}/console/callback", p.platform.url);
    let args = [script.to_owned(), issuer, audience, redirect, "dev@dev.local".to_owned()];
    let out = tokio::task::spawn_blocking(move || Command::new(python).args(args).output())
        .await
        .expect("join")
        .expect("run the client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the library did not complete sign-in:\n{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["token_type"], "Bearer", "{v}");
    assert_eq!(
        (v["has_access_token"].as_bool(), v["nonce_matches"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    assert_eq!(v["email"], "dev@dev.local");
    assert!(v["expires_in"].as_u64().is_some_and(|s| s > 0), "{v}");
    assert_eq!(
        (v["replay_status"].as_u64(), v["replay_error"].as_str()),
        (Some(400), Some("invalid_grant")),
        "{v}"
    );
    assert_eq!(v["replay_cache_control"], "no-store", "an error answer is not cached either");

    // The ID token the library got is a session's credential on the platform.
    let id_token = v["id_token"].as_str().expect("id_token");
    let (status, body) = p.call(id_token, reqwest::Method::POST, "/v1/sessions", None).await;
    assert_eq!(status, 200, "{body}");
}

/// `mapi login`, run as a person runs it, its stderr read line by line.
struct Login {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Login {
    fn start(p: &TestPlatform, home: &std::path::Path, args: &[&str]) -> Login {
        let mut child = Command::new(mapi_tests::binary("mapi"))
            .arg("login")
            .args(args)
            .env("MAPI_URL", &p.platform.url)
            .env_remove("MAPI_TOKEN")
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home)
            .env("BROWSER", "true")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mapi login starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Login { child, lines }
    }

    /// The sign-in link it printed.
    fn link(&self) -> String {
        loop {
            let line = self.lines.recv_timeout(std::time::Duration::from_secs(30)).expect("a line on stderr");
            if let Some(link) = line.trim().strip_prefix("http").map(|rest| format!("http{rest}")) {
                return link;
            }
        }
    }

    /// Waits for it to end: its exit status, stdout and the rest of stderr.
    fn finish(self) -> (bool, String, String) {
        let out = self.child.wait_with_output().expect("mapi login ends");
        let rest: Vec<String> = self.lines.try_iter().collect();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), rest.join("\n"))
    }
}

/// What a person does in the browser: picks `email` on the provider's
/// page; the address the provider sends the browser back to.
async fn pick(link: &str, email: &str) -> String {
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let page = http.get(link).send().await.expect("the sign-in page");
    assert_eq!(page.status(), 200, "{:?}", page.text().await);
    let (endpoint, query) = link.split_once('?').expect("a query");
    let answer = http
        .post(endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("{query}&email={}", email.replace('@', "%40")))
        .send()
        .await
        .expect("the account picked");
    assert_eq!(answer.status(), 303);
    answer.headers()["location"].to_str().expect("location").to_owned()
}

/// `mapi login` signs a person in through the browser (PKCE, a loopback
/// redirect to the port it listens on), and with `--no-browser` from the
/// address pasted back; a pasted address of another sign-in is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapi_login_signs_in_through_the_browser_and_without_one() {
    let p = TestPlatform::start(&[]).await;
    let home = tempfile::tempdir().expect("home");

    let login = Login::start(&p, home.path(), &[]);
    let link = login.link();
    assert!(
        link.contains("code_challenge_method=S256")
            && link.contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A")
    );
    let back = pick(&link, "dev@dev.local").await;
    assert!(back.starts_with("http://127.0.0.1:"), "{back}");
    let page = reqwest::get(&back).await.expect("the browser comes back").text().await.expect("page");
    assert!(page.contains("Signed in"), "{page}");
    let (ok, out, err) = tokio::task::spawn_blocking(move || login.finish()).await.expect("join");
    assert!(ok && out.contains("signed in as dev@dev.local"), "{out}\n{err}");
    let whoami = Command::new(mapi_tests::binary("mapi"))
        .args(["--json", "whoami"])
        .env("MAPI_URL", &p.platform.url)
        .env_remove("MAPI_TOKEN")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .output()
        .expect("whoami");
    let me: Value = serde_json::from_slice(&whoami.stdout).expect("json");
    assert_eq!((me["user"].as_str(), me["kind"].as_str()), (Some("dev@dev.local"), Some("session")), "{me}");

    let mut login = Login::start(&p, home.path(), &["--no-browser"]);
    let link = login.link();
    let back = pick(&link, "admin@dev.local").await;
    let stdin = login.child.stdin.as_mut().expect("stdin");
    std::io::Write::write_all(stdin, format!("{back}\n").as_bytes()).expect("paste");
    let (ok, out, err) = tokio::task::spawn_blocking(move || login.finish()).await.expect("join");
    assert!(ok && out.contains("signed in as admin@dev.local (operator)"), "{out}\n{err}");

    let mut login = Login::start(&p, home.path(), &["--no-browser"]);
    let link = login.link();
    let other = pick(&link, "dev@dev.local").await.replace("state=", "state=x");
    let stdin = login.child.stdin.as_mut().expect("stdin");
    std::io::Write::write_all(stdin, format!("{other}\n").as_bytes()).expect("paste");
    let (ok, _, err) = tokio::task::spawn_blocking(move || login.finish()).await.expect("join");
    assert!(!ok && err.contains("not the one this command started"), "{err}");
}
