//! Queries: equality, range, `in` and `array-contains` filters on fields,
//! ordered, limited, and paged by cursor, with Firestore's semantics:
//!
//! - a document lacking a filtered or ordered field is not returned;
//! - results are ordered by the `order_by` fields, then by document id in the
//!   direction of the last `order_by` (ascending when there is none);
//! - a cursor continues strictly after the document it was taken from.

use serde_json::Value;

use crate::{Document, StoreError};

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
    /// The field equals one of the values of an array (at most 30, as Firestore).
    In,
    /// The field is an array that holds the value (Firestore's
    /// `array-contains`: one per query, and only on a scalar).
    Contains,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Asc,
    Desc,
}

/// A filter on one field (a dotted path such as `usage.vcpu_s`).
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    pub field: String,
    pub op: Op,
    pub value: Value,
}

/// The position after which a page starts: the values of the `order_by`
/// fields of the last document of the previous page, and its id.
#[derive(Clone, Debug, PartialEq)]
pub struct Cursor {
    pub values: Vec<Value>,
    pub id: String,
}

impl Cursor {
    /// An opaque, URL-safe page token for this cursor.
    pub fn to_token(&self) -> String {
        use base64::Engine;
        let v = serde_json::json!({ "v": self.values, "id": self.id });
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    }

    /// The cursor of a page token; `None` if the token was not made by [`Cursor::to_token`].
    pub fn from_token(token: &str) -> Option<Cursor> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        Some(Cursor { values: v.get("v")?.as_array()?.clone(), id: v.get("id")?.as_str()?.to_owned() })
    }
}

/// A query on one collection.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub collection: String,
    pub filters: Vec<Filter>,
    pub order_by: Vec<(String, Direction)>,
    pub limit: Option<u32>,
    pub start_after: Option<Cursor>,
}

/// A composite index of queries that also ask an array field to hold a
/// value ([`Op::Contains`]): the equality fields, the array, then the order.
/// Firestore indexes the array's elements (`arrayConfig: CONTAINS`); SQLite
/// cannot index inside an array, so it serves such a query from the index of
/// the same fields without the array and checks the array of each document
/// it reads (its adapter creates none of these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainsIndex {
    pub collection: &'static str,
    pub equal: &'static [&'static str],
    pub contains: &'static str,
    pub order: &'static [(&'static str, Direction)],
}

/// A composite index a query needs. The list of indexes lives with the
/// collections that need them; the SQLite adapter creates them at open, the
/// Firestore deploy step applies the same list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Index {
    pub collection: &'static str,
    pub fields: &'static [(&'static str, Direction)],
}

/// A field no query reads, exempt from Firestore's automatic single-field
/// indexes. Firestore indexes every field and every value nested in a map
/// or array unless told not to: a map the tenant fills (a method's params,
/// an item's result) would cost an index entry per nested value at every
/// write, and a document needing more than 40,000 index entries cannot be
/// written at all. SQLite indexes only what an [`Index`] declares, so this
/// is Firestore's only (the deploy step applies the list as field
/// overrides with no index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unindexed {
    pub collection: &'static str,
    /// A top-level field: the exemption covers everything nested in it.
    pub field: &'static str,
}

impl Query {
    pub fn new(collection: &str) -> Query {
        Query {
            collection: collection.to_owned(),
            filters: vec![],
            order_by: vec![],
            limit: None,
            start_after: None,
        }
    }

    pub fn filter(mut self, field: &str, op: Op, value: impl Into<Value>) -> Query {
        self.filters.push(Filter { field: field.to_owned(), op, value: value.into() });
        self
    }

    pub fn order_by(mut self, field: &str, direction: Direction) -> Query {
        self.order_by.push((field.to_owned(), direction));
        self
    }

    pub fn limit(mut self, n: u32) -> Query {
        self.limit = Some(n);
        self
    }

    pub fn start_after(mut self, cursor: Cursor) -> Query {
        self.start_after = Some(cursor);
        self
    }

    /// The cursor that continues this query after `doc`.
    pub fn cursor_after(&self, doc: &Document) -> Cursor {
        let values = self
            .order_by
            .iter()
            .map(|(f, _)| field_value(&doc.fields, f).cloned().unwrap_or(Value::Null))
            .collect();
        Cursor { values, id: doc.key.id().to_owned() }
    }

    /// Runs this query one page at a time: up to `size` documents after the
    /// page token, and the token of the next page if there is one.
    pub async fn page(
        &self,
        store: &dyn crate::Store,
        size: u32,
        token: Option<&str>,
    ) -> Result<(Vec<Document>, Option<String>), StoreError> {
        let mut q = self.clone().limit(size + 1);
        if let Some(t) = token {
            let cursor = Cursor::from_token(t).ok_or_else(|| {
                StoreError::InvalidArgument(
                    "invalid page_token: pass the next_page_token of the previous page".into(),
                )
            })?;
            q = q.start_after(cursor);
        }
        let mut docs = store.query(&q, None).await?;
        let more = docs.len() > size as usize;
        docs.truncate(size as usize);
        let next = if more { docs.last().map(|d| self.cursor_after(d).to_token()) } else { None };
        Ok((docs, next))
    }

    /// Checks the query is well formed: field paths, value types, cursor shape.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |m: String| Err(StoreError::InvalidArgument(m));
        for f in &self.filters {
            check_field_path(&f.field)?;
            match (&f.op, &f.value) {
                (Op::In, Value::Array(vs))
                    if !vs.is_empty() && vs.len() <= 30 && vs.iter().all(is_scalar) => {}
                (Op::In, _) => return bad(format!("`in` on {} needs an array of 1 to 30 scalars", f.field)),
                (Op::Contains, v) if is_scalar(v) && !v.is_null() => {}
                (Op::Contains, _) => return bad(format!("`contains` on {} needs a scalar", f.field)),
                (_, v) if is_scalar(v) => {}
                _ => return bad(format!("filter on {} compares with an array or object", f.field)),
            }
        }
        if self.filters.iter().filter(|f| f.op == Op::Contains).count() > 1 {
            return bad("a query may have one `contains` filter".to_owned());
        }
        for (f, _) in &self.order_by {
            check_field_path(f)?;
        }
        if let Some(c) = &self.start_after
            && c.values.len() != self.order_by.len()
        {
            return bad("the cursor does not match the query's order".to_owned());
        }
        Ok(())
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

/// Field paths are dot-separated identifiers: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn check_field_path(path: &str) -> Result<(), StoreError> {
    let ok = !path.is_empty()
        && path.split('.').all(|seg| {
            let mut b = seg.bytes();
            b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
        });
    if ok { Ok(()) } else { Err(StoreError::InvalidArgument(format!("invalid field path `{path}`"))) }
}

/// A field a [`crate::Write::Merge`] sets: a top-level name (a dotted path
/// would be a nested field in Firestore and a name with a dot elsewhere).
///
/// # Errors
///
/// `InvalidArgument` naming the field.
pub fn check_merge_field(name: &str) -> Result<(), StoreError> {
    check_field_path(name)?;
    if name.contains('.') {
        return Err(StoreError::InvalidArgument(format!("a merge sets top-level fields, not `{name}`")));
    }
    Ok(())
}

/// The value at a dotted path.
pub fn field_value<'a>(fields: &'a crate::Fields, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = fields.get(parts.next()?)?;
    for p in parts {
        v = v.as_object()?.get(p)?;
    }
    Some(v)
}
