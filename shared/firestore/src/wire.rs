//! The mapping between the Store port's types and Firestore's protos:
//! JSON values, document names, versions and timestamps, queries, and the
//! composite index file. Pure functions, tested without a server.

use googleapis_tonic_google_firestore_v1::google::firestore::v1 as fs;
use mapi_domain::Timestamp;
use mapi_store::{
    ContainsIndex, Direction, DocKey, Document, Fields, Index, Op, Query, StoreError, Unindexed, Version,
};
use prost_types::Timestamp as PbTimestamp;
use serde_json::{Number, Value};

use fs::structured_query::{
    CollectionSelector, CompositeFilter, FieldFilter, FieldReference, Filter, Order, UnaryFilter,
    composite_filter, field_filter, filter, unary_filter,
};
use fs::value::ValueType;

const NANOS: u64 = 1_000_000_000;

/// A document's version: its `update_time` in nanoseconds since the epoch.
pub fn version_of(t: &PbTimestamp) -> Result<Version, StoreError> {
    let secs = u64::try_from(t.seconds).map_err(|_| bad_time(t))?;
    let nanos = u64::try_from(t.nanos).map_err(|_| bad_time(t))?;
    secs.checked_mul(NANOS).and_then(|s| s.checked_add(nanos)).map(Version).ok_or_else(|| bad_time(t))
}

/// The `update_time` a version stands for (the inverse of [`version_of`]).
pub fn update_time_of(v: Version) -> PbTimestamp {
    // Both parts fit: seconds < 2^64 / 10^9 < 2^35, nanos < 10^9.
    PbTimestamp { seconds: (v.0 / NANOS) as i64, nanos: (v.0 % NANOS) as i32 }
}

fn bad_time(t: &PbTimestamp) -> StoreError {
    StoreError::Internal(
        format!("Firestore returned an invalid timestamp {}s {}ns", t.seconds, t.nanos).into(),
    )
}

pub fn timestamp_of(t: &PbTimestamp) -> Timestamp {
    Timestamp::from_micros(t.seconds.saturating_mul(1_000_000).saturating_add(i64::from(t.nanos / 1000)))
}

/// A JSON value as a Firestore value. Integers stay integers; numbers that
/// do not fit an i64 are refused rather than rounded.
pub fn to_value(v: &Value) -> Result<fs::Value, StoreError> {
    let t = match v {
        Value::Null => ValueType::NullValue(0),
        Value::Bool(b) => ValueType::BooleanValue(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => ValueType::IntegerValue(i),
            (None, Some(u), _) => {
                return Err(StoreError::InvalidArgument(format!("{u} does not fit a 64-bit signed integer")));
            }
            (_, _, Some(f)) => ValueType::DoubleValue(f),
            _ => return Err(StoreError::InvalidArgument(format!("{n} is not a storable number"))),
        },
        Value::String(s) => ValueType::StringValue(s.clone()),
        Value::Array(a) => ValueType::ArrayValue(fs::ArrayValue {
            values: a.iter().map(to_value).collect::<Result<_, _>>()?,
        }),
        Value::Object(m) => ValueType::MapValue(fs::MapValue { fields: to_fields(m)? }),
    };
    Ok(fs::Value { value_type: Some(t) })
}

pub fn to_fields(m: &Fields) -> Result<std::collections::HashMap<String, fs::Value>, StoreError> {
    m.iter().map(|(k, v)| Ok((k.clone(), to_value(v)?))).collect()
}

/// A Firestore value as JSON. Only the types [`to_value`] writes are read
/// back; another type (written by some other client) is an error.
pub fn from_value(v: &fs::Value) -> Result<Value, StoreError> {
    Ok(match &v.value_type {
        None | Some(ValueType::NullValue(_)) => Value::Null,
        Some(ValueType::BooleanValue(b)) => Value::Bool(*b),
        Some(ValueType::IntegerValue(i)) => Value::from(*i),
        Some(ValueType::DoubleValue(f)) => Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| StoreError::Internal(format!("the stored number {f} has no JSON form").into()))?,
        Some(ValueType::StringValue(s)) => Value::String(s.clone()),
        Some(ValueType::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(from_value).collect::<Result<_, _>>()?)
        }
        Some(ValueType::MapValue(m)) => Value::Object(from_fields(&m.fields)?),
        Some(other) => {
            return Err(StoreError::Internal(
                format!("a stored value of an unsupported type: {other:?}").into(),
            ));
        }
    })
}

