//! `mapi bench console`: the web console's runs list over a store of many
//! runs. One run goes through the API and is dispatched on a scripted
//! executor; the store then gets copies of it (each created a millisecond
//! before the last), a console session is made for the dev user, and
//! `GET /console/t/dev/p/default/runs` is timed end to end (the console
//! asks the API over loopback, as it does in a deployment): the first page,
//! pages deep into the history (following each page's `next` link) and the
//! filters. Each answer's size and the store's documents read per page are
//! recorded beside the times.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mapi_executor::scripted::ScriptedExecutor;
use serde::Serialize;

use super::{bench_platform, percentile, sync_name};

/// The figures of one console benchmark.
#[derive(Debug, Serialize)]
pub struct ConsoleReport {
    pub durability: String,
    pub runs: usize,
    /// Pages rendered, over every kind below.
    pub pages: usize,
    pub render_ms_p50: f64,
    pub render_ms_p95: f64,
    pub render_ms_max: f64,
    pub bytes_max: usize,
    pub bytes_p50: usize,
    /// Store documents read per page, the most of any page.
    pub documents_read_max: u64,
    /// p95 of each kind: the first page, pages followed by `next`, filtered first pages.
    pub first_page_ms_p95: f64,
    pub deep_page_ms_p95: f64,
    pub filtered_ms_p95: f64,
    /// How deep the followed pages went (page number of the last, the first page being 1).
    pub deepest_page: usize,
}

type BenchError = Box<dyn std::error::Error>;

/// `runs` runs, the list rendered `pages` times in all.
pub async fn console(
    dir: &std::path::Path,
    runs: usize,
    pages: usize,
    durability: mapi_store::sqlite::Durability,
) -> Result<ConsoleReport, BenchError> {
    let sync = sync_name(durability);
    let executor = Arc::new(ScriptedExecutor::default());
    let platform = bench_platform(dir, sync, false, &[], Some(executor.clone())).await?;
    let id = super::tick::dispatched_run(&platform).await?;
    mapi_embedded::load::copy_dispatched_run(
        &platform.state,
        &*executor,
        &id,
        runs,
        &mapi_entropy::OsEntropy,
    )
    .await?;
    let cookie = session(&platform).await?;
    let counts = platform.state.local.store.clone().ok_or("the embedded store is not SQLite")?;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    let base = format!(
        "{}/console/t/{}/p/{}/runs",
        platform.url, platform.credentials.tenant, platform.credentials.project
    );
    let filters = [
        "?state=running",
        "?method=describe",
        "?class=S",
        "?created_by=dev%40dev.local",
        "?state=running&method=describe",
    ];
    let (mut all, mut first, mut deep, mut filtered) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut sizes, mut docs_max, mut depth) = (Vec::new(), 0u64, 1usize);
    let mut next: Option<String> = None;
    for i in 0..pages {
        let (url, kind) = match i % 4 {
            0 => (base.clone(), 0),
            1 | 2 => match next.clone() {
                Some(n) => (format!("{base}{n}"), 1),
                None => (base.clone(), 0),
            },
            _ => (format!("{base}{}", filters[(i / 4) % filters.len()]), 2),
        };
        let before = counts.counts().documents_read;
        let t = Instant::now();
        let r = http.get(&url).header("cookie", &cookie).send().await?;
        let status = r.status();
        let body = r.text().await?;
        let took = t.elapsed();
        if status != 200 {
            return Err(format!("{url} answered {status}").into());
        }
        docs_max = docs_max.max(counts.counts().documents_read - before);
        sizes.push(body.len());
        all.push(took);
        match kind {
            0 => first.push(took),
            1 => {
                deep.push(took);
                depth += 1;
            }
            _ => filtered.push(took),
        }
        // The followed chain goes on from its own last page; a first page
        // starts it only when it has none (or reached the end).
        if kind == 1 || (kind == 0 && next.is_none()) {
            next = next_link(&body);
        }
    }
    platform.shutdown().await;
    for v in [&mut all, &mut first, &mut deep, &mut filtered] {
        v.sort();
    }
    sizes.sort_unstable();
    Ok(ConsoleReport {
        durability: sync.to_owned(),
        runs,
        pages,
        render_ms_p50: percentile(&all, 0.5),
        render_ms_p95: percentile(&all, 0.95),
        render_ms_max: all.last().map_or(0.0, |d: &Duration| d.as_secs_f64() * 1000.0),
        bytes_max: sizes.last().copied().unwrap_or(0),
        bytes_p50: sizes.get(sizes.len() / 2).copied().unwrap_or(0),
        documents_read_max: docs_max,
        first_page_ms_p95: percentile(&first, 0.95),
        deep_page_ms_p95: percentile(&deep, 0.95),
        filtered_ms_p95: percentile(&filtered, 0.95),
        deepest_page: depth,
    })
}

/// A console session for the dev user, as its `Cookie` header.
async fn session(platform: &mapi_embedded::DevPlatform) -> Result<String, BenchError> {
    let state = &platform.state;
    let secret = mapi_identity::new_console_session()?;
    let now = state.clock.now();
    let user = mapi_domain::UserId::parse(mapi_embedded::DEV_USER)?;
    let doc = mapi_schema::ConsoleSessionDoc {
        hash: state.pepper.hash(&secret),
        user,
        created_at: now,
        expires_at: now + Duration::from_secs(3600),
    };
    mapi_schema::put(&*state.store, &doc).await?;
    Ok(format!("mapi_console={secret}"))
}

/// The query of the page's `rel="next"` link, unescaped.
fn next_link(body: &str) -> Option<String> {
    let at = body.find("rel=\"next\"")?;
    let start = body[..at].rfind("href=\"")? + 6;
    let end = start + body[start..].find('"')?;
    Some(body[start..end].replace("&amp;", "&"))
}
