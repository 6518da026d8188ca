//! The ObjectStore conformance suite, run against every adapter through
//! [`objects_conformance_suite!`](crate::objects_conformance_suite). The
//! failure cases write through [`Unreliable`], which refuses writes before
//! they apply or loses their answers after, and assert what the port's
//! failure model promises a caller that retries.

use bytes::Bytes;

use crate::unreliable::Unreliable;
use crate::{Generation, IfGeneration, ObjectError, ObjectKey, ObjectStore};

fn key(s: &str) -> ObjectKey {
    ObjectKey::parse(s).expect("valid key")
}

async fn put(
    s: &dyn ObjectStore,
    k: &str,
    body: &'static [u8],
    p: IfGeneration,
) -> Result<Generation, ObjectError> {
    s.put(&key(k), Bytes::from_static(body), "text/plain", p).await.map(|m| m.generation)
}

pub async fn create_only_writes(s: &dyn ObjectStore) {
    let g = put(s, "t/x/a", b"first", IfGeneration::ABSENT).await.expect("create");
    assert!(g.0 > 0);
    let again = put(s, "t/x/a", b"second", IfGeneration::ABSENT).await;
    assert!(matches!(again, Err(ObjectError::PreconditionFailed(_))), "{again:?}");
    let (meta, bytes) = s.get(&key("t/x/a"), None).await.expect("get");
    assert_eq!((&bytes[..], meta.generation, meta.size), (&b"first"[..], g, 5));
    assert_eq!(meta.content_type, "text/plain");
}

pub async fn generation_preconditions(s: &dyn ObjectStore) {
    let g1 = put(s, "t/x/a", b"1", IfGeneration::ABSENT).await.expect("create");
    let g2 = put(s, "t/x/a", b"2", IfGeneration::Match(g1)).await.expect("replace at g1");
    assert_ne!(g1, g2);
    let stale = put(s, "t/x/a", b"3", IfGeneration::Match(g1)).await;
    assert!(matches!(stale, Err(ObjectError::PreconditionFailed(_))));
    let missing = put(s, "t/x/none", b"3", IfGeneration::Match(g2)).await;
    assert!(matches!(missing, Err(ObjectError::PreconditionFailed(_))));
    let g3 = put(s, "t/x/a", b"4", IfGeneration::Any).await.expect("unconditional");
    assert_eq!(s.head(&key("t/x/a")).await.expect("head").generation, g3);
}

pub async fn pinned_reads(s: &dyn ObjectStore) {
    let g1 = put(s, "t/x/a", b"1", IfGeneration::ABSENT).await.expect("create");
    let (_, b1) = s.get(&key("t/x/a"), Some(g1)).await.expect("pinned get");
    assert_eq!(&b1[..], b"1");
    put(s, "t/x/a", b"2", IfGeneration::Match(g1)).await.expect("replace");
    let old = s.get(&key("t/x/a"), Some(g1)).await;
    assert!(matches!(old, Err(ObjectError::NotFound(_))), "a replaced generation is gone");
    assert!(matches!(s.get(&key("t/x/none"), None).await, Err(ObjectError::NotFound(_))));
    assert!(matches!(s.head(&key("t/x/none")).await, Err(ObjectError::NotFound(_))));
}

pub async fn deletes(s: &dyn ObjectStore) {
    assert!(matches!(s.delete(&key("t/x/none"), IfGeneration::Any).await, Err(ObjectError::NotFound(_))));
    let g = put(s, "t/x/a", b"1", IfGeneration::ABSENT).await.expect("create");
    let wrong = s.delete(&key("t/x/a"), IfGeneration::Match(Generation(g.0 + 1000))).await;
    assert!(matches!(wrong, Err(ObjectError::PreconditionFailed(_))));
    s.delete(&key("t/x/a"), IfGeneration::Match(g)).await.expect("delete");
    assert!(matches!(s.get(&key("t/x/a"), None).await, Err(ObjectError::NotFound(_))));
    // Only one of two deleters pinned to the same generation wins.
    let g = put(s, "t/x/b", b"1", IfGeneration::ABSENT).await.expect("create");
    let first = s.delete(&key("t/x/b"), IfGeneration::Match(g)).await;
    let second = s.delete(&key("t/x/b"), IfGeneration::Match(g)).await;
    assert!(first.is_ok() && second.is_err());
}

