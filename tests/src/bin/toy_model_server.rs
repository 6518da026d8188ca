//! `toy_model_server`: the model server inside the test image of "bring
//! your own container" endpoints. Standard library and serde_json only, so
//! it runs in a root filesystem holding just it and its shared libraries.
//!
//! It listens on `0.0.0.0:$PORT` (8000) and speaks HTTP/1.1 with
//! keep-alive and `Content-Length` bodies:
//!
//! | route | answer |
//! |---|---|
//! | `GET /health` | 200 `ok` (500 when `TOY_FAIL_HEALTH=1`) |
//! | `GET /v2/health/live`, `/v2/health/ready` | 200 |
//! | `GET /v2` | the server's metadata |
//! | `GET /v2/models/{name}`, `/v2/models/{name}/ready` | the model's metadata, 200 |
//! | `POST /v2/models/{name}/infer` | Open Inference Protocol v2: each row's sum over all inputs × `TOY_SCALE` (500 for all when `TOY_FAIL_INFER=1`) |
//! | `POST /v1/models/{name}:predict` | `{"instances": [...]}` → each instance's sum × `TOY_SCALE` |
//! | `GET /env/{NAME}` | the variable's value, 404 when unset |
//! | `GET /net?addr=HOST:PORT` | `connected` or `refused: <error>` after a TCP connect (2 s) |
//!
//! A bad body answers 400 `{"error": ...}`; any other path 404.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{Value, json};

/// The most bytes of a request body.
const MAX_BODY: usize = 64 << 20;

/// The environment, read once at start.
#[derive(Clone, Debug)]
struct Config {
    port: u16,
    version: String,
    scale: f64,
    fail_health: bool,
    fail_infer: bool,
}

impl Config {
    fn from_env() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Ok(Self {
            port: var("PORT").map_or(Ok(8000), |p| p.parse().map_err(|e| format!("PORT={p}: {e}")))?,
            version: var("TOY_VERSION").unwrap_or_else(|| "1".into()),
            scale: var("TOY_SCALE")
                .map_or(Ok(1.0), |s| s.parse().map_err(|e| format!("TOY_SCALE={s}: {e}")))?,
            fail_health: var("TOY_FAIL_HEALTH").as_deref() == Some("1"),
            fail_infer: var("TOY_FAIL_INFER").as_deref() == Some("1"),
        })
    }
}

fn main() {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toy_model_server: {e}");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(("0.0.0.0", config.port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("toy_model_server: cannot listen on port {}: {e}", config.port);
            std::process::exit(1);
        }
    };
    eprintln!("toy_model_server: listening on port {}", config.port);
    for conn in listener.incoming().flatten() {
        let config = config.clone();
        std::thread::spawn(move || {
            // A connection that breaks ends; the server goes on.
            serve_connection(conn, &config).ok();
        });
    }
}

/// A request as the routes need it.
struct Request {
    method: String,
    path: String,
    query: String,
    body: Vec<u8>,
}

/// An answer: status, content type, body.
type Response = (u16, &'static str, Vec<u8>);

fn serve_connection(conn: TcpStream, config: &Config) -> io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
            return write_response(&mut writer, (400, "text/plain", b"bad request line".to_vec()), true);
        };
        let (method, target) = (method.to_string(), target.to_string());
        let mut close = version == "HTTP/1.0";
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else { continue };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse().unwrap_or(usize::MAX),
                "transfer-encoding" => chunked = true,
                "connection" if value.eq_ignore_ascii_case("close") => close = true,
                "connection" if value.eq_ignore_ascii_case("keep-alive") => close = false,
                _ => {}
            }
        }
        if chunked || length > MAX_BODY {
            let error = json!({"error": "send the body with a Content-Length of at most 64 MiB"});
            return write_response(
                &mut writer,
                (400, "application/json", error.to_string().into_bytes()),
                true,
            );
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let request = Request { method, path: path.to_string(), query: query.to_string(), body };
        write_response(&mut writer, route(&request, config), close)?;
        if close {
            return Ok(());
        }
    }
}

fn write_response(w: &mut TcpStream, (status, content_type, body): Response, close: bool) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    };
    let connection = if close { "Connection: close\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{connection}\r\n",
        body.len()
    );
    w.write_all(head.as_bytes())?;
    w.write_all(&body)?;
    w.flush()
}

