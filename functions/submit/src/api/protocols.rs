//! Standard inference protocols on the platform's scoring route, so stock
//! clients call an endpoint unchanged: the Open Inference Protocol v2
//! (KServe, Triton, Seldon: `…/v2/health/ready`, `…/v2/models/{alias}`,
//! `…/v2/models/{alias}/ready`, `…/v2/models/{alias}/infer`), KServe v1
//! (`…/v1/models/{alias}:predict`) and MLflow's scoring server
//! (`…/endpoints/{alias}/invocations`), each under
//! `/v1/tenants/{tenant}/projects/{project}`.
//!
//! A request in a protocol is translated into the platform's own score body
//! and scored by [`super::scoring::score`]: the same authorization,
//! admission, metering, audit and canary statistics; only the wire format
//! differs. The translations are pure functions of the bodies.
//!
//! An endpoint that runs the tenant's own container gets the request
//! unchanged (its path under the server's root: `/v2/models/{alias}/infer`,
//! `/v1/models/{alias}:predict`, `/invocations`; its body and content
//! headers), through the same admission and metering, and its answer goes
//! back as it came.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::map_response;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use mapi_access::Action;
use mapi_api::endpoints::ScoreResponse;
use mapi_domain::endpoint::EndpointStatus;
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Anonymous, Caller};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Path};
use serde_json::{Map, Value, json};

use super::endpoint_access::load_granted;
use super::scoring::Outbound;
use reqwest::Method;

type Row = Map<String, Value>;
type Loaded = (mapi_endpoints::EndpointDoc, mapi_schema::TenantDoc);

/// An Open Inference Protocol v2 infer request's rows: each input is one
/// column (shape `[N]` or `[N, 1]`, data flat or nested by row), all of the
/// same length. Also answers the request's `id`, echoed in the answer.
pub fn v2_rows(body: &Value) -> Result<(Vec<Row>, Option<Value>), String> {
    let inputs = body
        .get("inputs")
        .and_then(Value::as_array)
        .filter(|i| !i.is_empty())
        .ok_or("an infer request needs `inputs`: one tensor per input column, each with name, shape, datatype and data")?;
    let mut rows: Vec<Row> = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let name = input.get("name").and_then(Value::as_str).ok_or(format!("inputs[{i}] has no `name`"))?;
        let shape: Vec<u64> = input
            .get("shape")
            .and_then(Value::as_array)
            .map(|s| s.iter().filter_map(Value::as_u64).collect())
            .ok_or(format!("input `{name}` has no `shape`"))?;
        let n = match shape.as_slice() {
            [n] | [n, 1] => usize::try_from(*n).map_err(|_| format!("input `{name}`: shape too large"))?,
            _ => {
                return Err(format!(
                    "input `{name}` has shape {shape:?}: each input is one column, of shape [N] or [N, 1]"
                ));
            }
        };
        let data = flat(input.get("data").ok_or(format!("input `{name}` has no `data`"))?);
        if data.len() != n {
            return Err(format!("input `{name}` has {} values for shape {shape:?}", data.len()));
        }
        if i == 0 {
            rows = vec![Row::new(); n];
        } else if n != rows.len() {
            return Err(format!("input `{name}` has {n} rows, the first input {}", rows.len()));
        }
        for (row, v) in rows.iter_mut().zip(data) {
            row.insert(name.to_owned(), v);
        }
    }
    Ok((rows, body.get("id").cloned()))
}

/// The header naming the length of the JSON part of a request in the binary
/// tensor data extension (KServe, Triton): the JSON, then each input's raw
/// bytes whose `parameters.binary_data_size` it gives, in the inputs' order.
pub const BINARY_HEADER: &str = "inference-header-content-length";

/// A body of the binary tensor data extension split into its JSON part
/// (the first `json_len` bytes) and the binary inputs after it.
pub fn split_binary(body: &[u8], json_len: usize) -> Result<(&[u8], &[u8]), String> {
    if json_len > body.len() {
        return Err(format!("{BINARY_HEADER} is {json_len}, past the body's {} bytes", body.len()));
    }
    Ok(body.split_at(json_len))
}

