//! Builds the application from a configuration and runs it until shutdown.
//! Tests use the same wiring: build with `server.listen = 127.0.0.1:0`, read
//! [`Application::port`], run in the background.

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;
use std::time::Duration;

use crate::authz::Permissions;
use crate::batch::MergeQueue;
use crate::clients::approval::ApprovalClient;
use crate::clients::gitlab::{GitLabClient, RetryPolicy};
use crate::clients::health::{Dependencies, System};
use crate::clients::http::{Outbound, ProxyRules, SystemClient, Trust};
use crate::config::LiveConfig;
use crate::config::projects::Projects;
use crate::db::lease_owners::{self, Owners};
use crate::db::{self, Backend, DbSlot};
use crate::http;
use crate::http::layers::limiter::SlidingWindow;
use crate::http::ops::ReadinessLog;
use crate::identity::keys::KeyCache;
use crate::instance::Instance;
use crate::jobs::progress::ProgressGauges;
use crate::jobs::{self, Outcome};
use crate::observer::{Observer, PrometheusObserver};
use crate::sealing::KeyRing;
use crate::state::{App, AppState};
use crate::store::SubmissionQueue;
use crate::telemetry;
use crate::webhooks::worker::{Deliverer, http_client};
use crate::workflow::{Executor, Steps, Workflow};

/// Rate limits count requests per minute.
const RATE_LIMIT_WINDOW: Duration = Duration::from_secs(60);
/// How often the progress gauges are read from the database.
const PROGRESS_GAUGES_INTERVAL: Duration = Duration::from_secs(60);

/// The parts of an application that tests may replace.
pub struct Parts {
    /// What the workers run for accepted operations; `None`: the workflow.
    pub steps: Option<Arc<dyn Steps>>,
    /// Where API and business metrics go.
    pub observer: Arc<dyn Observer>,
}

impl Default for Parts {
    fn default() -> Self {
        Self {
            steps: None,
            observer: Arc::new(PrometheusObserver::default()),
        }
    }
}

/// A bound, ready-to-run changegate.
pub struct Application {
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
    workers: JoinSet<()>,
    instance: Instance,
}

impl Application {
    /// Binds the listener, opens the database and starts the background work.
    ///
    /// SQLite is opened before this returns: a problem with the file is a
    /// configuration mistake and stops start-up. MySQL is opened in the
    /// background with retries, so the service starts (not ready) even when
    /// the server is down or the database does not exist yet.
    pub async fn build(config: LiveConfig) -> anyhow::Result<Self> {
        Self::build_with(config, Parts::default()).await
    }

    /// [`Application::build`] with replaceable parts (tests pass their own).
    pub async fn build_with(config: LiveConfig, parts: Parts) -> anyhow::Result<Self> {
        let metrics = telemetry::metrics_handle();
        let settings = config.current();
        let listener = TcpListener::bind(settings.server.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.server.listen))?;
        let shutdown = CancellationToken::new();
        let mut workers = JoinSet::new();
        let instance = Instance::serving_on(listener.local_addr()?.port());

        let db = match Backend::of_url(&settings.database.url) {
            Some(Backend::Sqlite) => DbSlot::ready(db::open(&settings.database).await?),
            _ => {
                let slot = DbSlot::default();
                workers.spawn(db::connect_until_ready(
                    settings.database.clone(),
                    slot.clone(),
                    shutdown.child_token(),
                ));
                if let Some(nodes) = db::failover::Nodes::configured(&settings.database) {
                    workers.spawn(db::failover::watch(
                        slot.clone(),
                        nodes,
                        shutdown.child_token(),
                    ));
                }
                slot
            }
        };

        let watched = config.clone();
        let watch_shutdown = shutdown.child_token();
        workers.spawn(async move {
            if let Err(err) = crate::config::watch(watched, watch_shutdown).await {
                tracing::error!("config file watch stopped; changes need a restart: {err:#}");
            }
        });

