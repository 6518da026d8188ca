//! The Store conformance suite: one set of cases every adapter must pass.
//!
//! An adapter's tests call [`conformance_suite!`](crate::conformance_suite)
//! with an expression that builds a fresh, empty store (plus a guard that
//! keeps its resources alive); the macro expands to one `#[tokio::test]` per
//! case, so a failure names the case.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use crate::{
    Direction, DocKey, Fields, Index, Op, Precondition, Query, Store, StoreError, StoreExt, Write, transact,
};

/// Indexes the suite's queries need (for adapters that require declared indexes).
pub const INDEXES: &[Index] = &[
    Index { collection: "things", fields: &[("group", Direction::Asc), ("n", Direction::Asc)] },
    Index { collection: "things", fields: &[("group", Direction::Asc), ("n", Direction::Desc)] },
    Index { collection: "things", fields: &[("n", Direction::Asc)] },
];

fn key(id: &str) -> DocKey {
    DocKey::new("things", id).expect("valid key")
}

fn fields(v: Value) -> Fields {
    crate::encode(&v).expect("object")
}

fn ids(docs: &[crate::Document]) -> Vec<String> {
    docs.iter().map(|d| d.key.id().to_owned()).collect()
}

pub async fn create_then_get(s: &dyn Store) {
    let v = s
        .create(&key("a"), fields(json!({"name": "a", "n": 1, "nested": {"x": true}})))
        .await
        .expect("create");
    let doc = s.get_one(&key("a")).await.expect("get").expect("present");
    assert_eq!(doc.fields["name"], "a");
    assert_eq!(doc.fields["nested"]["x"], true);
    assert_eq!(doc.version, v);
    assert!(doc.create_time <= doc.update_time);
    let again = s.create(&key("a"), fields(json!({"name": "other"}))).await;
    assert_eq!(again, Err(StoreError::AlreadyExists(key("a"))));
    let doc2 = s.get_one(&key("a")).await.expect("get").expect("present");
    assert_eq!(doc2.fields["name"], "a", "a refused create must not change the document");
}

pub async fn batch_get_keeps_order_and_reports_absent(s: &dyn Store) {
    s.create(&key("b"), fields(json!({"n": 2}))).await.expect("create");
    let got = s.get(&[key("zz"), key("b"), key("a")], None).await.expect("get");
    assert_eq!(got.len(), 3);
    assert!(got[0].is_none() && got[2].is_none());
    assert_eq!(got[1].as_ref().map(|d| d.key.id()), Some("b"));
}

pub async fn version_preconditions(s: &dyn Store) {
    let v1 = s.create(&key("a"), fields(json!({"n": 1}))).await.expect("create");
    let v2 =
        s.put(&key("a"), fields(json!({"n": 2})), Precondition::Version(v1)).await.expect("update at v1");
    assert_ne!(v1, v2, "every write changes the version");
    let stale = s.put(&key("a"), fields(json!({"n": 3})), Precondition::Version(v1)).await;
    assert_eq!(stale, Err(StoreError::FailedPrecondition(key("a"))));
    let missing = s.put(&key("nope"), fields(json!({"n": 1})), Precondition::Exists).await;
    assert_eq!(missing, Err(StoreError::NotFound(key("nope"))));
    let missing_v = s.put(&key("nope"), fields(json!({"n": 1})), Precondition::Version(v2)).await;
    assert_eq!(missing_v, Err(StoreError::NotFound(key("nope"))));
    s.put(&key("a"), fields(json!({"n": 4})), Precondition::Exists).await.expect("exists");
    let doc = s.get_one(&key("a")).await.expect("get").expect("present");
    assert_eq!(doc.fields["n"], 4);
    assert!(doc.create_time <= doc.update_time);
}

pub async fn replace_keeps_create_time(s: &dyn Store) {
    s.create(&key("a"), fields(json!({"n": 1, "old": true}))).await.expect("create");
    let before = s.get_one(&key("a")).await.expect("get").expect("present");
    s.put(&key("a"), fields(json!({"n": 2})), Precondition::None).await.expect("replace");
    let after = s.get_one(&key("a")).await.expect("get").expect("present");
    assert_eq!(after.create_time, before.create_time);
    assert!(!after.fields.contains_key("old"), "put replaces all fields");
}

