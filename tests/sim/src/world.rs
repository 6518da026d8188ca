//! The world: one platform on the simulated ports, its clock, its agenda
//! of what happens next, and the driver that runs each request to its
//! answer (or to the crash of its process).
//!
//! A step is one thing happening at one virtual instant: a queue delivery,
//! a push, a tick, an execution starting or ending, or a tenant's or an
//! operator's request. After every step the checker reads what the step
//! wrote and checks every invariant.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::BodyExt;
use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{Tier, Timestamp};
use mapi_platform::{AppState, Config, Platform};
use serde_json::Value;
use tower::ServiceExt;

use crate::check::{Checker, Violation};
use crate::executor::SimExecutor;
use crate::faults::{Fault, Faults};
use crate::objects::{MemObjects, SimObjects};
use crate::queue::SimQueue;
use crate::rng::SharedRng;
use crate::signer::SimSigner;
use crate::store::SimStore;
use crate::trace::Trace;

/// How long the workload runs and faults are injected.
pub const WORKLOAD: Duration = Duration::from_secs(3600);
/// How long after the faults stop every run and job must be final.
pub const LIVENESS: Duration = Duration::from_secs(2 * 3600);
/// The faults a seed injects at least: a seed whose hour injected fewer
/// works another hour, up to [`MAX_EXTRA_ROUNDS`] more.
pub const MIN_FAULTS: u64 = 100;
pub const MAX_EXTRA_ROUNDS: u32 = 3;
/// Cloud Scheduler's tick.
pub const TICK_EVERY: Duration = Duration::from_secs(60);
/// A delivery whose handler never answered is tried again after this.
pub const DISPATCH_DEADLINE: Duration = Duration::from_secs(30);
/// Tokio time that passes only when a request waits for nothing but the
/// virtual clock.
const IDLE: Duration = Duration::from_secs(3600);

/// What one seed does.
#[derive(Debug, Clone)]
pub struct Settings {
    pub seed: u64,
    /// Fault rates in per cent of each kind's drawn rate (0: no faults).
    pub intensity: u32,
    /// Print every step of the trace to stderr.
    pub verbose: bool,
    /// `MAPI_TICK_FOLLOW_UP_S`: how soon a tick asks for the next while
    /// work is active.
    pub tick_follow_up_s: u32,
}

/// The follow-up ticks' pace in the fault sweeps: slower than the
/// platform's default (3 s), which costs the sweep 1.7 times its time for
/// the same paths; `a_run_succeeds_within_seconds_of_its_last_event` runs
/// the default.
pub const SWEEP_TICK_FOLLOW_UP_S: u32 = 15;