        let sealing = crate::webhooks::sealed::key_ring(&settings)?.map(Arc::new);
        let outbound = Outbound::new(
            Trust::load(settings.tls.ca_file.as_deref())?,
            ProxyRules::from_env(),
        );
        let dependencies = Dependencies::default();
        let timeout =
            |seconds| move |b: reqwest::ClientBuilder| b.timeout(Duration::from_secs(seconds));
        let gitlab = GitLabClient::new(
            SystemClient::new(&outbound, &dependencies, System::GitLab, timeout(300))?,
            &settings.gitlab.base_url,
            settings.gitlab.timeout,
            RetryPolicy::default(),
        );
        let workflow = Workflow::new(
            db.clone(),
            config.clone(),
            ApprovalClient::new(SystemClient::new(
                &outbound,
                &dependencies,
                System::Approval,
                timeout(300),
            )?),
            gitlab.clone(),
        )
        .owned_by(&instance.owner("w"));
        let merge_queue = MergeQueue::new(db.clone(), config.clone(), workflow.clone())
            .owned_by(&instance.owner("q"));
        workers.spawn(take_over_earlier_life(
            db.clone(),
            instance.clone(),
            shutdown.child_token(),
        ));
        let executor = Executor::start(
            settings.executor.workers,
            settings.executor.queue_capacity,
            parts.steps.unwrap_or_else(|| Arc::new(workflow)),
            shutdown.child_token(),
            &mut workers,
        );
        let limiter = Arc::new(SlidingWindow::new(RATE_LIMIT_WINDOW));
        spawn_jobs(
            &mut workers,
            &shutdown,
            JobParts {
                limiter: &limiter,
                db: &db,
                executor: &executor,
                merge_queue: &merge_queue,
                gitlab: &gitlab,
                config: &config,
                step_owner: instance.owner("w"),
                retention_owner: instance.owner("r"),
            },
            JobIntervals {
                dispatch: settings.executor.poll_interval,
                idempotency_cleanup: settings.idempotency.cleanup_interval,
                reconcile: settings.reconcile.interval,
                retention: settings.retention.interval,
            },
        );
        spawn_webhook_jobs(
            &mut workers,
            &shutdown,
            &db,
            &config,
            http_client(
                &outbound,
                &dependencies,
                settings.webhooks.allow_private_targets,
            )?,
            sealing.clone(),
            instance.owner("h"),
        );

        // Each fetch has its own, shorter timeout (identity::keys).
        let identity_keys = KeyCache::new(SystemClient::new(
            &outbound,
            &dependencies,
            System::Identity,
            timeout(30),
        )?);
        workers.spawn(
            identity_keys
                .clone()
                .keep_fresh(config.clone(), shutdown.child_token()),
        );
        let state = AppState::new(App {
            config,
            db,
            metrics,
            observer: parts.observer,
            limiter,
            permissions: Permissions::new(SystemClient::new(
                &outbound,
                &dependencies,
                System::Authz,
                timeout(300),
            )?),
            identity_keys,
            gitlab,
            dependencies,
            executor,
            merge_queue,
            // Two groups at a time: SQLite's one writer writes one group
            // while the next reads its relations.
            submissions: SubmissionQueue::start(),
            sealing,
            readiness: ReadinessLog::default(),
        });
        Ok(Self {
            listener,
            state,
            shutdown,
            workers,
            instance,
        })
    }

    /// The bound port (useful when listening on port 0).
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |addr| addr.port())
    }

    /// Cancelling this token starts a graceful shutdown.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The shared state (database slot, configuration) this application runs with.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until the shutdown token is cancelled, then stops accepting,
    /// gives in-flight requests and workers `server.shutdown_timeout` to finish,
    /// and closes the database.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let Self {
            listener,
            state,
            shutdown,
            mut workers,
            instance,
        } = self;
        let grace = state.config.current().server.shutdown_timeout;
        let db = state.db.clone();
        tracing::info!(address = %listener.local_addr()?, "changegate listening");

        let app = http::router(state).into_make_service_with_connect_info::<SocketAddr>();
        let mut server = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                .into_future(),
        );
        tokio::select! {
            result = &mut server => {
                shutdown.cancel();
                result??;
            }
            () = shutdown.cancelled() => {
                tracing::info!("shutting down");
                match tokio::time::timeout(grace, &mut server).await {
                    Ok(result) => result??,
                    Err(_) => {
                        tracing::warn!("in-flight requests did not finish within {grace:?}");
                        server.abort();
                    }
                }
            }
        }
        if tokio::time::timeout(grace, async {
            while workers.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            tracing::warn!("background workers did not stop within {grace:?}");
            workers.abort_all();
        }
        if let Some(db) = db.get() {
            // Nothing of this run works any more: what it still holds (a
            // step cut off by the grace period) is free for others at once.
            let this_run = Owners {
                prefix: &instance.life_prefix(),
                keep: None,
            };
            match lease_owners::release(db, &this_run).await {
                Ok(released) if released.any() => {
                    tracing::info!(?released, "released this instance's leases");
                }
                Ok(_) => {}
                Err(err) => tracing::warn!("cannot release this instance's leases: {err}"),
            }
            db.close().await;
        }
        Ok(())
    }
}

