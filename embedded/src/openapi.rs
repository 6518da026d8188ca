//! The platform's OpenAPI document: every function's routes merged, the
//! credentials each takes, and the rules the annotations alone cannot
//! state (unsigned ranges, problems for errors).

use utoipa::Number;
use utoipa::OpenApi as _;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayItems, KnownFormat, Schema, SchemaFormat};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

/// The credentials an operation may take, as `Authorization: Bearer …`:
/// each operation lists those it accepts (`/v1/admin/…` and tenant-level
/// actions take only a session; most take either).
const CREDENTIALS: [(&str, &str, &str); 2] = [
    (
        "session",
        "JWT",
        "A person's session: the ID token of the platform's identity provider (`mapi login`). \
         Operators act on `/v1/admin/…` through theirs.",
    ),
    (
        "token",
        "mapi_<64 hex>",
        "An API token: acts as the member who minted it, in its project, within its scopes. \
         It never acts tenant-wide or as an operator, and cannot mint tokens.",
    ),
];

/// The merged OpenAPI document of every function.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = mapi_submit::ApiDoc::openapi();
    doc.merge(mapi_admin::ApiDoc::openapi());
    doc.merge(mapi_meter::ApiDoc::openapi());
    doc.info.title = "mapi".to_owned();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc.info.description = Some("The mapi model API platform.".to_owned());
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, format, said) in CREDENTIALS {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.bearer_format = Some(format.to_owned());
        scheme.description = Some(said.to_owned());
        components.add_security_scheme(name, SecurityScheme::Http(scheme));
    }
    // A run's label change names at least one field. utoipa 5 writes a
    // struct's `min_properties` as `maxProperties`, so it is set here.
    if let Some(RefOr::T(Schema::Object(change))) = components.schemas.get_mut("LabelChange") {
        change.min_properties = Some(1);
    }
    state_unsigned_ranges(&mut doc);
    mapi_problem::openapi::document_errors(doc)
}

/// utoipa writes an unsigned integer as `int32`/`int64` with `minimum: 0`
/// (or the field's own, higher minimum), whose format caps it at the signed
/// range; the server reads it unsigned, so each such schema with no maximum
/// of its own states the unsigned maximum instead, without the format.
fn state_unsigned_ranges(doc: &mut utoipa::openapi::OpenApi) {
    for item in doc.paths.paths.values_mut() {
        let ops = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for op in ops.into_iter().flatten() {
            op.parameters.iter_mut().flatten().filter_map(|p| p.schema.as_mut()).for_each(unsigned_in);
        }
    }
    for schema in doc.components.iter_mut().flat_map(|c| c.schemas.values_mut()) {
        unsigned_in(schema);
    }
}

fn unsigned_in(schema: &mut RefOr<Schema>) {
    let RefOr::T(schema) = schema else { return };
    match schema {
        Schema::Object(o) => {
            let width = match &o.format {
                Some(SchemaFormat::KnownFormat(KnownFormat::Int32)) => Some(u64::from(u32::MAX)),
                Some(SchemaFormat::KnownFormat(KnownFormat::Int64)) => Some(u64::MAX),
                _ => None,
            };
            let unsigned = match o.minimum {
                Some(Number::Int(n)) => n >= 0,
                Some(Number::UInt(_)) => true,
                Some(Number::Float(f)) => f >= 0.0,
                None => false,
            };
            if let (Some(max), true, None) = (width, unsigned, &o.maximum) {
                o.format = None;
                o.maximum = Some(Number::UInt(usize::try_from(max).unwrap_or(usize::MAX)));
            }
            o.properties.values_mut().for_each(unsigned_in);
        }
        Schema::Array(a) => {
            if let ArrayItems::RefOrSchema(items) = &mut a.items {
                unsigned_in(items);
            }
        }
        Schema::OneOf(one) => one.items.iter_mut().for_each(unsigned_in),
        Schema::AllOf(all) => all.items.iter_mut().for_each(unsigned_in),
        Schema::AnyOf(any) => any.items.iter_mut().for_each(unsigned_in),
        _ => {}
    }
}