/// Writes each binary input's values (from `rest`, in the inputs' order,
/// `parameters.binary_data_size` bytes each) into its `data`: little-endian,
/// row-major, as the extension sends them; `BYTES` as 4-byte-length-prefixed
/// UTF-8 strings.
pub fn fill_binary(request: &mut Value, mut rest: &[u8]) -> Result<(), String> {
    let inputs =
        request.get_mut("inputs").and_then(Value::as_array_mut).ok_or("an infer request needs `inputs`")?;
    for input in inputs {
        let Some(size) = input.pointer("/parameters/binary_data_size").and_then(Value::as_u64) else {
            continue;
        };
        let name = input.get("name").and_then(Value::as_str).unwrap_or("?").to_owned();
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        let (Some(raw), Some(after)) = (rest.get(..size), rest.get(size..)) else {
            return Err(format!("input `{name}` has binary_data_size {size}, past the body's end"));
        };
        rest = after;
        let datatype = input.get("datatype").and_then(Value::as_str).unwrap_or_default();
        input["data"] = Value::Array(decode(raw, datatype).map_err(|e| format!("input `{name}`: {e}"))?);
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes follow the last binary input", rest.len()));
    }
    Ok(())
}

/// Raw little-endian tensor bytes of `datatype` as JSON values.
fn decode(raw: &[u8], datatype: &str) -> Result<Vec<Value>, String> {
    fn each<const N: usize>(raw: &[u8], f: impl Fn([u8; N]) -> Value) -> Result<Vec<Value>, String> {
        if !raw.len().is_multiple_of(N) {
            return Err(format!("{} bytes are not whole {N}-byte values", raw.len()));
        }
        Ok(raw.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect())
    }
    match datatype {
        "FP64" => each(raw, |b| json!(f64::from_le_bytes(b))),
        "FP32" => each(raw, |b| json!(f32::from_le_bytes(b))),
        "INT64" => each(raw, |b| json!(i64::from_le_bytes(b))),
        "INT32" => each(raw, |b| json!(i32::from_le_bytes(b))),
        "INT16" => each(raw, |b| json!(i16::from_le_bytes(b))),
        "INT8" => each(raw, |b: [u8; 1]| json!(i8::from_le_bytes(b))),
        "UINT64" => each(raw, |b| json!(u64::from_le_bytes(b))),
        "UINT32" => each(raw, |b| json!(u32::from_le_bytes(b))),
        "UINT16" => each(raw, |b| json!(u16::from_le_bytes(b))),
        "UINT8" => each(raw, |b: [u8; 1]| json!(b[0])),
        "BOOL" => each(raw, |b: [u8; 1]| json!(b[0] != 0)),
        "BYTES" => {
            let (mut out, mut rest) = (Vec::new(), raw);
            while let Some((len, after)) = rest.split_first_chunk::<4>() {
                let len = u32::from_le_bytes(*len) as usize;
                let text = after.get(..len).ok_or("a BYTES element runs past its tensor")?;
                out.push(json!(String::from_utf8_lossy(text)));
                rest = &after[len..];
            }
            if rest.is_empty() { Ok(out) } else { Err("a BYTES element's length is cut short".into()) }
        }
        other => Err(format!("datatype `{other}` is not one the platform reads")),
    }
}

/// A tensor's data, flattened row-major.
fn flat(data: &Value) -> Vec<Value> {
    match data {
        Value::Array(items) => items.iter().flat_map(flat).collect(),
        v => vec![v.clone()],
    }
}

