//! The ObjectStore conformance suite, run against every adapter through
//! [`objects_conformance_suite!`](crate::objects_conformance_suite).

use bytes::Bytes;

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

/// Expands to one `#[tokio::test]` per case; `$make` evaluates to `(guard, store)`.
#[macro_export]
macro_rules! objects_conformance_suite {
    ($make:expr) => {
        $crate::objects_conformance_suite!(@cases $make; create_only_writes, generation_preconditions,
            pinned_reads, deletes, listing_by_prefix_in_pages);
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