impl Settings {
    pub fn seed(seed: u64) -> Settings {
        Settings {
            seed,
            intensity: 100,
            verbose: std::env::var_os("MAPI_SIM_VERBOSE").is_some(),
            tick_follow_up_s: SWEEP_TICK_FOLLOW_UP_S,
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// FNV-1a of every step's line: two runs of one seed must agree.
    pub trace_hash: u64,
    pub steps: u64,
    /// Virtual time from the first step to the last.
    pub simulated: Duration,
    pub faults: BTreeMap<Fault, u64>,
    pub violations: Vec<Violation>,
    pub runs: usize,
    pub jobs: usize,
    pub items: usize,
    pub crashes: u64,
    /// For each run that succeeded: how long after its last event was
    /// applied it became `succeeded`.
    pub end_lags: BTreeMap<String, Duration>,
}

impl Report {
    pub fn fault_count(&self) -> u64 {
        self.faults.values().sum()
    }

    /// The one line that replays this seed.
    pub fn replay_line(&self) -> String {
        format!(
            "MAPI_SIM_SEED={} MAPI_SIM_VERBOSE=1 cargo test -p mapi-sim --test sim -- --exact replay --nocapture",
            self.seed
        )
    }
}

/// Something due at a virtual instant.
#[derive(Debug, Clone)]
pub enum Action {
    Work(crate::work::Work),
    Tick,
    Housekeep,
    ExecStart(String),
    ExecEnd(String),
    Push(crate::worker::Push),
}

/// A tenant of the simulation.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: String,
    pub tier: Tier,
    pub owner: String,
    pub token: String,
    pub dataset: Option<String>,
    pub policy: Option<mapi_quota::Policy>,
}

impl Tenant {
    pub fn project_path(&self) -> String {
        format!("/v1/tenants/{}/projects/default", self.id)
    }
}

/// The process died with the request in flight.
#[derive(Debug)]
pub struct Died;

/// The world of one seed.
pub struct World {
    pub settings: Settings,
    pub rng: SharedRng,
    pub faults: Arc<Faults>,
    pub clock: Arc<VirtualClock>,
    pub store: Arc<SimStore>,
    pub data: SimObjects,
    pub boot: SimObjects,
    pub queue: SimQueue,
    pub executor: SimExecutor,
    pub signer: Arc<SimSigner>,
    pub config: Config,
    pub state: AppState,
    pub app: Router,
    pub agenda: BTreeMap<(Timestamp, u64), Action>,
    seq: u64,
    /// The work of started executions, done at their end.
    pub running: BTreeMap<String, Vec<crate::worker::TaskEnd>>,
    /// Workload time lost to clock jumps (the workload's end moves with them).
    pub jumped: Duration,
    /// Hours of work planned after the first (see [`MIN_FAULTS`]).
    pub extra_rounds: u32,
    pub tenants: Vec<Tenant>,
    pub checker: Checker,
    pub trace: Trace,
    pub steps: u64,
    pub crashes: u64,
    pub start: Timestamp,
    /// When each run's last event was applied (a push answered `applied`).
    pub last_applied: BTreeMap<String, Timestamp>,
    rt: tokio::runtime::Runtime,
    _home: tempfile::TempDir,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("seed", &self.settings.seed)
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

/// The operator of the simulation.
pub const OPERATOR: &str = "ops@sim.test";

/// The development issuer of every seed in this process: one RSA key
/// (making one costs more than a seed's whole run), made once.
fn idp(config: &Config) -> mapi_oidc::dev::DevIdp {
    static IDP: OnceLock<(tempfile::TempDir, mapi_oidc::dev::DevIdp)> = OnceLock::new();
    IDP.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory for the issuer's key");
        let issuer = config.session_issuer().expect("the dev profile has an issuer");
        let accounts = config.dev_accounts.iter().map(ToString::to_string).collect();
        let idp =
            mapi_oidc::dev::DevIdp::open(&dir.path().join("idp.der"), issuer, accounts).expect("the issuer");
        (dir, idp)
    })
    .1
    .clone()
}

fn http_client() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(reqwest::Client::new).clone()
}

/// The tenants of every seed: one per tier that runs work.
const TENANTS: &[(&str, Tier)] =
    &[("acme", Tier::Internal), ("beta", Tier::Verified), ("corp", Tier::Public)];