/// The v2 answer: output `value` (and `std_error` when asked), FP64 of shape `[N]`.
pub fn v2_answer(model: &str, version: &str, id: Option<Value>, scored: &ScoreResponse) -> Value {
    let n = scored.predictions.len();
    let mut outputs = vec![
        json!({"name": "value", "datatype": "FP64", "shape": [n], "data": scored.predictions.iter().map(|p| p.value).collect::<Vec<_>>()}),
    ];
    if scored.predictions.iter().all(|p| p.std_error.is_some()) && n > 0 {
        let errors: Vec<f64> = scored.predictions.iter().filter_map(|p| p.std_error).collect();
        outputs.push(json!({"name": "std_error", "datatype": "FP64", "shape": [n], "data": errors}));
    }
    let mut answer = json!({"model_name": model, "model_version": version, "outputs": outputs});
    if let Some(id) = id {
        answer["id"] = id;
    }
    answer
}

/// KServe v1's `instances`: objects name the columns; arrays are rejected
/// (the platform's models name their inputs, and an order is not stated).
pub fn kserve_rows(body: &Value) -> Result<Vec<Row>, String> {
    let instances = body
        .get("instances")
        .and_then(Value::as_array)
        .ok_or("a predict request needs `instances`: a list of objects, one per row, naming the columns")?;
    objects(instances, "instances")
}

fn objects(items: &[Value], what: &str) -> Result<Vec<Row>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_object().cloned().ok_or(format!(
                "{what}[{i}] is not an object: name each value's column ({{\"column\": value, …}})"
            ))
        })
        .collect()
}

/// MLflow's scoring formats: `dataframe_split` (`columns` and `data`),
/// `dataframe_records`, `instances` (objects) and `inputs` (objects, or
/// columns of equal length).
pub fn mlflow_rows(body: &Value) -> Result<Vec<Row>, String> {
    let keys = ["dataframe_split", "dataframe_records", "instances", "inputs"];
    let given: Vec<&str> = keys.into_iter().filter(|k| body.get(k).is_some()).collect();
    let [key] = given.as_slice() else {
        return Err(format!(
            "send exactly one of dataframe_split, dataframe_records, instances or inputs, not {}",
            if given.is_empty() { "none".to_owned() } else { given.join(" and ") }
        ));
    };
    let v = &body[key];
    match (*key, v) {
        ("dataframe_split", Value::Object(split)) => {
            let columns: Vec<&str> = split
                .get("columns")
                .and_then(Value::as_array)
                .map(|c| c.iter().filter_map(Value::as_str).collect())
                .ok_or("dataframe_split needs `columns`: the column names")?;
            let data = split
                .get("data")
                .and_then(Value::as_array)
                .ok_or("dataframe_split needs `data`: the rows")?;
            data.iter()
                .enumerate()
                .map(|(i, row)| {
                    let values = row.as_array().filter(|r| r.len() == columns.len()).ok_or(format!(
                        "dataframe_split data[{i}] is not a list of {} values",
                        columns.len()
                    ))?;
                    Ok(columns.iter().map(|c| (*c).to_owned()).zip(values.iter().cloned()).collect())
                })
                .collect()
        }
        ("dataframe_records" | "instances" | "inputs", Value::Array(items)) => objects(items, key),
        ("inputs", Value::Object(columns)) => {
            let n = columns.values().next().and_then(Value::as_array).map_or(0, Vec::len);
            let mut rows = vec![Row::new(); n];
            for (name, values) in columns {
                let values = values
                    .as_array()
                    .filter(|v| v.len() == n)
                    .ok_or(format!("inputs column `{name}` is not a list of {n} values"))?;
                for (row, v) in rows.iter_mut().zip(values) {
                    row.insert(name.clone(), v.clone());
                }
            }
            Ok(rows)
        }
        (key, _) => Err(format!("`{key}` is not in MLflow's format for it")),
    }
}

/// The v2 model metadata: the inputs the model's example row names (when
/// its fit stated one) and the outputs an infer answers.
pub fn v2_metadata(model: &str, version: &str, inputs: &[String]) -> Value {
    let inputs: Vec<Value> =
        inputs.iter().map(|name| json!({"name": name, "datatype": "FP64", "shape": [-1]})).collect();
    json!({
        "name": model,
        "versions": [version],
        "platform": "mapi",
        "inputs": inputs,
        "outputs": [
            {"name": "value", "datatype": "FP64", "shape": [-1]},
            {"name": "std_error", "datatype": "FP64", "shape": [-1]},
        ],
    })
}