pub async fn delete_semantics(s: &dyn Store) {
    s.delete(&key("never"), Precondition::None).await.expect("deleting a missing document succeeds");
    assert_eq!(s.delete(&key("never"), Precondition::Exists).await, Err(StoreError::NotFound(key("never"))));
    let v1 = s.create(&key("a"), fields(json!({"n": 1}))).await.expect("create");
    s.put(&key("a"), fields(json!({"n": 2})), Precondition::None).await.expect("update");
    assert_eq!(
        s.delete(&key("a"), Precondition::Version(v1)).await,
        Err(StoreError::FailedPrecondition(key("a")))
    );
    s.delete(&key("a"), Precondition::Exists).await.expect("delete");
    assert!(s.get_one(&key("a")).await.expect("get").is_none());
    s.create(&key("a"), fields(json!({"n": 9}))).await.expect("a deleted id can be created again");
}

pub async fn commits_are_atomic(s: &dyn Store) {
    s.create(&key("b"), fields(json!({"n": 2}))).await.expect("create");
    let writes = [
        Write::Put { key: key("a"), fields: fields(json!({"n": 1})), precondition: Precondition::Absent },
        Write::Put { key: key("b"), fields: fields(json!({"n": 3})), precondition: Precondition::Absent },
    ];
    assert_eq!(s.commit(None, &writes).await, Err(StoreError::AlreadyExists(key("b"))));
    assert!(s.get_one(&key("a")).await.expect("get").is_none(), "a failed commit writes nothing");
    let dup = [
        Write::Put { key: key("c"), fields: fields(json!({})), precondition: Precondition::None },
        Write::Delete { key: key("c"), precondition: Precondition::None },
    ];
    assert!(matches!(s.commit(None, &dup).await, Err(StoreError::InvalidArgument(_))));
}

async fn seed_things(s: &dyn Store) {
    let rows = [
        ("t1", json!({"group": "a", "n": 3, "label": "x"})),
        ("t2", json!({"group": "a", "n": 1})),
        ("t3", json!({"group": "b", "n": 2})),
        ("t4", json!({"group": "a", "n": 2, "meta": {"tier": "gold"}})),
        ("t5", json!({"group": "a"})),
        ("t6", json!({"group": "a", "n": "2"})),
        ("t7", json!({"group": "a", "n": 2, "tags": ["blue", "red"]})),
        ("t8", json!({"group": "c", "tags": ["red", 2, true]})),
        ("t9", json!({"group": "c", "tags": "red"})),
    ];
    for (id, v) in rows {
        s.create(&key(id), fields(v)).await.expect("seed");
    }
}

pub async fn query_filters_and_orders(s: &dyn Store) {
    seed_things(s).await;
    let q = Query::new("things").filter("group", Op::Eq, "a").order_by("n", Direction::Asc);
    let got = s.query(&q, None).await.expect("query");
    // t5 lacks `n`: excluded. Numbers sort before strings (t6's "2").
    assert_eq!(ids(&got), ["t2", "t4", "t7", "t1", "t6"]);
    let desc = Query::new("things").filter("group", Op::Eq, "a").order_by("n", Direction::Desc);
    // Ties (t4, t7 at n=2) go by id in the direction of the last order.
    assert_eq!(ids(&s.query(&desc, None).await.expect("query")), ["t6", "t1", "t7", "t4", "t2"]);
    let range =
        Query::new("things").filter("n", Op::Ge, 2).filter("n", Op::Lt, 3).order_by("n", Direction::Asc);
    assert_eq!(ids(&s.query(&range, None).await.expect("query")), ["t3", "t4", "t7"], "numbers only");
    let text = Query::new("things").filter("n", Op::Eq, "2");
    assert_eq!(ids(&s.query(&text, None).await.expect("query")), ["t6"], "\"2\" is not 2");
    let nested = Query::new("things").filter("meta.tier", Op::Eq, "gold");
    assert_eq!(ids(&s.query(&nested, None).await.expect("query")), ["t4"]);
    let within = Query::new("things").filter("n", Op::In, json!([1, 3]));
    assert_eq!(ids(&s.query(&within, None).await.expect("query")), ["t1", "t2"]);
    let limited = Query::new("things").filter("group", Op::Eq, "a").order_by("n", Direction::Asc).limit(2);
    assert_eq!(ids(&s.query(&limited, None).await.expect("query")), ["t2", "t4"]);
    let none = Query::new("other").filter("group", Op::Eq, "a");
    assert!(s.query(&none, None).await.expect("query").is_empty(), "collections are separate");
    // `contains`: an element of an array equals the value in its type; a
    // field that is the value itself, not an array holding it, is no match.
    let red = Query::new("things").filter("tags", Op::Contains, "red");
    assert_eq!(ids(&s.query(&red, None).await.expect("query")), ["t7", "t8"]);
    let two = Query::new("things").filter("tags", Op::Contains, 2);
    assert_eq!(ids(&s.query(&two, None).await.expect("query")), ["t8"], "2 is not \"2\"");
    let yes = Query::new("things").filter("tags", Op::Contains, true);
    assert_eq!(ids(&s.query(&yes, None).await.expect("query")), ["t8"]);
    let red_a = red.clone().filter("group", Op::Eq, "a").order_by("n", Direction::Desc);
    assert_eq!(ids(&s.query(&red_a, None).await.expect("query")), ["t7"], "with other filters and an order");
}