/// Once the database is ready, releases the leases an earlier run of this
/// instance (same seat, another life) left when it died, so their work
/// goes on now instead of when they run out.
async fn take_over_earlier_life(db: DbSlot, instance: Instance, shutdown: CancellationToken) {
    let db = loop {
        if let Some(db) = db.get() {
            break db.clone();
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    };
    let (seat, life) = (instance.seat_prefix(), instance.life_prefix());
    let earlier = Owners {
        prefix: &seat,
        keep: Some(&life),
    };
    match lease_owners::release(&db, &earlier).await {
        Ok(released) if released.any() => {
            tracing::info!(
                ?released,
                "took over the leases an earlier run of this instance left"
            );
        }
        Ok(_) => {}
        Err(err) => tracing::warn!("cannot release an earlier run's leases: {err}"),
    }
}

/// How often the configurable background jobs run.
struct JobIntervals {
    dispatch: Duration,
    idempotency_cleanup: Duration,
    reconcile: Duration,
    retention: Duration,
}

/// What the background jobs work on.
struct JobParts<'a> {
    limiter: &'a Arc<SlidingWindow>,
    db: &'a DbSlot,
    executor: &'a Executor,
    merge_queue: &'a MergeQueue,
    gitlab: &'a GitLabClient,
    config: &'a LiveConfig,
    /// The workers' step lease id.
    step_owner: String,
    /// This instance's id on the retention job's lease.
    retention_owner: String,
}

