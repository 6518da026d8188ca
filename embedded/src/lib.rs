//! The embedded platform: the whole platform in one process on one port, on
//! the embedded adapters, as `mapi dev` runs it and the test suites start it. It serves all five functions' routes and the local
//! object routes, and runs what Google runs in the cloud: the queue's
//! deliverer (Cloud Tasks), the executor's log forwarder (Cloud Logging
//! sink + Pub/Sub push) and the reconcile tick and the job and run
//! housekeepers (Cloud Scheduler). All three reach the platform over HTTP, like their cloud
//! counterparts, so the handlers are the same in both worlds.
//!
//! Architecture invariant: this crate composes; it decides nothing a
//! function decides (every route here is a function's router, merged).

pub mod load;
mod openapi;

pub use openapi::openapi;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use mapi_access::{Role, Scope};
use mapi_clock::{Clock, SystemClock};
use mapi_domain::{ProjectId, TenantId, UserId};
use mapi_domain::{Residency, TenantStatus, Tier};
use mapi_executor::Executor;
use mapi_executor::local::forward::LogForwarder;
use mapi_executor::local::layout::Command;
use mapi_identity::new_token;
use mapi_objects::ObjectStore;
use mapi_objects::signed::{self, Access};
use mapi_platform::{AppState, Config, Platform, StartError};
use mapi_queue::sqlite::Deliverer;
use mapi_schema::{Doc, MembershipDoc, ProjectDoc, TenantDoc, TokenDoc};
use mapi_store::{Precondition, StoreError, StoreExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The seeded tenant, project and user.
pub const DEV_TENANT: &str = "dev";
pub const DEV_PROJECT: &str = "default";
pub const DEV_USER: &str = "dev@dev.local";

pub use mapi_api::credentials::{Credentials, write_private};

/// A running platform.
#[derive(Debug)]
pub struct DevPlatform {
    pub url: String,
    pub credentials: Credentials,
    pub state: AppState,
    clock: Arc<dyn Clock>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    background: bool,
}

/// Why `mapi dev` could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("cannot seed the development tenant: {0}")]
    Seed(#[from] StoreError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The longest the background loop waits for one tick or housekeeping call.
const BACKGROUND_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// Every route of the platform, as `mapi dev` serves them.
pub fn router(state: &AppState) -> Router {
    let mut app = Router::new()
        .merge(mapi_submit::router(state.clone()))
        .merge(mapi_tasks::router(state.clone()))
        .merge(mapi_push_events::router(state.clone()))
        .merge(mapi_reconcile_tick::router(state.clone()))
        .merge(mapi_meter::router(state.clone()))
        .merge(mapi_admin::router(state.clone()));
    if let Some(local) = &state.local.objects {
        let data: Arc<dyn ObjectStore> = Arc::new(local.data.clone());
        let boot: Arc<dyn ObjectStore> = Arc::new(local.bootstrap.clone());
        app = app.merge(signed::router(
            vec![(data, Access::Signed), (boot, Access::SecretNames)],
            local.signer.clone(),
            state.clock.clone(),
            state.config.max_dataset_bytes,
        ));
    }
    let doc = Arc::new(openapi());
    app.route("/openapi.json", axum::routing::get(move || async move { axum::Json((*doc).clone()) }))
        .fallback(mapi_problem::fallback_not_found)
}

/// The development identity provider, in the dev profile only: it signs in
/// the seeded accounts without a password, which no other deployment may do.
fn dev_idp(state: &AppState) -> Result<Option<Router>, DevError> {
    if state.config.profile != mapi_platform::Profile::Dev || state.config.oidc_issuer.is_some() {
        return Ok(None);
    }
    let Some(issuer) = state.config.session_issuer() else { return Ok(None) };
    let accounts = state.config.dev_accounts.iter().map(ToString::to_string).collect();
    let idp = mapi_oidc::dev::DevIdp::open(&state.config.home.join("dev-idp-key.der"), issuer, accounts)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(Some(mapi_oidc::dev::router(idp, state.config.oidc_audience.clone(), state.clock.clone())))
}

/// Seeds the tenant `dev`, the project `default` and the user's token, and
/// writes the CLI's credentials. A token that is still valid is kept.
async fn seed(platform: &Platform, url: &str) -> Result<Credentials, DevError> {
    let now = platform.clock.now();
    let bad = |e: mapi_domain::IdError| StoreError::InvalidArgument(e.to_string());
    let tenant = TenantId::parse(DEV_TENANT).map_err(bad)?;
    let project = ProjectId::parse(DEV_PROJECT).map_err(bad)?;
    let user = UserId::parse(DEV_USER).map_err(bad)?;
    let store = &*platform.store;
    let t = TenantDoc {
        id: tenant.clone(),
        name: "Development".into(),
        tier: Tier::Internal,
        status: TenantStatus::Active,
        residency: Residency::parse("eu").map_err(StoreError::InvalidArgument)?,
        admin_email: Some(user.clone()),
        status_reason: None,
        created_at: now,
        updated_at: now,
    };
    let p = ProjectDoc {
        tenant: tenant.clone(),
        project: project.clone(),
        name: "Default".into(),
        created_at: now,
    };
    let m = MembershipDoc {
        tenant: tenant.clone(),
        project: None,
        email: user.clone(),
        role: Role::Admin,
        reviewer: false,
        claimed: true,
        created_at: now,
        created_by: user.clone(),
    };
    let seeds = [
        (t.key()?, mapi_store::encode(&t)?),
        (p.key()?, mapi_store::encode(&p)?),
        (m.key()?, mapi_store::encode(&m)?),
    ];
    for (key, fields) in seeds {
        match store.put(&key, fields, Precondition::Absent).await {
            Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let path = platform.credentials_path();
    let existing: Option<Credentials> =
        std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let usable = |t: &TokenDoc| t.revoked_at.is_none() && t.expires_at > now + Duration::from_secs(86_400);
    let kept = match &existing {
        Some(c) => mapi_schema::get::<TokenDoc>(store, &platform.pepper.hash(&c.token))
            .await?
            .filter(usable)
            .map(|_| c.token.clone()),
        None => None,
    };
    let token = match kept {
        Some(t) => t,
        None => {
            let token = new_token().map_err(|e| std::io::Error::other(e.to_string()))?;
            let doc = TokenDoc {
                hash: platform.pepper.hash(&token),
                tenant: tenant.clone(),
                project: project.clone(),
                user,
                name: "mapi dev".into(),
                scopes: vec![Scope::Admin],
                created_at: now,
                expires_at: now + Duration::from_secs(365 * 86_400),
                revoked_at: None,
                revoked_by: None,
                rate_limit_per_minute: None,
                budget: None,
            };
            store.create(&doc.key()?, mapi_store::encode(&doc)?).await?;
            token
        }
    };
    let creds = Credentials { url: url.to_owned(), token, tenant, project };
    write_private(&path, &serde_json::to_vec_pretty(&creds).map_err(std::io::Error::other)?)?;
    Ok(creds)
}

/// How [`DevPlatform::start_with`] starts the platform.
#[derive(Clone, Debug)]
pub struct Options {
    /// Deliver queued tasks, forward events and tick from the start. Without
    /// it nothing moves a run past `queued` until
    /// [`DevPlatform::start_background`] (for measuring or racing the API alone).
    pub background: bool,
    /// The clock every handler reads (a virtual one in tests).
    pub clock: Arc<dyn Clock>,
    /// An executor to use instead of the local-process one (a scripted fake
    /// in tests); the log forwarder still reads the local one's directory.
    pub executor: Option<Arc<dyn Executor>>,
    /// Where ids and nonces take their bytes instead of the operating
    /// system (a seeded source in tests, so a run replays).
    pub entropy: Option<Arc<dyn mapi_entropy::Entropy>>,
    /// Wraps the queue the handlers push to (a wrapper that injects faults
    /// in tests, or another adapter); the embedded deliverer still delivers
    /// the embedded queue.
    pub queue: Option<QueueWrap>,
}

type SharedQueue = Arc<dyn mapi_queue::TaskQueue>;

/// Makes the handlers' queue from the embedded one.
#[derive(Clone)]
pub struct QueueWrap(pub Arc<dyn Fn(SharedQueue) -> SharedQueue + Send + Sync>);

impl std::fmt::Debug for QueueWrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueWrap(..)")
    }
}

impl Default for Options {
    fn default() -> Options {
        Options { background: true, clock: Arc::new(SystemClock), executor: None, queue: None, entropy: None }
    }
}

impl DevPlatform {
    /// Starts the platform on `listener` with `config` and `worker`.
    pub async fn start(
        config: Config,
        listener: TcpListener,
        worker: Command,
    ) -> Result<DevPlatform, DevError> {
        DevPlatform::start_with(config, listener, worker, Options::default()).await
    }

    /// Starts the platform with `options`.
    pub async fn start_with(
        mut config: Config,
        listener: TcpListener,
        worker: Command,
        options: Options,
    ) -> Result<DevPlatform, DevError> {
        let addr = listener.local_addr()?;
        if !config.public_url_set {
            config.public_url = format!("http://{addr}");
        }
        let url = config.public_url.clone();
        let drain = Duration::from_secs(5);
        let clock = options.clock;
        let mut platform = Platform::configured(config, clock.clone(), worker).await?;
        if let Some(executor) = options.executor {
            platform.executor = executor;
        }
        if let Some(entropy) = options.entropy {
            platform.entropy = entropy;
        }
        if let Some(wrap) = options.queue {
            platform.queue = (wrap.0)(platform.queue.clone());
        }
        let credentials = seed(&platform, &url).await?;
        let state = AppState(Arc::new(platform));
        let metrics = state.metrics.clone();
        let build = mapi_runtime::BuildInfo::new(mapi_runtime::ServiceInfo {
            name: "mapi-dev",
            version: env!("CARGO_PKG_VERSION"),
        });
        let mut routes = router(&state);
        if let Some(idp) = dev_idp(&state)? {
            routes = routes.merge(idp);
        }
        // Every body is bounded: routes that take larger ones set their own
        // limit, which the innermost layer keeps.
        let routes = routes.layer(axum::extract::DefaultBodyLimit::max(state.config.max_json_bytes));
        let app = mapi_runtime::instrument(
            routes.merge(mapi_runtime::common_routes(build, metrics.clone())),
            metrics.clone(),
        );

        let guard = state.config.guard;
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn({
            let mut rx = stopped.clone();
            let shutdown = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            async move {
                if let Err(e) = mapi_runtime::serve(listener, app, shutdown, drain, guard).await {
                    tracing::error!(error = %e, "the server failed");
                }
            }
        });
        let mut platform =
            DevPlatform { url, credentials, state, clock, stop, tasks: vec![server], background: false };
        if options.background {
            platform.start_background()?;
        }
        Ok(platform)
    }

    /// Starts what Google runs in the cloud: the queue's deliverer, the
    /// executor's log forwarder and the reconcile tick. Does nothing when
    /// they are running already.
    pub fn start_background(&mut self) -> Result<(), DevError> {
        if self.background {
            return Ok(());
        }
        self.background = true;
        let stopped = self.stop.subscribe();
        let until_stop = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let (state, url, metrics) = (&self.state, &self.url, self.state.metrics.clone());
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(std::io::Error::other)?;
        let internal = state.config.secrets.internal_token.clone();
        if let Some(queue) = &state.local.queue {
            let deliverer = Deliverer::new(
                queue.clone(),
                http.clone(),
                url.clone(),
                Some(internal.clone()),
                metrics.clone(),
            );
            self.tasks.push(tokio::spawn(deliverer.run(until_stop(stopped.clone()))));
        }
        if let Some(executor) = &state.local.executor {
            let forwarder = LogForwarder::new(
                executor.dir(),
                http.clone(),
                format!("{url}{}", mapi_push_events::EVENTS_PATH),
                internal.clone(),
                self.clock.clone(),
            )
            .told_by(executor.new_executions());
            self.tasks.push(tokio::spawn(forwarder.run(until_stop(stopped.clone()))));
        }
        let (tick, clock) = (state.config.tick_interval, state.clock.clone());
        self.tasks.push(tokio::spawn({
            let housekeep = format!("{url}{}", mapi_tasks::housekeep::HOUSEKEEP_PATH);
            let housekeep_runs = format!("{url}{}", mapi_tasks::housekeep_runs::HOUSEKEEP_RUNS_PATH);
            let (url, mut rx) = (format!("{url}{}", mapi_reconcile_tick::TICK_PATH), stopped);
            async move {
                loop {
                    tokio::select! {
                        _ = rx.wait_for(|s| *s) => return,
                        () = clock.sleep_until(clock.now() + tick) => {}
                    }
                    let calls = [
                        (&url, "the reconcile tick"),
                        (&housekeep, "the job housekeeper"),
                        (&housekeep_runs, "the run housekeeper"),
                    ];
                    for (url, what) in calls {
                        // A tick that hangs must not stop every later one: the
                        // request is dropped (and with it the handler), and the
                        // next tick takes the lease once it lapses.
                        let request = http.post(url).bearer_auth(&internal).timeout(BACKGROUND_CALL_TIMEOUT);
                        match request.send().await {
                            Ok(r) if r.status().is_success() => {}
                            Ok(r) => tracing::warn!(status = %r.status(), "{what} failed"),
                            Err(e) => tracing::warn!(error = %e, "{what} failed"),
                        }
                    }
                }
            }
        }));
        Ok(())
    }

    /// Stops accepting requests, drains, and stops the background work.
    /// Executions keep running: a later start finds them.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