pub async fn cursors_page_through_every_document_once(s: &dyn Store) {
    seed_things(s).await;
    for dir in [Direction::Asc, Direction::Desc] {
        let base = Query::new("things").filter("group", Op::Eq, "a").order_by("n", dir);
        let all = ids(&s.query(&base, None).await.expect("query"));
        let mut paged = Vec::new();
        let mut q = base.clone().limit(2);
        loop {
            let page = s.query(&q, None).await.expect("page");
            paged.extend(ids(&page));
            match page.last() {
                Some(last) if page.len() == 2 => {
                    q = base.clone().limit(2).start_after(base.cursor_after(last))
                }
                _ => break,
            }
        }
        assert_eq!(paged, all, "{dir:?}");
    }
}

pub async fn malformed_queries_are_refused(s: &dyn Store) {
    let bad_path = Query::new("things").filter("n; DROP TABLE documents", Op::Eq, 1);
    assert!(matches!(s.query(&bad_path, None).await, Err(StoreError::InvalidArgument(_))));
    let bad_in = Query::new("things").filter("n", Op::In, json!([]));
    assert!(matches!(s.query(&bad_in, None).await, Err(StoreError::InvalidArgument(_))));
    let bad_value = Query::new("things").filter("n", Op::Eq, json!({"x": 1}));
    assert!(matches!(s.query(&bad_value, None).await, Err(StoreError::InvalidArgument(_))));
    let bad_contains = Query::new("things").filter("tags", Op::Contains, json!(["red"]));
    assert!(matches!(s.query(&bad_contains, None).await, Err(StoreError::InvalidArgument(_))));
    let two_contains =
        Query::new("things").filter("tags", Op::Contains, "red").filter("more", Op::Contains, "blue");
    assert!(matches!(s.query(&two_contains, None).await, Err(StoreError::InvalidArgument(_))));
}

async fn increment(s: &dyn Store, runs: &AtomicU32) -> Result<i64, StoreError> {
    transact(s, |mut tx| async move {
        runs.fetch_add(1, Ordering::SeqCst);
        let k = key("counter");
        let n = tx.get(&k).await?.and_then(|d| d.fields.get("n").and_then(Value::as_i64)).unwrap_or(0);
        tx.put(&k, fields(json!({"n": n + 1})), Precondition::None);
        Ok(tx.finish(n + 1))
    })
    .await
}

pub async fn transactions_serialize_concurrent_increments(s: Arc<dyn Store>) {
    let runs = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (s, runs) = (s.clone(), runs.clone());
        tasks.push(tokio::spawn(async move { increment(&*s, &runs).await }));
    }
    let mut results = BTreeSet::new();
    for t in tasks {
        results.insert(t.await.expect("task").expect("increment"));
    }
    assert_eq!(results, (1..=10).collect::<BTreeSet<_>>(), "each increment saw a distinct value");
    let doc = s.get_one(&key("counter")).await.expect("get").expect("present");
    assert_eq!(doc.fields["n"], 10);
    assert!(runs.load(Ordering::SeqCst) >= 10);
}