impl World {
    /// A world for `settings`, its platform started on the simulated ports.
    pub fn new(settings: Settings) -> World {
        // One thread, tokio's time paused: the world polls one request at a
        // time and nothing runs behind its back.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let rng = SharedRng::new(settings.seed);
        let faults = Arc::new(Faults::draw(rng.clone(), settings.intensity));
        // Somewhere in the last day of a month, so day and month boundaries pass.
        let ends = ["2026-01-31", "2026-02-28", "2026-06-30", "2026-12-31"];
        let (day, offset) = rng.with(|r| (*r.pick(&ends), r.between(12 * 3600, 86_399)));
        let midnight = Timestamp::parse_rfc3339(&format!("{day}T00:00:00Z")).expect("a date");
        let start = midnight + Duration::from_secs(offset);
        let clock = Arc::new(VirtualClock::new(start));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let home = tempfile::tempdir().expect("a home for the seed");
        let config = config(home.path(), settings.tick_follow_up_s);
        let sqlite = mapi_store::sqlite::SqliteStore::open(
            &home.path().join("mapi.db"),
            dyn_clock.clone(),
            &mapi_platform::indexes(),
            mapi_store::sqlite::Durability::Normal,
        )
        .expect("the store opens");
        let store = Arc::new(SimStore::new(sqlite, faults.clone()));
        let data =
            SimObjects::new(MemObjects::new(mapi_platform::DATA_BUCKET, dyn_clock.clone()), faults.clone());
        let boot = SimObjects::new(
            MemObjects::new(mapi_platform::BOOTSTRAP_BUCKET, dyn_clock.clone()),
            faults.clone(),
        );
        let queue = SimQueue::new(dyn_clock.clone(), faults.clone());
        let executor = SimExecutor::new(dyn_clock.clone(), faults.clone());
        let local = mapi_signer::local::LocalSigner::open(&home.path().join("signer.pem"), true, &[])
            .expect("the bundle signer's key");
        let signer = Arc::new(SimSigner::new(Arc::new(local), faults.clone()));
        let (state, app) = assemble(&Ports {
            config: &config,
            clock: &clock,
            rng: &rng,
            store: &store,
            data: &data,
            boot: &boot,
            queue: &queue,
            executor: &executor,
            signer: &signer,
        });
        World {
            settings,
            rng,
            faults,
            clock,
            store,
            data,
            boot,
            queue,
            executor,
            signer,
            config,
            state,
            app,
            agenda: BTreeMap::new(),
            seq: 0,
            running: BTreeMap::new(),
            jumped: Duration::ZERO,
            extra_rounds: 0,
            tenants: Vec::new(),
            checker: Checker::default(),
            trace: Trace::default(),
            steps: 0,
            crashes: 0,
            start,
            last_applied: BTreeMap::new(),
            rt,
            _home: home,
        }
    }

    /// (Re)starts the process: fresh in-memory state on the same ports.
    pub fn restart(&mut self) {
        let (state, app) = assemble(&self.ports());
        self.state = state;
        self.app = app;
    }