pub fn from_fields(m: &std::collections::HashMap<String, fs::Value>) -> Result<Fields, StoreError> {
    m.iter().map(|(k, v)| Ok((k.clone(), from_value(v)?))).collect()
}

/// Names of documents under one database's `documents` root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// `projects/{p}/databases/{d}`.
    pub database: String,
    /// `projects/{p}/databases/{d}/documents`.
    pub root: String,
}

impl Names {
    pub fn new(database: String) -> Names {
        let root = format!("{database}/documents");
        Names { database, root }
    }

    pub fn doc(&self, key: &DocKey) -> String {
        format!("{}/{}/{}", self.root, key.collection(), key.id())
    }

    /// The key of a document name under this root.
    pub fn key(&self, name: &str) -> Result<DocKey, StoreError> {
        let rest =
            name.strip_prefix(self.root.as_str()).and_then(|r| r.strip_prefix('/')).ok_or_else(|| {
                StoreError::Internal(format!("document `{name}` is outside {}", self.root).into())
            })?;
        let (collection, id) = rest
            .split_once('/')
            .ok_or_else(|| StoreError::Internal(format!("`{name}` is not a document name").into()))?;
        DocKey::new(collection, id).map_err(|e| {
            StoreError::Internal(mapi_domain::Cause::new(format!("stored document `{name}`"), e))
        })
    }

    /// A document of the port from a Firestore document.
    pub fn document(&self, d: &fs::Document) -> Result<Document, StoreError> {
        let key = self.key(&d.name)?;
        let missing =
            |what: &str| StoreError::Internal(format!("document {key} came without its {what}").into());
        let update = d.update_time.as_ref().ok_or_else(|| missing("update_time"))?;
        let create = d.create_time.as_ref().ok_or_else(|| missing("create_time"))?;
        Ok(Document {
            fields: from_fields(&d.fields)?,
            version: version_of(update)?,
            create_time: timestamp_of(create),
            update_time: timestamp_of(update),
            key,
        })
    }
}

fn field_ref(path: &str) -> Option<FieldReference> {
    Some(FieldReference { field_path: path.to_owned() })
}

fn direction(d: Direction) -> i32 {
    match d {
        Direction::Asc => fs::structured_query::Direction::Ascending as i32,
        Direction::Desc => fs::structured_query::Direction::Descending as i32,
    }
}

fn field_op(op: Op) -> field_filter::Operator {
    match op {
        Op::Eq => field_filter::Operator::Equal,
        Op::Lt => field_filter::Operator::LessThan,
        Op::Le => field_filter::Operator::LessThanOrEqual,
        Op::Gt => field_filter::Operator::GreaterThan,
        Op::Ge => field_filter::Operator::GreaterThanOrEqual,
        Op::In => field_filter::Operator::In,
        Op::Contains => field_filter::Operator::ArrayContains,
    }
}