pub async fn transaction_aborts_when_a_read_document_changed(s: &dyn Store) {
    s.create(&key("a"), fields(json!({"n": 1}))).await.expect("create");
    let id = s.begin().await.expect("begin");
    let doc = s.get(&[key("a")], Some(id)).await.expect("read").pop().flatten().expect("present");
    s.put(&key("a"), fields(json!({"n": 2})), Precondition::None).await.expect("concurrent write");
    let reads = [crate::ReadRecord::Doc { key: key("a"), version: Some(doc.version) }];
    let writes =
        [Write::Put { key: key("a"), fields: fields(json!({"n": 100})), precondition: Precondition::None }];
    assert_eq!(s.commit(Some((id, &reads)), &writes).await, Err(StoreError::Aborted));
    let now = s.get_one(&key("a")).await.expect("get").expect("present");
    assert_eq!(now.fields["n"], 2, "an aborted transaction writes nothing");
}

pub async fn transaction_aborts_on_a_phantom(s: &dyn Store) {
    let q = Query::new("things").filter("group", Op::Eq, "a");
    let id = s.begin().await.expect("begin");
    let seen = s.query(&q, Some(id)).await.expect("query");
    assert!(seen.is_empty());
    s.create(&key("p"), fields(json!({"group": "a"}))).await.expect("concurrent insert");
    let reads = [crate::ReadRecord::Query { query: q, seen: vec![] }];
    let writes = [Write::Put {
        key: key("summary"),
        fields: fields(json!({"count": 0})),
        precondition: Precondition::None,
    }];
    assert_eq!(s.commit(Some((id, &reads)), &writes).await, Err(StoreError::Aborted));
}

/// A read after a buffered write is a bug of the caller: refused as
/// `Misuse`, naming the read and the write, never rerun (it would fail the
/// same way each time), and nothing is written.
pub async fn transaction_refuses_reads_after_writes(s: &dyn Store) {
    let runs = std::sync::atomic::AtomicU32::new(0);
    let runs_ref = &runs;
    let r: Result<(), StoreError> = transact(s, |mut tx| async move {
        runs_ref.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tx.get(&key("b")).await?;
        tx.put(&key("a"), fields(json!({})), Precondition::None);
        tx.get(&key("b")).await?;
        Ok(tx.finish(()))
    })
    .await;
    let err = r.expect_err("refused");
    assert!(err.is_misuse() && !err.is_transient(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&key("a").to_string()) && text.contains(&key("b").to_string()), "{text}");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1, "not rerun");
    assert!(s.get_one(&key("a")).await.expect("get").is_none(), "the refused transaction wrote nothing");
}

pub async fn transaction_errors_write_nothing(s: &dyn Store) {
    #[derive(Debug, PartialEq)]
    enum AppError {
        Store(StoreError),
        Refused,
    }
    impl From<StoreError> for AppError {
        fn from(e: StoreError) -> Self {
            AppError::Store(e)
        }
    }
    let r: Result<(), AppError> = transact(s, |mut tx| async move {
        let _ = tx.get(&key("a")).await?;
        tx.put(&key("a"), fields(json!({})), Precondition::None);
        Err::<crate::Committable<'_, ()>, _>(AppError::Refused)
    })
    .await;
    assert_eq!(r, Err(AppError::Refused));
    assert!(s.get_one(&key("a")).await.expect("get").is_none());
}

pub async fn increments_create_add_and_combine(s: &dyn Store) {
    let k = key("counter");
    let inc = |field: &str, delta: i64| Write::Increment {
        key: k.clone(),
        field: field.to_owned(),
        delta,
        at_most: None,
    };
    s.commit(None, &[inc("a", 2), inc("b", 5)]).await.expect("two fields of one document in one commit");
    s.commit(None, &[inc("a", 3)]).await.expect("again");
    let doc = s.get_one(&k).await.expect("get").expect("created by the increment");
    assert_eq!((doc.fields["a"].as_i64(), doc.fields["b"].as_i64()), (Some(5), Some(5)));
    s.commit(None, &[inc("a", -5)]).await.expect("decrement");
    assert_eq!(s.get_one(&k).await.expect("get").expect("doc").fields["a"].as_i64(), Some(0));
    let mixed = [
        inc("a", 1),
        Write::Put { key: k.clone(), fields: fields(json!({})), precondition: Precondition::None },
    ];
    assert!(matches!(s.commit(None, &mixed).await, Err(StoreError::InvalidArgument(_))));
}

