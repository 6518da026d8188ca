//! Scoring statistics: per revision, sharded four ways so concurrent scores
//! rarely write the same document. Each score adds one request (and maybe
//! one error), its latency to a fixed histogram, and its compute time and
//! cost.

use mapi_domain::{ProjectId, TenantId};
use mapi_store::typed::Doc;
use serde::{Deserialize, Serialize};

/// How many documents one revision's statistics are spread over.
pub const SHARDS: u32 = 4;

/// Buckets of the latency histogram: bucket `i` holds latencies up to
/// `0.1 ms × 1.1^i`, so bounds are 10 % apart and a 1.2× difference spans
/// two buckets; the last bucket (past about 55 s) is open.
pub const BUCKETS: usize = 140;

/// The upper bound of bucket `i`, in ms.
pub fn bound_ms(i: usize) -> f64 {
    0.1 * 1.1_f64.powi(i32::try_from(i).unwrap_or(i32::MAX))
}

fn bucket_of(latency_us: u64) -> usize {
    let ms = latency_us as f64 / 1000.0;
    (0..BUCKETS).find(|&i| ms <= bound_ms(i)).unwrap_or(BUCKETS)
}

/// One shard of one revision's statistics. Id: `{endpoint}:{tag}:{shard}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsDoc {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub endpoint: String,
    pub tag: String,
    pub requests: u64,
    pub errors: u64,
    pub compute_ms: u64,
    pub cost_nanos: u64,
    /// Counts per bucket (see [`bound_ms`]) plus one for slower.
    pub latency: Vec<u64>,
}

impl Doc for StatsDoc {
    const COLLECTION: &'static str = "endpoint_stats";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

impl StatsDoc {
    pub fn id_of(endpoint: &str, tag: &str, shard: u32) -> String {
        format!("{endpoint}:{tag}:{shard}")
    }

    pub fn empty(tenant: &TenantId, project: &ProjectId, endpoint: &str, tag: &str, shard: u32) -> StatsDoc {
        StatsDoc {
            id: StatsDoc::id_of(endpoint, tag, shard),
            tenant: tenant.clone(),
            project: project.clone(),
            endpoint: endpoint.to_owned(),
            tag: tag.to_owned(),
            requests: 0,
            errors: 0,
            compute_ms: 0,
            cost_nanos: 0,
            latency: vec![0; BUCKETS + 1],
        }
    }

    /// Adds one score.
    pub fn add(&mut self, error: bool, latency_us: u64, compute_ms: u64, cost_nanos: u64) {
        self.requests += 1;
        self.errors += u64::from(error);
        self.compute_ms += compute_ms;
        self.cost_nanos += cost_nanos;
        let bucket = bucket_of(latency_us);
        if self.latency.len() <= bucket {
            self.latency.resize(BUCKETS + 1, 0);
        }
        self.latency[bucket] += 1;
    }
}

/// Statistics summed over shards (and revisions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub requests: u64,
    pub errors: u64,
    pub compute_ms: u64,
    pub cost_nanos: u64,
    pub latency: Vec<u64>,
}

impl Usage {
    pub fn sum<'a>(docs: impl IntoIterator<Item = &'a StatsDoc>) -> Usage {
        let mut u = Usage { latency: vec![0; BUCKETS + 1], ..Usage::default() };
        for d in docs {
            u.requests += d.requests;
            u.errors += d.errors;
            u.compute_ms += d.compute_ms;
            u.cost_nanos += d.cost_nanos;
            for (a, b) in u.latency.iter_mut().zip(&d.latency) {
                *a += b;
            }
        }
        u
    }

    /// The 99th percentile's bucket bound in ms (an upper estimate); `None` without requests.
    pub fn p99_ms(&self) -> Option<f64> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = total - total / 100;
        let mut seen = 0;
        for (i, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bound_ms(i.min(BUCKETS)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_is_the_bound_of_the_bucket_the_99th_percentile_falls_in() {
        let t = TenantId::parse("acme").expect("tenant");
        let p = ProjectId::parse("default").expect("project");
        let mut d = StatsDoc::empty(&t, &p, "e", "r1", 0);
        for _ in 0..99 {
            d.add(false, 4_000, 4, 1);
        }
        d.add(true, 700_000, 700, 1);
        let u = Usage::sum([&d]);
        assert_eq!((u.requests, u.errors, u.compute_ms), (100, 1, 99 * 4 + 700));
        let p99 = u.p99_ms().expect("a p99");
        assert!((4.0..4.4).contains(&p99), "99 of 100 took 4 ms: the bound within 10 % above, {p99}");
        d.add(true, 700_000, 700, 1);
        let slow = Usage::sum([&d]).p99_ms().expect("a p99");
        assert!((700.0..770.0).contains(&slow), "2 of 101 slow: the 99th percentile is slow, {slow}");
        assert!(bound_ms(BUCKETS) > 50_000.0, "the last bound is past 50 s");
        assert_eq!(Usage::sum([]).p99_ms(), None);
    }
}