    fn ports(&self) -> Ports<'_> {
        Ports {
            config: &self.config,
            clock: &self.clock,
            rng: &self.rng,
            store: &self.store,
            data: &self.data,
            boot: &self.boot,
            queue: &self.queue,
            executor: &self.executor,
            signer: &self.signer,
        }
    }

    pub fn idp(&self) -> mapi_oidc::dev::DevIdp {
        idp(&self.config)
    }
    /// A fresh ID token of the operator (sessions are short-lived).
    pub fn operator(&self) -> String {
        let ttl = self.config.session_max_lifetime.min(Duration::from_secs(3600));
        self.idp().issue(OPERATOR, &self.config.oidc_audience, ttl, self.now()).expect("an ID token")
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Puts `action` on the agenda at `at` (never before now).
    pub fn at(&mut self, at: Timestamp, action: Action) {
        self.seq += 1;
        self.agenda.insert((at.max(self.now()), self.seq), action);
    }

    pub fn after(&mut self, d: Duration, action: Action) {
        let at = self.now() + d;
        self.at(at, action);
    }

    /// Runs `fut` to its answer on the seed's runtime, or to the crash of
    /// its process (`Err(Died)`). Tokio's time is paused, so a retry's
    /// back-off passes at once; when nothing but the virtual clock can wake
    /// the request, the clock moves to its next sleeper.
    pub fn drive<F: Future>(&self, fut: F) -> Result<F::Output, Died> {
        let (clock, faults, seed) = (self.clock.clone(), self.faults.clone(), self.settings.seed);
        self.rt.block_on(async move {
            // Tokio's paused time reaches this hour only when nothing else
            // can run: every real back-off is shorter.
            let pump = async {
                loop {
                    tokio::time::sleep(IDLE).await;
                    match clock.next_wake() {
                        Some(t) => clock.set(t),
                        None => panic!("seed {seed}: a request hung with nothing to wake it"),
                    }
                }
            };
            tokio::select! {
                biased;
                () = faults.crashed() => Err(Died),
                v = fut => Ok(v),
                () = pump => Err(Died),
            }
        })
    }

    /// One HTTP request to the platform as `token`; `None` when its
    /// process died before answering.
    pub fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&str, Bytes)>,
        headers: &[(&str, String)],
    ) -> Option<(u16, Value)> {
        self.drive(self.request(method, path, token, body, headers)).ok().map(|(s, v, _)| (s, v))
    }

    /// The request, to be driven (alone, or beside another).
    pub fn request(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&str, Bytes)>,
        headers: &[(&str, String)],
    ) -> impl Future<Output = (u16, Value, Option<u64>)> + use<> {
        let mut req =
            Request::builder().method(method).uri(path).header("authorization", format!("Bearer {token}"));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let body = match body {
            Some((content_type, bytes)) => {
                req = req.header("content-type", content_type);
                axum::body::Body::from(bytes)
            }
            None => axum::body::Body::empty(),
        };
        let mut req = req.body(body).expect("a request");
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from(([127, 0, 0, 1], 40_000))));
        let app = self.app.clone();
        async move {
            let resp = app.oneshot(req).await.expect("the router answers");
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let bytes = resp.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), retry_after)
        }
    }

    /// A JSON request.
    pub fn json(&self, method: Method, path: &str, token: &str, body: &Value) -> Option<(u16, Value)> {
        let bytes = Bytes::from(serde_json::to_vec(body).expect("json"));
        self.call(method, path, token, Some(("application/json", bytes)), &[])
    }

    /// The process died: note it and start it again on the same state.
    pub fn died(&mut self, what: &str) {
        self.crashes += 1;
        self.note(format!("crash during {what}"));
        self.restart();
    }

    /// One line of the trace.
    pub fn note(&mut self, line: String) {
        let line = format!("{} {line}", self.now());
        if self.settings.verbose {
            eprintln!("{line}");
        }
        self.trace.add(&line);
    }

    /// The internal token (queue deliveries, pushes, ticks).
    pub fn internal(&self) -> String {
        self.config.secrets.internal_token.clone()
    }

    /// Whether every run and job acknowledged is final.
    pub fn settled(&self) -> bool {
        self.checker.all_final()
    }

    /// Runs the seed: setup, the workload under faults, then the platform
    /// alone until everything is final or the liveness bound passes.
    pub fn run(mut self) -> Report {
        self.setup();
        crate::work::plan(&mut self, 0);
        self.at(self.start + TICK_EVERY, Action::Tick);
        self.at(self.start + Duration::from_secs(600), Action::Housekeep);
        let mut deadline: Option<Timestamp> = None;
        loop {
            let agenda = self.agenda.keys().next().map(|(t, _)| *t);
            let due = self.queue.next_due();
            let next = match (agenda, due) {
                (Some(a), Some(q)) => a.min(q),
                (Some(a), None) => a,
                (None, Some(q)) => q,
                (None, None) => break,
            };
            let workload_end = self.start + WORKLOAD * (1 + self.extra_rounds) + self.jumped;
            if deadline.is_none() && next >= workload_end {
                if self.extra_rounds < MAX_EXTRA_ROUNDS
                    && self.faults.tally().values().sum::<u64>() < MIN_FAULTS
                {
                    // A quiet hour (little work, or hours skipped by clock
                    // jumps) injected too few faults: another hour of work.
                    self.extra_rounds += 1;
                    self.note(format!("too few faults: work round {}", self.extra_rounds + 1));
                    let round = self.extra_rounds;
                    crate::work::plan(&mut self, round);
                    continue;
                }
                self.faults.stop();
                self.note("faults stop".to_owned());
                crate::work::all_clear(&mut self);
                deadline = Some(next.max(workload_end) + LIVENESS);
            }
            if let Some(d) = deadline
                && (self.settled() || next > d)
            {
                break;
            }
            self.clock.set(next);
            if due.is_some_and(|q| agenda.is_none_or(|a| q <= a)) {
                crate::deliver::task(&mut self);
            } else if let Some((key, action)) = self.agenda.pop_first() {
                let _ = key;
                self.act(action);
            }
            for e in self.executor.take_new() {
                self.at(e.starts_at, Action::ExecStart(e.handle.0.clone()));
            }
            self.steps += 1;
            let step = self.steps;
            crate::check::after_step(&mut self, step);
        }
        crate::check::at_end(&mut self);
        let (runs, jobs, items) = self.checker.sizes();
        let end_lags = self.checker.end_lags(&self.last_applied);
        Report {
            seed: self.settings.seed,
            trace_hash: self.trace.hash(),
            steps: self.steps,
            simulated: self.now().since(self.start),
            faults: self.faults.tally(),
            violations: std::mem::take(&mut self.checker.violations),
            runs,
            jobs,
            items,
            crashes: self.crashes,
            end_lags,
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Work(w) => crate::work::act(self, w),
            Action::Tick => {
                crate::deliver::tick(self);
                self.after(TICK_EVERY, Action::Tick);
            }
            Action::Housekeep => {
                crate::deliver::housekeep(self);
                self.after(Duration::from_secs(600), Action::Housekeep);
            }
            Action::ExecStart(h) => crate::worker::start(self, &h),
            Action::ExecEnd(h) => crate::worker::end(self, &h),
            Action::Push(p) => crate::deliver::push(self, p),
        }
    }

    /// Tenants, their owners and tokens, their datasets; the operator's
    /// session; the executor's evidence (which opens the shared tiers).
    fn setup(&mut self) {
        let now = self.now();
        // Setup itself is not under faults: the workload is.
        self.faults.stop();
        for (name, tier) in TENANTS {
            let token = self.rng.with(|r| {
                format!(
                    "mapi_{:016x}{:016x}{:016x}{:016x}",
                    r.next_u64(),
                    r.next_u64(),
                    r.next_u64(),
                    r.next_u64()
                )
            });
            let owner = format!("owner@{name}.test");
            let docs = crate::seed::tenant(&self.state, name, *tier, &owner, &token, now);
            let store = self.store.clone();
            self.drive(async move {
                for (key, fields) in docs {
                    mapi_store::StoreExt::create(&*store, &key, fields).await.expect("seed a tenant");
                }
            })
            .unwrap_or_else(|_| unreachable!("seeding has no crash points"));
            self.tenants.push(Tenant {
                id: (*name).to_owned(),
                tier: *tier,
                owner,
                token,
                dataset: None,
                policy: None,
            });
        }
        let signed_in = self.call(Method::POST, "/v1/sessions", &self.operator(), None, &[]);
        assert_eq!(signed_in.as_ref().map(|(s, _)| *s), Some(200), "the operator signs in: {signed_in:?}");
        let evidence = crate::seed::evidence(&self.executor, now);
        let answer = self.json(
            Method::PUT,
            &format!("/v1/admin/executors/{}/evidence", crate::executor::NAME),
            &self.operator(),
            &evidence,
        );
        assert_eq!(answer.as_ref().map(|(s, _)| *s), Some(200), "evidence: {answer:?}");
        for i in 0..self.tenants.len() {
            let t = self.tenants[i].clone();
            let csv = Bytes::from_static(crate::seed::LONGLEY.as_bytes());
            let path = format!("{}/datasets?name=longley", t.project_path());
            let answer = self.call(Method::POST, &path, &t.token, Some(("text/csv", csv)), &[]);
            match answer {
                Some((201, v)) => self.tenants[i].dataset = v["id"].as_str().map(str::to_owned),
                other => panic!("seed {}: uploading {}'s dataset: {other:?}", self.settings.seed, t.id),
            }
        }
        self.faults.resume();
        self.note("setup done".to_owned());
    }
}