pub async fn merges_set_fields_keep_the_others_and_join_increments(s: &dyn Store) {
    let k = key("sum");
    let merge = |v: Value| Write::Merge { key: k.clone(), fields: fields(v) };
    let inc = |delta: i64| Write::Increment { key: k.clone(), field: "n".into(), delta, at_most: None };
    s.commit(None, &[merge(json!({"name": "a", "tags": ["x"]})), inc(2)])
        .await
        .expect("a merge and an increment of one absent document in one commit");
    let doc = s.get_one(&k).await.expect("get").expect("created by the merge");
    assert_eq!(doc.fields, fields(json!({"name": "a", "tags": ["x"], "n": 2})));
    s.commit(None, &[inc(3), merge(json!({"name": "b"}))]).await.expect("again, increment first");
    let doc = s.get_one(&k).await.expect("get").expect("doc");
    assert_eq!(doc.fields, fields(json!({"name": "b", "tags": ["x"], "n": 5})), "the other fields are kept");
    let mixed =
        [merge(json!({"name": "c"})), Write::Delete { key: k.clone(), precondition: Precondition::None }];
    assert!(matches!(s.commit(None, &mixed).await, Err(StoreError::InvalidArgument(_))));
    let dotted = merge(json!({"a.b": 1}));
    assert!(matches!(s.commit(None, &[dotted]).await, Err(StoreError::InvalidArgument(_))));
    assert_eq!(
        s.get_one(&k).await.expect("get").expect("doc").fields["name"],
        "b",
        "refused commits wrote nothing"
    );
}

pub async fn guarded_increments_fail_the_whole_commit(s: &dyn Store) {
    let k = key("counter");
    let guarded =
        |delta: i64| Write::Increment { key: k.clone(), field: "n".into(), delta, at_most: Some(10) };
    s.commit(None, &[guarded(10)]).await.expect("exactly at the limit");
    let other =
        Write::Put { key: key("side"), fields: fields(json!({"x": 1})), precondition: Precondition::None };
    let r = s.commit(None, &[other, guarded(1)]).await;
    assert_eq!(r, Err(StoreError::LimitReached { key: k.clone(), field: "n".into() }));
    assert!(s.get_one(&key("side")).await.expect("get").is_none(), "nothing of a refused commit is written");
    s.commit(None, &[guarded(-3)]).await.expect("decrements are never refused");
    assert_eq!(s.get_one(&k).await.expect("get").expect("doc").fields["n"].as_i64(), Some(7));
}

/// A commit refused before it applied changed nothing, and its retry
/// applies it once.
pub async fn a_refused_commit_applies_nothing_and_its_retry_applies_once(s: &dyn Store) {
    let u = crate::unreliable::Unreliable::new(s).refuse_next(1);
    let r = u.create(&key("a"), fields(json!({"n": 1}))).await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert!(s.get_one(&key("a")).await.expect("get").is_none(), "a refused commit wrote nothing");
    u.create(&key("a"), fields(json!({"n": 1}))).await.expect("the retry");
    assert_eq!(s.get_one(&key("a")).await.expect("get").expect("doc").fields["n"], 1);
}

/// A commit whose answer was lost may have applied: a create-only retry
/// tells, answering `AlreadyExists` for the document the lost commit wrote.
pub async fn a_lost_answer_may_have_applied_and_a_create_only_retry_tells(s: &dyn Store) {
    let u = crate::unreliable::Unreliable::new(s).lose_next(1);
    let r = u.create(&key("a"), fields(json!({"n": 7}))).await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert_eq!(u.create(&key("a"), fields(json!({"n": 7}))).await, Err(StoreError::AlreadyExists(key("a"))));
    assert_eq!(s.get_one(&key("a")).await.expect("get").expect("the lost commit applied").fields["n"], 7);
}

/// An increment is never retried alone after a lost answer: the platform
/// writes it with a create-only marker (a ledger entry, an item's marker)
/// in one commit, so the retry is refused whole and the count stays once.
pub async fn a_marked_increment_whose_answer_was_lost_counts_once(s: &dyn Store) {
    let u = crate::unreliable::Unreliable::new(s).lose_next(1);
    let writes = [
        Write::Put {
            key: key("marker"),
            fields: fields(json!({"done": true})),
            precondition: Precondition::Absent,
        },
        Write::Increment { key: key("counter"), field: "n".into(), delta: 1, at_most: None },
    ];
    assert!(matches!(u.commit(None, &writes).await, Err(StoreError::Unavailable(_))));
    assert_eq!(u.commit(None, &writes).await, Err(StoreError::AlreadyExists(key("marker"))));
    let counter = s.get_one(&key("counter")).await.expect("get").expect("counter");
    assert_eq!(counter.fields["n"].as_i64(), Some(1), "counted once");
}