/// The structured query of a port query.
///
/// Firestore already has the port's semantics: documents lacking a
/// filtered or ordered field are left out, values compare within their
/// type and types in a fixed order, and ties go by document name in the
/// direction of the last order. A cursor needs that name order spelled
/// out, so a query with a cursor orders by `__name__` last, explicitly.
pub fn structured_query(q: &Query, names: &Names) -> Result<fs::StructuredQuery, StoreError> {
    q.validate()?;
    // Collections are named as DocKey allows; a key made with one proves it.
    DocKey::new(&q.collection, "x")?;
    let mut filters = Vec::with_capacity(q.filters.len());
    for f in &q.filters {
        let filter_type = match (&f.op, &f.value) {
            (Op::Eq, Value::Null) => filter::FilterType::UnaryFilter(UnaryFilter {
                op: unary_filter::Operator::IsNull as i32,
                operand_type: Some(unary_filter::OperandType::Field(FieldReference {
                    field_path: f.field.clone(),
                })),
            }),
            (Op::In | Op::Eq | Op::Contains, _) => filter::FilterType::FieldFilter(FieldFilter {
                field: field_ref(&f.field),
                op: field_op(f.op) as i32,
                value: Some(to_value(&f.value)?),
            }),
            (_, Value::Null) => {
                return Err(StoreError::InvalidArgument(format!("range filter on {} with null", f.field)));
            }
            (op, v) => filter::FilterType::FieldFilter(FieldFilter {
                field: field_ref(&f.field),
                op: field_op(*op) as i32,
                value: Some(to_value(v)?),
            }),
        };
        filters.push(Filter { filter_type: Some(filter_type) });
    }
    let r#where = match filters.len() {
        0 => None,
        1 => filters.pop(),
        _ => Some(Filter {
            filter_type: Some(filter::FilterType::CompositeFilter(CompositeFilter {
                op: composite_filter::Operator::And as i32,
                filters,
            })),
        }),
    };
    let mut order_by: Vec<Order> =
        q.order_by.iter().map(|(f, d)| Order { field: field_ref(f), direction: direction(*d) }).collect();
    let start_at = match &q.start_after {
        None => None,
        Some(c) => {
            let last = q.order_by.last().map_or(Direction::Asc, |(_, d)| *d);
            order_by.push(Order { field: field_ref("__name__"), direction: direction(last) });
            let mut values = c.values.iter().map(to_value).collect::<Result<Vec<_>, _>>()?;
            let at = DocKey::new(&q.collection, c.id.clone())
                .map_err(|_| StoreError::InvalidArgument("the cursor names no document".to_owned()))?;
            values.push(fs::Value { value_type: Some(ValueType::ReferenceValue(names.doc(&at))) });
            // `before: false`: the results start strictly after the position.
            Some(fs::Cursor { values, before: false })
        }
    };
    Ok(fs::StructuredQuery {
        from: vec![CollectionSelector { collection_id: q.collection.clone(), all_descendants: false }],
        r#where,
        order_by,
        start_at,
        limit: q.limit.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        ..Default::default()
    })
}

