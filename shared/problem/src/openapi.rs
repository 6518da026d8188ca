//! How the OpenAPI document states errors: the one place that makes the
//! document say what every operation's errors are, so generated clients
//! decode them.
//!
//! The rule, applied to the document the handlers' annotations make:
//! - every error (status 400 and above) is `application/problem+json` with
//!   the `Problem` schema, and lists as examples the problem codes that
//!   answer with that status;
//! - an operation that takes a credential can answer 401 (none, or
//!   an expired or revoked one) and 403 (a role or token scope that does not
//!   allow it, a suspended tenant);
//! - an operation with parameters or a body can answer 400 (a malformed
//!   path id, an unknown or malformed query parameter, a body that does
//!   not parse);
//! - an operation with a path parameter can answer 404;
//! - an operation with a body can answer 415 (a body not sent as its media
//!   type).
//!
//! Statuses an operation's own annotations list keep their descriptions.

use mapi_api::problem::{Problem, ProblemCode};
use utoipa::openapi::content::{Content, ContentBuilder};
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::{OpenApi, Ref, RefOr, ResponseBuilder};

const PROBLEM_JSON: &str = "application/problem+json";

/// `doc` with its errors stated as the rule above says. An error response
/// with nothing of its own to say is a reference to the shared response
/// of its status (`#/components/responses/Error409`), which carries the
/// examples; one with its own description keeps it, with the same content.
pub fn document_errors(mut doc: OpenApi) -> OpenApi {
    let mut used = std::collections::BTreeSet::new();
    for item in doc.paths.paths.values_mut() {
        let ops = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for op in ops.into_iter().flatten() {
            complete(op, &mut used);
        }
    }
    let components = doc.components.get_or_insert_with(Default::default);
    for code in used {
        let response =
            ResponseBuilder::new().description(describe(code)).content(PROBLEM_JSON, problem_content(code));
        components.responses.insert(shared_name(code), RefOr::T(response.build()));
    }
    doc
}

/// The name of the shared response of `status`.
fn shared_name(status: u16) -> String {
    format!("Error{status}")
}

/// What an error with `status` means, wherever it is answered.
fn describe(status: u16) -> String {
    let said = match status {
        400 => "A malformed path id, query parameter or body: the detail says what to fix",
        401 => "No credential, or an expired or revoked one",
        403 => "The caller's role or token scope does not allow this, or its tenant is suspended",
        404 => "Not found, or not visible to the caller",
        _ => {
            return axum::http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Error")
                .to_owned();
        }
    };
    said.to_owned()
}

/// One operation's errors, completed; the statuses it refers to the
/// shared responses of are added to `used`.
fn complete(op: &mut Operation, used: &mut std::collections::BTreeSet<u16>) {
    let params = op.parameters.as_deref().unwrap_or_default();
    let in_path = params.iter().any(|p| matches!(p.parameter_in, ParameterIn::Path));
    let takes_input = !params.is_empty() || op.request_body.is_some();
    let credential = op.security.as_ref().is_some_and(|s| !s.is_empty());
    let body = op.request_body.is_some();
    let implied = [(takes_input, 400), (credential, 401), (credential, 403), (in_path, 404), (body, 415)];
    let responses = &mut op.responses.responses;
    for (_, status) in implied.into_iter().filter(|(applies, _)| *applies) {
        responses.entry(status.to_string()).or_insert_with(|| RefOr::Ref(Ref::new("")));
    }
    for (status, response) in responses.iter_mut() {
        let Some(code) = status.parse::<u16>().ok().filter(|s| *s >= 400) else { continue };
        match response {
            RefOr::T(r) if !r.description.is_empty() => {
                r.content.clear();
                r.content.insert(PROBLEM_JSON.to_owned(), problem_content(code));
            }
            _ => {
                *response = RefOr::Ref(Ref::new(format!("#/components/responses/{}", shared_name(code))));
                used.insert(code);
            }
        }
    }
}

/// The content of an error with `status`: the `Problem` schema, and an
/// example of each problem code that answers with it.
fn problem_content(status: u16) -> Content {
    let examples = ProblemCode::ALL.iter().filter(|c| c.status().as_u16() == status).filter_map(|code| {
        let problem = Problem::new(*code, "what went wrong and what to do about it");
        let value = serde_json::to_value(&problem).ok()?;
        Some((code.as_str(), ExampleBuilder::new().value(Some(value)).build()))
    });
    ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).examples_from_iter(examples).build()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn op(doc: &OpenApi, path: &str, method: &str) -> Value {
        serde_json::to_value(doc).expect("serializes")["paths"][path][method].clone()
    }

    fn doc(v: Value) -> OpenApi {
        serde_json::from_value(v).expect("a document")
    }

    #[test]
    fn errors_become_problems_with_their_codes_as_examples() {
        let d = document_errors(doc(json!({
            "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
            "paths": {"/v1/runs/{id}/cancel": {"post": {
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "cancelled", "content": {"application/json": {"schema": {"type": "object"}}}},
                    "409": {"description": "The run already ended", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}},
                    "413": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
                },
                "security": [{"bearer": []}]
            }}}
        })));
        let v = serde_json::to_value(&d).expect("serializes");
        let post = &v["paths"]["/v1/runs/{id}/cancel"]["post"];
        let statuses: Vec<&String> = post["responses"].as_object().expect("responses").keys().collect();
        assert_eq!(statuses, ["200", "400", "401", "403", "404", "409", "413"]);
        assert!(post["responses"]["200"]["content"]["application/json"].is_object(), "success untouched");
        for (status, name) in [("400", "Error400"), ("401", "Error401"), ("413", "Error413")] {
            let to = format!("#/components/responses/{name}");
            assert_eq!(post["responses"][status]["$ref"], json!(to), "{status}");
        }
        let own = &post["responses"]["409"];
        assert_eq!(own["description"], "The run already ended", "its own words kept");
        let codes = |content: &Value| -> Vec<String> {
            content[PROBLEM_JSON]["examples"]
                .as_object()
                .map(|e| e.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(codes(&own["content"]), ["ALREADY_EXISTS", "FAILED_PRECONDITION", "INTEGRITY_FAILURE"]);
        assert!(own["content"].get("application/json").is_none(), "{own}");
        let shared = &v["components"]["responses"];
        let names: Vec<&String> = shared.as_object().expect("shared").keys().collect();
        assert_eq!(names, ["Error400", "Error401", "Error403", "Error404", "Error413"], "only those used");
        assert_eq!(codes(&shared["Error401"]["content"]), ["UNAUTHENTICATED"]);
        let example = &shared["Error404"]["content"][PROBLEM_JSON]["examples"]["NOT_FOUND"]["value"];
        assert_eq!((&example["status"], &example["code"]), (&json!(404), &json!("NOT_FOUND")));
        assert_eq!(shared["Error413"]["description"], "Payload Too Large");
    }

    #[test]
    fn an_open_operation_without_input_gets_no_implied_errors() {
        let d = document_errors(doc(json!({
            "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
            "paths": {"/health": {"get": {"responses": {"200": {"description": "up"}}}}}
        })));
        let statuses = op(&d, "/health", "get")["responses"].as_object().expect("responses").len();
        assert_eq!(statuses, 1);
    }
}