fn text(status: u16, body: &str) -> Response {
    (status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
}

fn json_response(status: u16, body: &Value) -> Response {
    (status, "application/json", body.to_string().into_bytes())
}

fn error(status: u16, message: &str) -> Response {
    json_response(status, &json!({"error": message}))
}

fn route(r: &Request, config: &Config) -> Response {
    let segments: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
    match (r.method.as_str(), segments.as_slice()) {
        ("GET", ["health"]) if config.fail_health => text(500, "unhealthy"),
        ("GET", ["health"]) => text(200, "ok"),
        ("GET", ["v2", "health", "live"]) => json_response(200, &json!({"live": true})),
        ("GET", ["v2", "health", "ready"]) => json_response(200, &json!({"ready": true})),
        ("GET", ["v2"]) => json_response(200, &json!({"name": "toy", "version": "1", "extensions": []})),
        ("GET", ["v2", "models", name]) => json_response(200, &metadata(name, config)),
        ("GET", ["v2", "models", name, "ready"]) => json_response(200, &json!({"name": name, "ready": true})),
        ("POST", ["v2", "models", _, "infer"]) if config.fail_infer => error(500, "toy failure"),
        ("POST", ["v2", "models", name, "infer"]) => match infer(name, &r.body, config) {
            Ok(answer) => json_response(200, &answer),
            Err(e) => error(400, &e),
        },
        ("POST", ["v1", "models", name_verb]) if name_verb.ends_with(":predict") => {
            match predict(&r.body, config) {
                Ok(answer) => json_response(200, &answer),
                Err(e) => error(400, &e),
            }
        }
        ("GET", ["env", name]) => match std::env::var(name) {
            Ok(value) => text(200, &value),
            Err(_) => text(404, &format!("{name} is not set")),
        },
        ("GET", ["net"]) => match query_param(&r.query, "addr") {
            Some(addr) => text(200, &try_connect(&addr)),
            None => text(400, "give ?addr=HOST:PORT"),
        },
        _ => text(404, "not found"),
    }
}

fn metadata(name: &str, config: &Config) -> Value {
    json!({
        "name": name,
        "versions": [config.version],
        "platform": "toy",
        "inputs": [{"name": "x", "datatype": "FP64", "shape": [-1, -1]}],
        "outputs": [{"name": "sum", "datatype": "FP64", "shape": [-1]}],
    })
}

/// Every number in `v` (nested arrays flattened), in order.
fn numbers(v: &Value, out: &mut Vec<f64>) -> Result<(), String> {
    match v {
        Value::Array(items) => items.iter().try_for_each(|i| numbers(i, out)),
        Value::Number(n) => {
            out.push(n.as_f64().ok_or("a number out of range")?);
            Ok(())
        }
        other => Err(format!("data holds {other}, which is not a number")),
    }
}

/// Open Inference Protocol v2 inference: each row's sum over every input.
fn infer(name: &str, body: &[u8], config: &Config) -> Result<Value, String> {
    let request: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let inputs =
        request["inputs"].as_array().filter(|i| !i.is_empty()).ok_or("the body has no \"inputs\" list")?;
    let mut sums: Option<Vec<f64>> = None;
    for input in inputs {
        let input_name = input["name"].as_str().ok_or("an input has no \"name\"")?;
        input["datatype"].as_str().ok_or_else(|| format!("input {input_name} has no \"datatype\""))?;
        let shape: Vec<usize> = input["shape"]
            .as_array()
            .and_then(|s| s.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect())
            .ok_or_else(|| format!("input {input_name} has no \"shape\" of sizes"))?;
        let mut data = Vec::new();
        numbers(&input["data"], &mut data)?;
        let count: usize = shape.iter().product();
        if data.len() != count {
            return Err(format!("input {input_name} has {} values for shape {shape:?}", data.len()));
        }
        let rows = shape.first().copied().unwrap_or(1);
        let per_row = count.checked_div(rows).unwrap_or(0);
        let row_sums: Vec<f64> =
            (0..rows).map(|r| data[r * per_row..(r + 1) * per_row].iter().sum()).collect();
        match &mut sums {
            None => sums = Some(row_sums),
            Some(s) if s.len() == rows => s.iter_mut().zip(row_sums).for_each(|(a, b)| *a += b),
            Some(s) => {
                return Err(format!("input {input_name} has {rows} rows and another input {}", s.len()));
            }
        }
    }
    let sums: Vec<f64> = sums.unwrap_or_default().into_iter().map(|s| s * config.scale).collect();
    let mut answer = json!({
        "model_name": name,
        "model_version": config.version,
        "outputs": [{"name": "sum", "datatype": "FP64", "shape": [sums.len()], "data": sums}],
    });
    if let Some(id) = request.get("id") {
        answer["id"] = id.clone();
    }
    Ok(answer)
}

/// KServe v1 prediction: each instance's sum.
fn predict(body: &[u8], config: &Config) -> Result<Value, String> {
    let request: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let instances = request["instances"].as_array().ok_or("the body has no \"instances\" list")?;
    let predictions = instances
        .iter()
        .map(|instance| {
            let mut values = Vec::new();
            numbers(instance, &mut values)?;
            Ok(values.iter().sum::<f64>() * config.scale)
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(json!({"predictions": predictions}))
}

/// The value of `key` in a query string, percent-decoded.
fn query_param(query: &str, key: &str) -> Option<String> {
    let raw = query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Tries a TCP connection to `addr`: whether the sandbox has a network.
fn try_connect(addr: &str) -> String {
    let resolved = match addr.to_socket_addrs() {
        Ok(mut addrs) => addrs.next(),
        Err(e) => return format!("refused: {e}"),
    };
    let Some(resolved) = resolved else { return format!("refused: {addr} resolves to no address") };
    match TcpStream::connect_timeout(&resolved, Duration::from_secs(2)) {
        Ok(_) => "connected".into(),
        Err(e) => format!("refused: {e}"),
    }
}