/// Scores `rows` on an endpoint already loaded and granted (so an endpoint
/// the caller may not use is a 404 before its body is read); the answer,
/// or the refusal as it is.
async fn scored(
    state: &AppState,
    caller: &Caller,
    loaded: Loaded,
    rows: Vec<Row>,
    std_errors: bool,
) -> Result<Result<(ScoreResponse, HeaderMap), Response>, ApiError> {
    let n = rows.len();
    let body = serde_json::to_vec(&json!({"rows": rows, "std_errors": std_errors}))?;
    let resp = super::scoring::score_loaded(state, caller, loaded, n, Bytes::from(body)).await?;
    if resp.status() != StatusCode::OK {
        return Ok(Err(resp));
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ApiError::internal_from("a score's answer", e))?;
    let answer: ScoreResponse = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::unavailable(format!("the model server answered no predictions ({e}): retry"), 1)
    })?;
    Ok(Ok((answer, parts.headers)))
}

/// A protocol's answer with the platform's revision headers.
fn answer(body: Value, headers: &HeaderMap) -> Response {
    let mut resp = axum::Json(body).into_response();
    for name in ["x-mapi-revision", "x-mapi-model-version"] {
        if let Some(v) = headers.get(name) {
            resp.headers_mut().insert(name, v.clone());
        }
    }
    resp
}

/// Open Inference Protocol v2: infer.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/v2/models/{alias}/infer",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", description = "The endpoint's alias (the protocol's model name)")),
    request_body(content = mapi_api::endpoints::protocol::InferRequest, description = "An infer request: one input tensor per column (shape [N] or [N, 1]); ask for output `std_error` to get standard errors. Binary tensor data (the `Inference-Header-Content-Length` extension) is read too"),
    responses(
        (status = 200, body = serde_json::Value, description = "Outputs `value` (and `std_error`), FP64 of shape [N], with `x-mapi-revision` and `x-mapi-model-version`"),
        (status = 400, body = mapi_problem::Problem),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "The endpoint is not ready"),
        (status = 429, body = mapi_problem::Problem),
        (status = 503, body = mapi_problem::Problem),
    ),
    security((), ("session" = []), ("token" = []))
)]
pub async fn v2_infer(
    State(state): State<AppState>,
    Anonymous(caller): Anonymous,
    Path((tenant, project, alias)): Path<(TenantId, ProjectId, String)>,
    request_headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let loaded = load_granted(&state, &caller, (&tenant, &project, &alias), Action::Run).await?;
    if loaded.0.runs_container() {
        let path = format!("/v2/models/{alias}/infer");
        return pass(&state, &caller, loaded, Outbound::passed(Method::POST, path, &request_headers, body))
            .await;
    }
    let request = match request_headers.get(BINARY_HEADER) {
        Some(len) => {
            let len = len.to_str().ok().and_then(|l| l.trim().parse().ok()).ok_or_else(|| {
                ApiError::invalid(format!("{BINARY_HEADER} must be the JSON part's length in bytes"))
            })?;
            let (head, rest) = split_binary(&body, len).map_err(ApiError::invalid)?;
            let mut request = mapi_problem::parse_json::<Value>(head)?;
            fill_binary(&mut request, rest).map_err(ApiError::invalid)?;
            request
        }
        None => mapi_problem::parse_json::<Value>(&body)?,
    };
    let (rows, id) = v2_rows(&request).map_err(ApiError::invalid)?;
    let std_errors = request
        .get("outputs")
        .and_then(Value::as_array)
        .is_some_and(|o| o.iter().any(|o| o.get("name").and_then(Value::as_str) == Some("std_error")));
    match scored(&state, &caller, loaded, rows, std_errors).await? {
        Ok((scored, headers)) => {
            let version =
                headers.get("x-mapi-model-version").and_then(|v| v.to_str().ok()).unwrap_or_default();
            Ok(answer(v2_answer(&alias, version, id, &scored), &headers))
        }
        Err(refused) => Ok(refused),
    }
}