/// Starts the background jobs: idle rate-limit keys, due operations, the
/// merge queue, lost deploy callbacks, expired bindings and expired
/// idempotency records.
fn spawn_jobs(
    workers: &mut JoinSet<()>,
    shutdown: &CancellationToken,
    parts: JobParts<'_>,
    intervals: JobIntervals,
) {
    let JobParts {
        limiter,
        db,
        executor,
        merge_queue,
        gitlab,
        config,
        step_owner,
        retention_owner,
    } = parts;
    workers.spawn(drift_loop(
        db.clone(),
        config.clone(),
        gitlab.clone(),
        retention_owner.clone(),
        shutdown.child_token(),
    ));
    let limiter = limiter.clone();
    workers.spawn(jobs::run_loop(
        "rate_limit_eviction",
        RATE_LIMIT_WINDOW,
        shutdown.child_token(),
        move || {
            let evicted = limiter.evict_idle();
            async move {
                Ok(if evicted == 0 {
                    Outcome::Idle
                } else {
                    Outcome::Worked {
                        done: evicted as u64,
                        full: false,
                    }
                })
            }
        },
    ));
    let (progress_db, gauges) = (
        db.clone(),
        Arc::new(tokio::sync::Mutex::new(ProgressGauges::default())),
    );
    workers.spawn(jobs::run_loop(
        "progress_gauges",
        PROGRESS_GAUGES_INTERVAL,
        shutdown.child_token(),
        move || {
            let (db, gauges) = (progress_db.get().cloned(), gauges.clone());
            async move {
                match db {
                    Some(db) => gauges.lock().await.round(&db).await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
    let (dispatch_db, dispatch_executor) = (db.clone(), executor.clone());
    workers.spawn(jobs::run_loop(
        "dispatch_due",
        intervals.dispatch,
        shutdown.child_token(),
        move || {
            let (db, executor) = (dispatch_db.get().cloned(), dispatch_executor.clone());
            let owner = step_owner.clone();
            async move {
                match db {
                    Some(db) => jobs::dispatch::run_once(&db, &executor, &owner).await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
    workers.spawn(merge_queue_loop(
        merge_queue.clone(),
        intervals.dispatch,
        shutdown.child_token(),
    ));
    let (reconcile_db, reconcile_config) = (db.clone(), config.clone());
    workers.spawn(jobs::run_loop(
        "reconcile_deploys",
        intervals.reconcile,
        shutdown.child_token(),
        move || {
            let (db, settings) = (reconcile_db.get().cloned(), reconcile_config.current());
            async move {
                match db {
                    Some(db) => {
                        let window = &settings.reconcile;
                        let projects = Projects::of(&settings);
                        jobs::reconcile::run_once(&db, &projects, window.min_age, window.max_age)
                            .await
                    }
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
    let (expiry_db, expiry_executor) = (db.clone(), executor.clone());
    workers.spawn(jobs::run_loop(
        "binding_expiry",
        Duration::from_secs(60),
        shutdown.child_token(),
        move || {
            let (db, executor) = (expiry_db.get().cloned(), expiry_executor.clone());
            async move {
                match db {
                    Some(db) => jobs::expiry::run_once(&db, &executor).await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
    let idempotency_db = db.clone();
    workers.spawn(jobs::run_loop(
        "idempotency_cleanup",
        intervals.idempotency_cleanup,
        shutdown.child_token(),
        move || {
            let db = idempotency_db.get().cloned();
            async move {
                match db {
                    Some(db) => jobs::idempotency_cleanup::run_once(&db).await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
    let (retention_db, retention_config) = (db.clone(), config.clone());
    workers.spawn(jobs::run_loop(
        "retention",
        intervals.retention,
        shutdown.child_token(),
        move || {
            let db = retention_db.get().cloned();
            let settings = retention_config.current();
            let owner = retention_owner.clone();
            async move {
                match db {
                    Some(db) => jobs::retention::run_once(&db, &settings.retention, &owner).await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
}

/// Starts the webhook relay (outbox to deliveries) and this instance's
/// delivery worker, both every `webhooks.poll_interval`.
fn spawn_webhook_jobs(
    workers: &mut JoinSet<()>,
    shutdown: &CancellationToken,
    db: &DbSlot,
    config: &LiveConfig,
    client: SystemClient,
    keys: Option<Arc<KeyRing>>,
    owner: String,
) {
    let interval = config.current().webhooks.poll_interval;
    let (relay_db, relay_config) = (db.clone(), config.clone());
    workers.spawn(jobs::run_loop(
        "webhook_relay",
        interval,
        shutdown.child_token(),
        move || {
            let db = relay_db.get().cloned();
            let silent = relay_config.current().webhooks_silent;
            async move {
                match db {
                    Some(db) => crate::webhooks::relay::run_once(&db, silent).await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
    // Once the database is reachable: the secrets sealed, then the worker
    // (none without keys: nothing could be signed).
    let worker: Arc<tokio::sync::OnceCell<Option<Deliverer>>> = Arc::default();
    let (slot, config) = (db.clone(), config.clone());
    workers.spawn(jobs::run_loop(
        "webhook_delivery",
        interval,
        shutdown.child_token(),
        move || {
            let (slot, config, client) = (slot.clone(), config.clone(), client.clone());
            let (worker, keys, owner) = (worker.clone(), keys.clone(), owner.clone());
            async move {
                let Some(db) = slot.get().cloned() else {
                    return Ok(Outcome::Idle);
                };
                let deliverer = worker
                    .get_or_try_init(|| async {
                        crate::webhooks::sealed::prepare(&db, keys.as_deref()).await?;
                        Ok::<_, sqlx::Error>(keys.map(|keys| {
                            Deliverer::owned_by(db.clone(), config, client, keys, owner)
                        }))
                    })
                    .await?;
                match deliverer {
                    Some(deliverer) => deliverer.run_once().await,
                    None => Ok(Outcome::Idle),
                }
            }
        },
    ));
}

/// The merge queue's scheduler: drives running batches every `tick`, and
/// claims a new batch every `batch.interval` (read live each time).
/// The drift job, every `drift.interval` as the configuration says now
/// (`0`: off until a reload sets one), under its job lease. The first pass
/// waits one interval: an instance that starts adds no GitLab calls at once.
/// Between passes the metric is read again from what is recorded, so a new
/// instance exports it soon after it starts.
async fn drift_loop(
    db: DbSlot,
    config: LiveConfig,
    gitlab: GitLabClient,
    owner: String,
    shutdown: CancellationToken,
) {
    /// How often the metric is refreshed, and a switched-off job looks
    /// whether a reload switched it on.
    const REFRESH: Duration = Duration::from_secs(15);
    let mut next_pass = tokio::time::Instant::now() + config.current().drift.interval;
    loop {
        let interval = config.current().drift.interval;
        let pause = if interval.is_zero() {
            REFRESH
        } else {
            REFRESH.min(interval)
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        let settings = config.current();
        let (false, Some(db)) = (settings.drift.interval.is_zero(), db.get()) else {
            continue;
        };
        let round = if tokio::time::Instant::now() >= next_pass {
            next_pass = tokio::time::Instant::now() + settings.drift.interval;
            crate::drift::run_once(db, &settings, &gitlab, &owner)
                .await
                .map(drop)
        } else {
            crate::drift::export_counts(db, &settings).await
        };
        if let Err(err) = round {
            tracing::warn!(job = "drift", "round failed: {err:#}");
        }
    }
}

async fn merge_queue_loop(queue: MergeQueue, tick: Duration, shutdown: CancellationToken) {
    let mut last_claim: Option<tokio::time::Instant> = None;
    loop {
        let interval = queue.interval();
        if queue.pace_allows() || last_claim.is_none_or(|at| at.elapsed() >= interval) {
            last_claim = Some(tokio::time::Instant::now());
            match queue.claim_round().await {
                Ok(_) | Err(crate::batch::ClaimError::NotNow(_)) => {}
                Err(err) => {
                    crate::batch::count_round_failure("claim");
                    tracing::warn!(job = "merge_queue", "claim failed: {err:#}");
                }
            }
        }
        if let Err(err) = queue.drive_round().await {
            crate::batch::count_round_failure("drive");
            tracing::warn!(job = "merge_queue", "driving batches failed: {err:#}");
        }
        let pause = queue
            .until_pace_allows()
            .map_or(tick, |until| tick.min(until))
            .min(interval);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}