pub async fn racing_guarded_increments_never_pass_the_limit(s: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let w = Write::Increment { key: key("slots"), field: "used".into(), delta: 1, at_most: Some(20) };
            s.commit(None, &[w]).await
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => admitted += 1,
            Err(StoreError::LimitReached { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(admitted, 20);
    assert_eq!(s.get_one(&key("slots")).await.expect("get").expect("doc").fields["used"].as_i64(), Some(20));
}

/// The name of every case, as [`conformance_suite!`](crate::conformance_suite)
/// runs them: an adapter's suite that runs only some of them (because its
/// test server cannot prove the others) checks its lists against this one.
pub const CASES: &[&str] = &[
    "create_then_get",
    "batch_get_keeps_order_and_reports_absent",
    "version_preconditions",
    "replace_keeps_create_time",
    "delete_semantics",
    "commits_are_atomic",
    "query_filters_and_orders",
    "cursors_page_through_every_document_once",
    "malformed_queries_are_refused",
    "transaction_aborts_when_a_read_document_changed",
    "transaction_aborts_on_a_phantom",
    "transaction_refuses_reads_after_writes",
    "transaction_errors_write_nothing",
    "increments_create_add_and_combine",
    "merges_set_fields_keep_the_others_and_join_increments",
    "guarded_increments_fail_the_whole_commit",
    "a_refused_commit_applies_nothing_and_its_retry_applies_once",
    "a_lost_answer_may_have_applied_and_a_create_only_retry_tells",
    "a_marked_increment_whose_answer_was_lost_counts_once",
    "racing_guarded_increments_never_pass_the_limit",
    "transactions_serialize_concurrent_increments",
];

/// Expands to one `#[tokio::test]` per conformance case. `$make` is an
/// expression evaluating to `(guard, store)`; the guard is kept alive for
/// the test (a temporary directory, a child process).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            create_then_get, batch_get_keeps_order_and_reports_absent, version_preconditions,
            replace_keeps_create_time, delete_semantics, commits_are_atomic, query_filters_and_orders,
            cursors_page_through_every_document_once, malformed_queries_are_refused,
            transaction_aborts_when_a_read_document_changed, transaction_aborts_on_a_phantom,
            transaction_refuses_reads_after_writes, transaction_errors_write_nothing,
            increments_create_add_and_combine, merges_set_fields_keep_the_others_and_join_increments,
            guarded_increments_fail_the_whole_commit,
            a_refused_commit_applies_nothing_and_its_retry_applies_once,
            a_lost_answer_may_have_applied_and_a_create_only_retry_tells,
            a_marked_increment_whose_answer_was_lost_counts_once);

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn racing_guarded_increments_never_pass_the_limit() {
            let (_guard, store) = $make;
            let store: std::sync::Arc<dyn $crate::Store> = std::sync::Arc::new(store);
            $crate::conformance::racing_guarded_increments_never_pass_the_limit(store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn transactions_serialize_concurrent_increments() {
            let (_guard, store) = $make;
            let store: std::sync::Arc<dyn $crate::Store> = std::sync::Arc::new(store);
            $crate::conformance::transactions_serialize_concurrent_increments(store).await;
        }
    };
    (@cases $make:expr; $($case:ident),+) => {
        /// The cases expanded here are exactly [`CASES`](crate::conformance::CASES).
        #[test]
        fn conformance_cases_are_the_listed_ones() {
            let mut ran = vec![
                $(stringify!($case),)+
                "racing_guarded_increments_never_pass_the_limit",
                "transactions_serialize_concurrent_increments",
            ];
            let mut listed = $crate::conformance::CASES.to_vec();
            ran.sort_unstable();
            listed.sort_unstable();
            assert_eq!(ran, listed);
        }

        $(
            #[tokio::test]
            async fn $case() {
                let (_guard, store) = $make;
                $crate::conformance::$case(&store).await;
            }
        )+
    };
}