/// Open Inference Protocol v2: model metadata.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/v2/models/{alias}",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", description = "The endpoint's alias (the protocol's model name)")),
    responses((status = 200, body = serde_json::Value, description = "Name, versions, inputs and outputs"), (status = 404, body = mapi_problem::Problem)),
    security((), ("session" = []), ("token" = []))
)]
pub async fn v2_model(
    State(state): State<AppState>,
    Anonymous(caller): Anonymous,
    Path((tenant, project, alias)): Path<(TenantId, ProjectId, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let key = (&tenant, &project, alias.as_str());
    let (doc, _) = load_granted(&state, &caller, key, Action::Read).await?;
    if doc.runs_container() {
        // The container's own metadata: a request to it, run as one (admitted and metered).
        let loaded = (doc, super::endpoint_access::grant(&state, &caller, key, Action::Run).await?);
        let path = format!("/v2/models/{alias}");
        return pass(&state, &caller, loaded, Outbound::passed(Method::GET, path, &headers, Bytes::new()))
            .await;
    }
    let stable = doc.revision(&doc.stable);
    let version = stable.and_then(|r| r.model_version()).map(ToString::to_string).unwrap_or_default();
    let inputs: Vec<String> = stable
        .and_then(|r| match &r.serves {
            mapi_endpoints::Serves::Model(m) => m.example.as_ref(),
            mapi_endpoints::Serves::Container(_) => None,
        })
        .map(|(row, _)| row.keys().cloned().collect())
        .unwrap_or_default();
    Ok(axum::Json(v2_metadata(&alias, &version, &inputs)).into_response())
}

/// Open Inference Protocol v2: whether the model is ready (200) or not (400, as Triton answers).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/v2/models/{alias}/ready",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", description = "The endpoint's alias (the protocol's model name)")),
    responses((status = 200, description = "Ready"), (status = 400, description = "Not ready"), (status = 404, body = mapi_problem::Problem)),
    security((), ("session" = []), ("token" = []))
)]
pub async fn v2_model_ready(
    State(state): State<AppState>,
    Anonymous(caller): Anonymous,
    Path((tenant, project, alias)): Path<(TenantId, ProjectId, String)>,
) -> Result<StatusCode, ApiError> {
    let (doc, _) = load_granted(&state, &caller, (&tenant, &project, &alias), Action::Read).await?;
    Ok(if doc.status == EndpointStatus::Ready { StatusCode::OK } else { StatusCode::BAD_REQUEST })
}

/// Open Inference Protocol v2: the server is live and ready (for a caller who may see the project).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/v2/health/ready",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 200, description = "Ready"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn v2_health(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<StatusCode, ApiError> {
    use mapi_access::Resource;
    super::datasets::require_project(&state, &caller, &tenant, &project, Resource::Endpoint, Action::Read)
        .await?;
    Ok(StatusCode::OK)
}

/// Open Inference Protocol v2: the server is live (for a caller who may see the project).
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/v2/health/live",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 200, description = "Live"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn v2_live(
    state: State<AppState>,
    caller: Caller,
    path: Path<(TenantId, ProjectId)>,
) -> Result<StatusCode, ApiError> {
    v2_health(state, caller, path).await
}

/// The protocols' routes, each answering refusals in its protocol's shape too.
pub fn routes() -> Router<AppState> {
    const AT: &str = "/v1/tenants/{tenant}/projects/{project}";
    let v2 = Router::new()
        .route(&format!("{AT}/v1/models/{{alias}}"), post(kserve_predict))
        .route(&format!("{AT}/v2/health/ready"), get(v2_health))
        .route(&format!("{AT}/v2/health/live"), get(v2_live))
        .route(&format!("{AT}/v2/models/{{alias}}"), get(v2_model))
        .route(&format!("{AT}/v2/models/{{alias}}/ready"), get(v2_model_ready))
        .route(&format!("{AT}/v2/models/{{alias}}/infer"), post(v2_infer))
        .route_layer(map_response(v2_errors));
    let mlflow = Router::new()
        .route(&format!("{AT}/endpoints/{{alias}}/invocations"), post(mlflow_invocations))
        .route_layer(map_response(mlflow_errors));
    v2.merge(mlflow)
}

