//! `mapi login` through the browser, as a native OAuth client does
//! (RFC 8252): the platform names its identity provider and the CLI's OAuth
//! client (`GET /v1/sessions/cli-client`); the CLI listens on a loopback
//! port of this machine, sends the person's browser to the provider's
//! authorization page with PKCE (S256), a state and a nonce, takes the code
//! the browser brings back to that port, and exchanges it (with the
//! verifier) for an ID token. With `--no-browser` nothing is opened and
//! nothing listens: the person opens the link anywhere and pastes back the
//! address the browser ended on.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::Result;

/// How long the CLI waits for the browser to come back.
const WAIT: Duration = Duration::from_secs(300);

/// Signs the person in through the browser; the ID token.
pub async fn id_token(url: &str, no_browser: bool) -> Result<String> {
    let http = reqwest::Client::new();
    let client: Value = get_json(&http, &format!("{url}/v1/sessions/cli-client")).await.map_err(|e| {
        format!("{e} (a platform without an identity provider for people takes an API token: MAPI_TOKEN)")
    })?;
    let field =
        |k: &str| client[k].as_str().map(str::to_owned).ok_or(format!("the platform's answer has no {k}"));
    let (issuer, client_id) = (field("issuer")?, field("client_id")?);
    let secret = client["client_secret"].as_str().map(str::to_owned);
    let provider: Value = get_json(&http, &format!("{issuer}/.well-known/openid-configuration")).await?;
    let endpoint = |k: &str| {
        provider[k].as_str().map(str::to_owned).ok_or(format!("the identity provider names no {k}"))
    };
    let (authorize, token) = (endpoint("authorization_endpoint")?, endpoint("token_endpoint")?);

    let (verifier, state, nonce) = (random()?, random()?, random()?);
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let listener = match no_browser {
        true => None,
        false => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await?),
    };
    let redirect = match &listener {
        Some(l) => format!("http://127.0.0.1:{}/callback", l.local_addr()?.port()),
        None => "http://127.0.0.1:1/callback".to_owned(),
    };
    let query = [
        ("response_type", "code"),
        ("client_id", &client_id),
        ("redirect_uri", &redirect),
        ("scope", "openid email"),
        ("state", &state),
        ("nonce", &nonce),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
    ];
    let link = format!("{authorize}?{}", form(&query));
    let back = match listener {
        Some(listener) => {
            eprintln!("Opening your browser to sign in. If it does not open, go to:\n  {link}");
            open_browser(&link);
            tokio::time::timeout(WAIT, callback(listener))
                .await
                .map_err(|_| "no sign-in came back within 5 minutes: run `mapi login` again")??
        }
        None => {
            eprintln!("Open this link in a browser, sign in, and paste here the address the browser ends on");
            eprintln!("(it starts with {redirect} and may say it cannot connect):\n  {link}");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim().to_owned()
        }
    };
    let params = params_of(&back);
    if let Some(error) = params.iter().find(|(k, _)| k == "error").map(|(_, v)| v) {
        return Err(format!("the identity provider refused the sign-in: {error}").into());
    }
    let param = |k: &str| params.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    if param("state").as_deref() != Some(state.as_str()) {
        return Err(
            "the sign-in that came back is not the one this command started: run `mapi login` again".into()
        );
    }
    let code =
        param("code").ok_or("the address has no code: paste the whole address the browser ended on")?;
    let mut exchange = vec![
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", &redirect),
        ("client_id", &client_id),
        ("code_verifier", &verifier),
    ];
    if let Some(s) = &secret {
        exchange.push(("client_secret", s));
    }
    let resp = http
        .post(&token)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&exchange))
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or_default();
    if !status.is_success() {
        let why = body["error_description"].as_str().or(body["error"].as_str()).unwrap_or("no reason given");
        return Err(format!("the identity provider would not exchange the code ({status}): {why}").into());
    }
    Ok(body["id_token"].as_str().ok_or("the identity provider sent no id_token")?.to_owned())
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value> {
    let resp = http.get(url).send().await?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}").into());
    }
    Ok(resp.json().await?)
}

/// 32 random bytes, URL-safe.
fn random() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| format!("no randomness: {e}"))?;
    Ok(URL_SAFE_NO_PAD.encode(b))
}

/// `k=v&…`, each side percent-encoded as one path segment is
/// ([`crate::client::segment`]), which a query and a form take as well.
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = crate::client::segment;
    pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

/// The query parameters of an address (or of a bare query), decoded.
fn params_of(address: &str) -> Vec<(String, String)> {
    let query = address.split_once('?').map_or(address, |(_, q)| q);
    let query = query.split('#').next().unwrap_or_default();
    query.split('&').filter_map(|p| p.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

fn decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => Some(hi * 16 + lo),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Waits for the browser's `GET /callback?…` on `listener`; its target.
/// Anything else (a favicon) is answered 404 and waited past.
async fn callback(listener: tokio::net::TcpListener) -> Result<String> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await? {
                0 => break,
                n => head.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&head);
        let target = text.lines().next().and_then(|l| l.split(' ').nth(1)).unwrap_or_default().to_owned();
        if !target.starts_with("/callback") {
            let _ = stream
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            continue;
        }
        let page = "<!doctype html><meta charset=utf-8><title>mapi</title><p>Signed in: you may close this \
                    tab and go back to the terminal.</p>";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncache-control: no-store\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        return Ok(target);
    }
}

/// Opens `link` in the person's browser: `$BROWSER` if set, else the
/// desktop's opener. Failing to open is not an error: the link is printed.
fn open_browser(link: &str) {
    let opener = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| if cfg!(target_os = "macos") { "open".to_owned() } else { "xdg-open".to_owned() });
    let _ = std::process::Command::new(opener)
        .arg(link)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_and_addresses_round_trip() {
        let f = form(&[("redirect_uri", "http://127.0.0.1:5/callback"), ("scope", "openid email")]);
        assert_eq!(f, "redirect_uri=http%3A%2F%2F127.0.0.1%3A5%2Fcallback&scope=openid%20email");
        let p = params_of("http://127.0.0.1:5/callback?code=a%2Fb&state=s+t#frag");
        assert_eq!(p, [("code".to_owned(), "a/b".to_owned()), ("state".to_owned(), "s t".to_owned())]);
        assert_eq!(decode("%zz%4"), "%zz%4", "a broken escape is kept as written");
    }
}
