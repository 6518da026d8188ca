//! Scoring statistics: per revision, sharded four ways so concurrent scores
//! rarely write the same document. Each score adds one request (and maybe
//! one error), its latency to a fixed histogram, and its compute time and
//! cost.

use mapi_domain::{ProjectId, TenantId};
use mapi_store::typed::Doc;
use serde::{Deserialize, Serialize};

/// How many documents one revision's statistics are spread over.
pub const SHARDS: u32 = 4;

/// Upper bounds (ms) of the latency histogram's buckets; the last is open.
pub const BUCKETS_MS: &[u64] =
    &[1, 2, 3, 5, 8, 13, 20, 30, 50, 80, 130, 200, 300, 500, 800, 1300, 2000, 3000, 5000, 10_000, 30_000];

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
    /// Counts per bucket of [`BUCKETS_MS`] plus one for slower.
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
            latency: vec![0; BUCKETS_MS.len() + 1],
        }
    }

    /// Adds one score.
    pub fn add(&mut self, error: bool, latency_ms: u64, compute_ms: u64, cost_nanos: u64) {
        self.requests += 1;
        self.errors += u64::from(error);
        self.compute_ms += compute_ms;
        self.cost_nanos += cost_nanos;
        let bucket = BUCKETS_MS.iter().position(|b| latency_ms <= *b).unwrap_or(BUCKETS_MS.len());
        if self.latency.len() <= bucket {
            self.latency.resize(BUCKETS_MS.len() + 1, 0);
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
        let mut u = Usage { latency: vec![0; BUCKETS_MS.len() + 1], ..Usage::default() };
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
                let bound = BUCKETS_MS.get(i).copied().unwrap_or(60_000);
                return Some(bound as f64);
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
            d.add(false, 4, 4, 1);
        }
        d.add(true, 700, 700, 1);
        let u = Usage::sum([&d]);
        assert_eq!((u.requests, u.errors, u.compute_ms), (100, 1, 99 * 4 + 700));
        assert_eq!(u.p99_ms(), Some(5.0), "99 of 100 took at most 5 ms");
        d.add(true, 700, 700, 1);
        assert_eq!(Usage::sum([&d]).p99_ms(), Some(800.0), "2 of 101 slow: the 99th percentile is slow");
        assert_eq!(Usage::sum([]).p99_ms(), None);
    }
}