/// A refusal of a v2 or KServe v1 route, with the protocol's `error` member
/// beside the problem's own (stock clients, Triton's among them, read the
/// message from there).
pub async fn v2_errors(resp: Response) -> Response {
    with_members(resp, |p| {
        let detail = p.get("detail").cloned().unwrap_or_default();
        p.insert("error".into(), detail);
    })
    .await
}

/// A refusal of the MLflow route, with MLflow's `error_code` and `message`
/// beside the problem's own.
pub async fn mlflow_errors(resp: Response) -> Response {
    with_members(resp, |p| {
        let (code, detail) = (p.get("code").cloned(), p.get("detail").cloned());
        p.insert("error_code".into(), code.unwrap_or_default());
        p.insert("message".into(), detail.unwrap_or_default());
    })
    .await
}

/// `resp` unchanged, unless it is a problem document: then with `add`'s members.
async fn with_members(resp: Response, add: impl FnOnce(&mut Map<String, Value>)) -> Response {
    let problem = resp.headers().get(header::CONTENT_TYPE).is_some_and(|t| t == "application/problem+json");
    if resp.status().is_success() || !problem {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // A problem document is small; one that is not is left as it came.
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let Ok(mut doc) = serde_json::from_slice::<Map<String, Value>>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    add(&mut doc);
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::to_vec(&doc).unwrap_or_else(|_| bytes.to_vec());
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// KServe v1: `…/v1/models/{alias}:predict`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/v1/models/{alias}",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?:predict$", description = "`{alias}:predict`")),
    request_body(content = mapi_api::endpoints::protocol::PredictRequest, description = "`instances`: one object per row, naming the columns"),
    responses(
        (status = 200, body = mapi_api::endpoints::protocol::PredictResponse, description = "`predictions`: one value per instance"),
        (status = 400, body = mapi_problem::Problem),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "The endpoint is not ready"),
        (status = 429, body = mapi_problem::Problem),
        (status = 503, body = mapi_problem::Problem),
    ),
    security((), ("session" = []), ("token" = []))
)]
pub async fn kserve_predict(
    State(state): State<AppState>,
    Anonymous(caller): Anonymous,
    Path((tenant, project, target)): Path<(TenantId, ProjectId, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(alias) = target.strip_suffix(":predict") else {
        return Err(ApiError::not_found("no such route: use …/v1/models/{alias}:predict"));
    };
    let request = Protocol { rows_of: kserve_rows, path: format!("/v1/models/{alias}:predict"), headers };
    predictions(&state, &caller, (&tenant, &project, alias), body, request).await
}

/// MLflow's scoring server: `…/endpoints/{alias}/invocations`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/endpoints/{alias}/invocations",
    tag = "endpoints",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("alias" = String, Path, pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", description = "The endpoint's alias (the protocol's model name)")),
    request_body(content = mapi_api::endpoints::protocol::InvocationsRequest, description = "One of `dataframe_split`, `dataframe_records`, `instances` or `inputs`"),
    responses(
        (status = 200, body = mapi_api::endpoints::protocol::PredictResponse, description = "`predictions`: one value per row"),
        (status = 400, body = mapi_problem::Problem),
        (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem, description = "The endpoint is not ready"),
        (status = 429, body = mapi_problem::Problem),
        (status = 503, body = mapi_problem::Problem),
    ),
    security((), ("session" = []), ("token" = []))
)]
pub async fn mlflow_invocations(
    State(state): State<AppState>,
    Anonymous(caller): Anonymous,
    Path((tenant, project, alias)): Path<(TenantId, ProjectId, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = Protocol { rows_of: mlflow_rows, path: "/invocations".into(), headers };
    predictions(&state, &caller, (&tenant, &project, &alias), body, request).await
}

/// A predictions request in one protocol: how its rows are read, and where
/// a container gets it.
struct Protocol {
    rows_of: fn(&Value) -> Result<Vec<Row>, String>,
    path: String,
    headers: HeaderMap,
}

/// A request passed to a container unchanged, and its answer as it came.
async fn pass(
    state: &AppState,
    caller: &Caller,
    loaded: Loaded,
    outbound: Outbound,
) -> Result<Response, ApiError> {
    super::scoring::send_admitted(state, caller, loaded, outbound).await
}

/// KServe v1's and MLflow's scoring: the endpoint loaded and granted, the
/// body read as JSON and its rows taken out by the protocol's `rows_of`,
/// then `predictions`, one plain value per row; a container gets the body
/// as it came.
async fn predictions(
    state: &AppState,
    caller: &Caller,
    key: (&TenantId, &ProjectId, &str),
    body: Bytes,
    protocol: Protocol,
) -> Result<Response, ApiError> {
    let loaded = load_granted(state, caller, key, Action::Run).await?;
    if loaded.0.runs_container() {
        let outbound = Outbound::passed(Method::POST, protocol.path, &protocol.headers, body);
        return pass(state, caller, loaded, outbound).await;
    }
    let rows = (protocol.rows_of)(&mapi_problem::parse_json::<Value>(&body)?).map_err(ApiError::invalid)?;
    match scored(state, caller, loaded, rows, false).await? {
        Ok((scored, headers)) => {
            let values: Vec<f64> = scored.predictions.iter().map(|p| p.value).collect();
            Ok(answer(json!({"predictions": values}), &headers))
        }
        Err(refused) => Ok(refused),
    }
}

#[cfg(test)]
mod tests {
    use mapi_api::endpoints::{PredictionView, protocol};

    use super::*;

    #[test]
    fn a_v2_request_is_rows_by_column_and_its_answer_a_tensor() {
        let body = json!({"id": "a1", "inputs": [
            {"name": "gnp", "shape": [2, 1], "datatype": "FP64", "data": [[400.0], [410.0]]},
            {"name": "year", "shape": [2], "datatype": "INT64", "data": [1955, 1956]},
        ], "outputs": [{"name": "value"}]});
        let (rows, id) = v2_rows(&body).expect("rows");
        assert_eq!(rows.len(), 2);
        // The document's schema describes what the handler accepts.
        serde_json::from_value::<protocol::InferRequest>(body.clone()).expect("the documented body");
        assert_eq!((rows[1]["gnp"].clone(), rows[1]["year"].clone()), (json!(410.0), json!(1956)));
        assert_eq!(id, Some(json!("a1")));
        let scored = ScoreResponse {
            predictions: vec![
                PredictionView { value: 1.5, std_error: None },
                PredictionView { value: 2.5, std_error: None },
            ],
            revision: "r1".into(),
        };
        let a = v2_answer("m", "mv_1", id, &scored);
        assert_eq!(
            a["outputs"][0],
            json!({"name": "value", "datatype": "FP64", "shape": [2], "data": [1.5, 2.5]})
        );
        assert_eq!((a["id"].as_str(), a["outputs"].as_array().map(Vec::len)), (Some("a1"), Some(1)));
    }

    #[test]
    fn binary_tensor_data_is_read_as_its_values() {
        let head = json!({"inputs": [
            {"name": "x", "shape": [2], "datatype": "FP64", "parameters": {"binary_data_size": 16}},
            {"name": "n", "shape": [2, 1], "datatype": "INT32", "parameters": {"binary_data_size": 8}},
            {"name": "s", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}},
            {"name": "j", "shape": [1], "datatype": "FP64", "data": [0.5]},
        ]})
        .to_string();
        let mut body = head.clone().into_bytes();
        for v in [1.5f64, -2.25] {
            body.extend(v.to_le_bytes());
        }
        for v in [7i32, -8] {
            body.extend(v.to_le_bytes());
        }
        body.extend(2u32.to_le_bytes());
        body.extend(b"ab");
        let read = |body: &[u8]| -> Result<Value, String> {
            let (json, rest) = split_binary(body, head.len())?;
            let mut request: Value = serde_json::from_slice(json).expect("the JSON part");
            fill_binary(&mut request, rest).map(|()| request)
        };
        let request = read(&body).expect("read");
        let rows = v2_rows(&request).expect_err("s has one row, x two");
        assert!(rows.contains("input `s` has 1 rows, the first input 2"), "{rows}");
        assert_eq!(request["inputs"][0]["data"], json!([1.5, -2.25]));
        assert_eq!(request["inputs"][1]["data"], json!([7, -8]));
        assert_eq!(request["inputs"][2]["data"], json!(["ab"]));
        assert_eq!(request["inputs"][3]["data"], json!([0.5]));
        let short = read(&body[..body.len() - 1]).expect_err("cut");
        assert!(short.contains("input `s`"), "{short}");
        let mut long = body.clone();
        long.push(0);
        assert!(read(&long).expect_err("extra").contains("1 bytes follow"));
        let odd = read(&body[..head.len() + 15]).expect_err("odd");
        assert!(odd.contains("past the body's end"), "{odd}");
        assert!(split_binary(b"{}", 3).expect_err("past").contains("past the body's 2 bytes"));
    }

    #[test]
    fn bad_v2_requests_say_what_to_fix() {
        let cases = [
            (json!({}), "needs `inputs`"),
            (json!({"inputs": [{"name": "a", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}]}), "one column"),
            (json!({"inputs": [{"name": "a", "shape": [3], "data": [1, 2]}]}), "2 values for shape"),
            (
                json!({"inputs": [{"name": "a", "shape": [1], "data": [1]}, {"name": "b", "shape": [2], "data": [1, 2]}]}),
                "the first input 1",
            ),
        ];
        for (body, says) in cases {
            let e = v2_rows(&body).expect_err("refused");
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn every_mlflow_format_gives_the_same_rows() {
        let want = vec![
            Row::from_iter([("a".to_owned(), json!(1)), ("b".to_owned(), json!(2))]),
            Row::from_iter([("a".to_owned(), json!(3)), ("b".to_owned(), json!(4))]),
        ];
        for body in [
            json!({"dataframe_split": {"columns": ["a", "b"], "data": [[1, 2], [3, 4]]}}),
            json!({"dataframe_records": [{"a": 1, "b": 2}, {"a": 3, "b": 4}]}),
            json!({"instances": [{"a": 1, "b": 2}, {"a": 3, "b": 4}]}),
            json!({"inputs": [{"a": 1, "b": 2}, {"a": 3, "b": 4}]}),
            json!({"inputs": {"a": [1, 3], "b": [2, 4]}}),
        ] {
            assert_eq!(mlflow_rows(&body).expect("rows"), want, "{body}");
            serde_json::from_value::<protocol::InvocationsRequest>(body.clone())
                .expect("the documented body");
        }
        let both = mlflow_rows(&json!({"instances": [], "inputs": []})).expect_err("refused");
        assert!(both.contains("exactly one") && both.contains("instances and inputs"), "{both}");
        let ragged = mlflow_rows(&json!({"dataframe_split": {"columns": ["a"], "data": [[1, 2]]}}));
        assert!(ragged.expect_err("refused").contains("data[0] is not a list of 1 values"));
        let kserve = json!({"instances": [{"a": 1, "b": 2}, {"a": 3, "b": 4}]});
        assert_eq!(kserve_rows(&kserve).expect("rows"), want);
        serde_json::from_value::<protocol::PredictRequest>(kserve).expect("the documented body");
        assert!(
            kserve_rows(&json!({"instances": [[1, 2]]}))
                .expect_err("refused")
                .contains("name each value's column")
        );
    }
}