/// The platform's settings for a seed in `home`: fixed secrets, the
/// simulation's operator and accounts, evidence valid for a year.
fn config(home: &std::path::Path, follow_up_s: u32) -> Config {
    let accounts = TENANTS
        .iter()
        .map(|(n, _)| format!("owner@{n}.test"))
        .chain([OPERATOR.to_owned()])
        .collect::<Vec<_>>()
        .join(",");
    let vars: BTreeMap<&str, String> = BTreeMap::from([
        ("MAPI_HOME", home.to_string_lossy().into_owned()),
        ("MAPI_PUBLIC_URL", "http://sim.invalid".to_owned()),
        ("MAPI_INTERNAL_TOKEN", "sim-internal-token-0123456789".to_owned()),
        ("MAPI_TOKEN_PEPPER", "00112233445566778899aabbccddeeff".to_owned()),
        ("MAPI_URL_SIGNING_KEY", "ffeeddccbbaa99887766554433221100".to_owned()),
        ("MAPI_OPERATOR_EMAILS", OPERATOR.to_owned()),
        ("MAPI_DEV_ACCOUNTS", accounts),
        ("MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S", "31536000".to_owned()),
        ("MAPI_TICK_FOLLOW_UP_S", follow_up_s.to_string()),
    ]);
    Config::from_lookup(&|k| vars.get(k).cloned()).expect("the simulation's configuration")
}

