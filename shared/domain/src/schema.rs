//! How the API document states a string the platform parses by a rule:
//! `type: string` with the rule's pattern, for the types whose schema is
//! written by hand (identifiers, residency, scopes, tags, columns).

use utoipa::openapi::ObjectBuilder;
use utoipa::openapi::schema::Type;

/// A string schema matching `pattern` (ECMA-262, anchored by the caller);
/// callers add a description or a maximum length.
pub fn string_matching(pattern: impl Into<String>) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).pattern(Some(pattern))
}