pub async fn listing_by_prefix_in_pages(s: &dyn ObjectStore) {
    for k in ["t/p/e", "t/p/a", "t/p/c", "t/p/b", "t/p/d", "t/q/a", "t/pp/a"] {
        put(s, k, b"x", IfGeneration::ABSENT).await.expect("put");
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = s.list("t/p/", token.as_deref(), 2).await.expect("list");
        assert!(page.objects.len() <= 2);
        seen.extend(page.objects.iter().map(|m| m.key.to_string()));
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(seen, ["t/p/a", "t/p/b", "t/p/c", "t/p/d", "t/p/e"]);
    assert!(s.list("t/none/", None, 10).await.expect("list").objects.is_empty());
    assert!(matches!(s.list("t/", Some("zz-not-a-token"), 10).await, Err(ObjectError::InvalidArgument(_))));
}

fn unavailable<T: std::fmt::Debug>(r: Result<T, ObjectError>, what: &str) {
    assert!(matches!(r, Err(ObjectError::Unavailable(_))), "{what}: {r:?}");
}

/// The live bytes of `k`, or `None` when there is no live object.
async fn live(s: &dyn ObjectStore, k: &str) -> Option<(Generation, Bytes)> {
    match s.get(&key(k), None).await {
        Ok((meta, bytes)) => Some((meta.generation, bytes)),
        Err(ObjectError::NotFound(_)) => None,
        Err(e) => panic!("get {k}: {e}"),
    }
}

/// A put refused before it reached the bucket wrote nothing, so its
/// create-only retry creates the object, once.
pub async fn a_refused_put_writes_nothing_and_its_retry_creates_once(s: &dyn ObjectStore) {
    let u = Unreliable::new(s).refuse_next(1);
    unavailable(put(&u, "t/x/a", b"once", IfGeneration::ABSENT).await, "refused");
    assert_eq!(live(s, "t/x/a").await, None, "a refused put wrote nothing");
    assert!(s.list("t/x/", None, 10).await.expect("list").objects.is_empty());
    let g = put(&u, "t/x/a", b"once", IfGeneration::ABSENT).await.expect("the retry creates");
    assert_eq!(live(s, "t/x/a").await, Some((g, Bytes::from_static(b"once"))));
    let listed = s.list("t/x/", None, 10).await.expect("list").objects;
    assert_eq!(listed.iter().map(|m| m.generation).collect::<Vec<_>>(), [g], "one object");
}

/// A create-only put whose answer was lost has applied: its retry under the
/// same `ABSENT` answers `PreconditionFailed`, and the stored bytes are the
/// ones sent, which is how a caller that retries create-only tells "I made
/// it" from "another writer did".
pub async fn a_lost_create_only_put_has_applied_and_its_retry_tells_by_the_bytes(s: &dyn ObjectStore) {
    let u = Unreliable::new(s).lose_next(1);
    unavailable(put(&u, "t/x/a", b"first", IfGeneration::ABSENT).await, "lost");
    let retry = put(&u, "t/x/a", b"first", IfGeneration::ABSENT).await;
    assert!(matches!(retry, Err(ObjectError::PreconditionFailed(_))), "the lost put applied: {retry:?}");
    let (_, bytes) = live(s, "t/x/a").await.expect("the lost put's object");
    assert_eq!(&bytes[..], b"first", "the stored bytes are the lost put's: the caller made it");
    let other = put(s, "t/x/b", b"theirs", IfGeneration::ABSENT).await.expect("another writer's object");
    let mine = put(&u, "t/x/b", b"mine", IfGeneration::ABSENT).await;
    assert!(matches!(mine, Err(ObjectError::PreconditionFailed(_))), "{mine:?}");
    assert_eq!(live(s, "t/x/b").await, Some((other, Bytes::from_static(b"theirs"))), "other bytes: not ours");
}

/// A put pinned to generation `g` whose answer was lost has applied: its
/// retry under `Match(g)` answers `PreconditionFailed`, the live object is
/// a newer generation holding the bytes sent.
pub async fn a_lost_pinned_put_has_applied_and_its_retry_is_refused(s: &dyn ObjectStore) {
    let g1 = put(s, "t/x/a", b"1", IfGeneration::ABSENT).await.expect("create");
    let u = Unreliable::new(s).lose_next(1);
    unavailable(put(&u, "t/x/a", b"2", IfGeneration::Match(g1)).await, "lost");
    let retry = put(&u, "t/x/a", b"2", IfGeneration::Match(g1)).await;
    assert!(matches!(retry, Err(ObjectError::PreconditionFailed(_))), "the lost put applied: {retry:?}");
    let (g, bytes) = live(s, "t/x/a").await.expect("live");
    assert!(g != g1 && &bytes[..] == b"2", "the lost put's generation is live: {g:?} {bytes:?}");
}

/// An unconditional put whose answer was lost has applied, and its retry
/// (nothing tells it apart from a new write) writes the object again, under
/// a new generation: the lost one is no longer live.
pub async fn a_lost_unconditional_put_has_applied_and_its_retry_writes_again(s: &dyn ObjectStore) {
    let u = Unreliable::new(s).lose_next(1);
    unavailable(put(&u, "t/x/a", b"v", IfGeneration::Any).await, "lost");
    let (g1, bytes) = live(s, "t/x/a").await.expect("the lost put applied");
    assert_eq!(&bytes[..], b"v");
    let g2 = put(&u, "t/x/a", b"v", IfGeneration::Any).await.expect("the retry writes");
    assert_ne!(g1, g2, "the retry is a new generation");
    assert!(matches!(s.get(&key("t/x/a"), Some(g1)).await, Err(ObjectError::NotFound(_))));
    assert_eq!(live(s, "t/x/a").await, Some((g2, Bytes::from_static(b"v"))));
}

/// A delete refused before it reached the bucket left the object as it
/// was, and its retry deletes it.
pub async fn a_refused_delete_leaves_the_object_and_its_retry_deletes(s: &dyn ObjectStore) {
    let g = put(s, "t/x/a", b"1", IfGeneration::ABSENT).await.expect("create");
    let u = Unreliable::new(s).refuse_next(1);
    unavailable(u.delete(&key("t/x/a"), IfGeneration::Any).await, "refused");
    assert_eq!(
        live(s, "t/x/a").await,
        Some((g, Bytes::from_static(b"1"))),
        "a refused delete deleted nothing"
    );
    u.delete(&key("t/x/a"), IfGeneration::Any).await.expect("the retry deletes");
    assert_eq!(live(s, "t/x/a").await, None);
}

/// A delete whose answer was lost has applied: its retry answers
/// `NotFound`, which a caller that wants the object gone counts as done.
pub async fn a_lost_delete_has_applied_and_its_retry_answers_not_found(s: &dyn ObjectStore) {
    put(s, "t/x/a", b"1", IfGeneration::ABSENT).await.expect("create");
    let u = Unreliable::new(s).lose_next(1);
    unavailable(u.delete(&key("t/x/a"), IfGeneration::Any).await, "lost");
    assert_eq!(live(s, "t/x/a").await, None, "the lost delete applied");
    let retry = u.delete(&key("t/x/a"), IfGeneration::Any).await;
    assert!(matches!(retry, Err(ObjectError::NotFound(_))), "{retry:?}");
}

/// A delete pinned to generation `g` whose answer was lost deleted `g`; its
/// retry deletes at most `g`, so an object written since stays.
pub async fn a_retried_pinned_delete_never_deletes_a_newer_object(s: &dyn ObjectStore) {
    let g1 = put(s, "t/x/a", b"old", IfGeneration::ABSENT).await.expect("create");
    let u = Unreliable::new(s).lose_next(1);
    unavailable(u.delete(&key("t/x/a"), IfGeneration::Match(g1)).await, "lost");
    assert_eq!(live(s, "t/x/a").await, None, "the lost delete applied");
    let g2 = put(s, "t/x/a", b"new", IfGeneration::ABSENT).await.expect("another writer creates it again");
    let retry = u.delete(&key("t/x/a"), IfGeneration::Match(g1)).await;
    assert!(matches!(retry, Err(ObjectError::PreconditionFailed(_))), "{retry:?}");
    assert_eq!(live(s, "t/x/a").await, Some((g2, Bytes::from_static(b"new"))), "the newer object stays");
}

/// Expands to one `#[tokio::test]` per case; `$make` evaluates to `(guard, store)`.
#[macro_export]
macro_rules! objects_conformance_suite {
    ($make:expr) => {
        $crate::objects_conformance_suite!(@cases $make; create_only_writes, generation_preconditions,
            pinned_reads, deletes, listing_by_prefix_in_pages,
            a_refused_put_writes_nothing_and_its_retry_creates_once,
            a_lost_create_only_put_has_applied_and_its_retry_tells_by_the_bytes,
            a_lost_pinned_put_has_applied_and_its_retry_is_refused,
            a_lost_unconditional_put_has_applied_and_its_retry_writes_again,
            a_refused_delete_leaves_the_object_and_its_retry_deletes,
            a_lost_delete_has_applied_and_its_retry_answers_not_found,
            a_retried_pinned_delete_never_deletes_a_newer_object);
    };
    (@cases $make:expr; $($case:ident),+) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (_guard, store) = $make;
                $crate::conformance::$case(&store).await;
            }
        )+
    };
}