/// The ports a process is started on.
struct Ports<'a> {
    config: &'a Config,
    clock: &'a Arc<VirtualClock>,
    rng: &'a SharedRng,
    store: &'a Arc<SimStore>,
    data: &'a SimObjects,
    boot: &'a SimObjects,
    queue: &'a SimQueue,
    executor: &'a SimExecutor,
    signer: &'a Arc<SimSigner>,
}

/// A process on `ports`: the platform's state (its metrics, caches and
/// session verifier new) and every function's routes.
fn assemble(ports: &Ports<'_>) -> (AppState, Router) {
    let config = ports.config;
    let clock: Arc<dyn Clock> = ports.clock.clone();
    let metrics = mapi_metrics::Metrics::new();
    let issuer = config.session_issuer().expect("the dev profile has an issuer");
    let keys = serde_json::to_vec(&idp(config).jwks()).expect("a key set");
    let jwks = mapi_oidc::JwksCache::fixed(&keys, clock.clone()).expect("the issuer's keys");
    let verifier = mapi_oidc::Verifier::new(
        mapi_oidc::VerifierConfig {
            max_lifetime: Some(config.session_max_lifetime),
            ..mapi_oidc::VerifierConfig::new(vec![issuer], config.oidc_audience.clone())
        },
        jwks,
        clock.clone(),
    );
    let platform = Platform {
        config: config.clone(),
        store: ports.store.clone(),
        objects: Arc::new(ports.data.clone()),
        bootstrap: Arc::new(ports.boot.clone()),
        queue: Arc::new(ports.queue.clone()),
        executor: Arc::new(ports.executor.clone()),
        hosting: Arc::new(mapi_platform::Absent { port: "endpoint host" }),
        http: http_client(),
        signer: ports.signer.clone(),
        clock,
        entropy: Arc::new(ports.rng.clone()),
        refusals: mapi_identity::refusals::RefusalLog::new(&metrics),
        metrics,
        pepper: mapi_identity::Pepper::new(config.secrets.token_pepper.clone()),
        sessions: Some(verifier),
        task_invoker: None,
        local: mapi_platform::LocalParts::default(),
        rollups: mapi_platform::RollupsStart::default(),
    };
    let state = AppState(Arc::new(platform));
    let app =
        mapi_embedded::router(&state).layer(axum::extract::DefaultBodyLimit::max(config.max_json_bytes));
    (state, app)
}