/// The composite indexes of `indexes` and `contains`, and the fields of
/// `unindexed` as overrides with no index, in the format of a
/// `firestore.indexes.json` file (what `firebase deploy --only
/// firestore:indexes` reads, and what the deploy step turns into
/// `google_firestore_index` and `google_firestore_field` resources).
/// Single-field entries are left out: Firestore indexes every field on its
/// own automatically, and refuses a composite index of one field.
/// Duplicates are written once.
pub fn indexes_file(indexes: &[Index], contains: &[ContainsIndex], unindexed: &[Unindexed]) -> Value {
    let order = |(f, d): &(&str, Direction)| {
        let order = if *d == Direction::Asc { "ASCENDING" } else { "DESCENDING" };
        serde_json::json!({ "fieldPath": f, "order": order })
    };
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for index in indexes.iter().filter(|i| i.fields.len() > 1) {
        if seen.contains(index) {
            continue;
        }
        seen.push(*index);
        let fields: Vec<Value> = index.fields.iter().map(order).collect();
        out.push(serde_json::json!({
            "collectionGroup": index.collection,
            "queryScope": "COLLECTION",
            "fields": fields,
        }));
    }
    for index in contains {
        let equal = index.equal.iter().map(|f| order(&(f, Direction::Asc)));
        let array = serde_json::json!({ "fieldPath": index.contains, "arrayConfig": "CONTAINS" });
        let fields: Vec<Value> =
            equal.chain(std::iter::once(array)).chain(index.order.iter().map(order)).collect();
        out.push(serde_json::json!({
            "collectionGroup": index.collection,
            "queryScope": "COLLECTION",
            "fields": fields,
        }));
    }
    let mut overrides: Vec<Value> = Vec::new();
    for u in unindexed {
        let entry =
            serde_json::json!({ "collectionGroup": u.collection, "fieldPath": u.field, "indexes": [] });
        if !overrides.contains(&entry) {
            overrides.push(entry);
        }
    }
    serde_json::json!({ "indexes": out, "fieldOverrides": overrides })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapi_store::Cursor;
    use serde_json::json;

    fn names() -> Names {
        Names::new("projects/p/databases/(default)".to_owned())
    }

    #[test]
    fn json_values_round_trip_with_their_types() {
        let v =
            json!({"i": -3, "f": 2.5, "s": "2", "b": true, "n": null, "a": [1, "x"], "m": {"k": {"z": 0}}});
        let Value::Object(m) = &v else { panic!("object") };
        let wire = to_fields(m).expect("encode");
        assert_eq!(wire["i"].value_type, Some(ValueType::IntegerValue(-3)));
        assert_eq!(wire["f"].value_type, Some(ValueType::DoubleValue(2.5)));
        assert_eq!(wire["s"].value_type, Some(ValueType::StringValue("2".into())));
        assert_eq!(Value::Object(from_fields(&wire).expect("decode")), v);
        assert!(matches!(to_value(&json!(u64::MAX)), Err(StoreError::InvalidArgument(_))));
        let foreign = fs::Value { value_type: Some(ValueType::BytesValue(vec![1])) };
        assert!(matches!(from_value(&foreign), Err(StoreError::Internal(_))));
    }

    #[test]
    fn versions_are_update_times_in_nanoseconds() {
        let t = PbTimestamp { seconds: 1_800_000_000, nanos: 123_456_789 };
        let v = version_of(&t).expect("version");
        assert_eq!(v, Version(1_800_000_000_123_456_789));
        assert_eq!(update_time_of(v), t);
        assert!(version_of(&PbTimestamp { seconds: -1, nanos: 0 }).is_err());
        assert_eq!(timestamp_of(&t), Timestamp::from_micros(1_800_000_000_123_456));
    }

    #[test]
    fn names_map_to_keys_and_back() {
        let n = names();
        let k = DocKey::new("runs", "r-1").expect("key");
        let name = n.doc(&k);
        assert_eq!(name, "projects/p/databases/(default)/documents/runs/r-1");
        assert_eq!(n.key(&name).expect("key"), k);
        assert!(n.key("projects/q/databases/(default)/documents/runs/r-1").is_err());
        assert!(n.key("projects/p/databases/(default)/documents/runs").is_err());
    }

    #[test]
    fn queries_compile_to_filters_orders_cursor_and_limit() {
        let q = Query::new("things")
            .filter("group", Op::Eq, "a")
            .filter("n", Op::In, json!([1, 3]))
            .filter("gone", Op::Eq, Value::Null)
            .order_by("n", Direction::Desc)
            .limit(2)
            .start_after(Cursor { values: vec![json!(3)], id: "t1".into() });
        let sq = structured_query(&q, &names()).expect("query");
        assert_eq!(sq.from[0].collection_id, "things");
        let Some(Filter { filter_type: Some(filter::FilterType::CompositeFilter(c)) }) = &sq.r#where else {
            panic!("three filters are one AND: {:?}", sq.r#where)
        };
        assert_eq!(c.op, composite_filter::Operator::And as i32);
        assert_eq!(c.filters.len(), 3);
        let Some(filter::FilterType::FieldFilter(f)) = &c.filters[1].filter_type else {
            panic!("field filter")
        };
        assert_eq!(f.op, field_filter::Operator::In as i32);
        let Some(filter::FilterType::UnaryFilter(u)) = &c.filters[2].filter_type else { panic!("unary") };
        assert_eq!(u.op, unary_filter::Operator::IsNull as i32);
        let orders: Vec<(&str, i32)> = sq
            .order_by
            .iter()
            .map(|o| (o.field.as_ref().map_or("", |f| f.field_path.as_str()), o.direction))
            .collect();
        let desc = fs::structured_query::Direction::Descending as i32;
        assert_eq!(orders, [("n", desc), ("__name__", desc)], "the cursor's name order follows the last");
        let cursor = sq.start_at.expect("cursor");
        assert!(!cursor.before, "start strictly after");
        assert_eq!(cursor.values[0].value_type, Some(ValueType::IntegerValue(3)));
        assert_eq!(
            cursor.values[1].value_type,
            Some(ValueType::ReferenceValue("projects/p/databases/(default)/documents/things/t1".into()))
        );
        assert_eq!(sq.limit, Some(2));
        let plain = structured_query(&Query::new("things").filter("n", Op::Ge, 2), &names()).expect("query");
        assert!(plain.order_by.is_empty(), "without a cursor, Firestore's implicit name order is the port's");
        assert!(matches!(
            plain.r#where.and_then(|w| w.filter_type),
            Some(filter::FilterType::FieldFilter(_))
        ));
    }

    #[test]
    fn malformed_queries_are_refused_before_the_wire() {
        let n = names();
        let bad = [
            Query::new("things").filter("n", Op::Lt, Value::Null),
            Query::new("things").filter("a b", Op::Eq, 1),
            Query::new("Things").filter("n", Op::Eq, 1),
            Query::new("things")
                .order_by("n", Direction::Asc)
                .start_after(Cursor { values: vec![], id: "x".into() }),
            Query::new("things")
                .order_by("n", Direction::Asc)
                .start_after(Cursor { values: vec![json!(1)], id: "a/b".into() }),
        ];
        for q in bad {
            assert!(matches!(structured_query(&q, &n), Err(StoreError::InvalidArgument(_))), "{q:?}");
        }
    }

    #[test]
    fn the_index_file_lists_composite_indexes_once() {
        const I: &[Index] = &[
            Index {
                collection: "runs",
                fields: &[("tenant", Direction::Asc), ("created_at", Direction::Desc)],
            },
            Index {
                collection: "runs",
                fields: &[("tenant", Direction::Asc), ("created_at", Direction::Desc)],
            },
            Index { collection: "jobs", fields: &[("created_at", Direction::Asc)] },
        ];
        let params = Unindexed { collection: "runs", field: "params" };
        let f = indexes_file(I, &[], &[params, params]);
        assert_eq!(
            f,
            json!({"indexes": [{"collectionGroup": "runs", "queryScope": "COLLECTION", "fields": [
                {"fieldPath": "tenant", "order": "ASCENDING"},
                {"fieldPath": "created_at", "order": "DESCENDING"}]}],
                "fieldOverrides": [{"collectionGroup": "runs", "fieldPath": "params", "indexes": []}]})
        );
    }

    #[test]
    fn an_array_field_is_indexed_by_its_elements_between_the_equalities_and_the_order() {
        let tags = ContainsIndex {
            collection: "runs",
            equal: &["tenant"],
            contains: "labels.tags",
            order: &[("created_at", Direction::Desc)],
        };
        let f = indexes_file(&[], &[tags], &[]);
        assert_eq!(
            f["indexes"],
            json!([{"collectionGroup": "runs", "queryScope": "COLLECTION", "fields": [
                {"fieldPath": "tenant", "order": "ASCENDING"},
                {"fieldPath": "labels.tags", "arrayConfig": "CONTAINS"},
                {"fieldPath": "created_at", "order": "DESCENDING"}]}])
        );
        let q = Query::new("runs").filter("labels.tags", Op::Contains, "nightly");
        let sq = structured_query(&q, &names()).expect("query");
        let Some(Filter { filter_type: Some(filter::FilterType::FieldFilter(ff)) }) = sq.r#where else {
            panic!("one field filter: {sq:?}")
        };
        assert_eq!(ff.op, field_filter::Operator::ArrayContains as i32);
    }
}
