//! The state every handler and worker shares.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::authz::Permissions;
use crate::batch::MergeQueue;
use crate::clients::gitlab::GitLabClient;
use crate::clients::health::Dependencies;
use crate::config::LiveConfig;
use crate::db::DbSlot;
use crate::http::layers::limiter::SlidingWindow;
use crate::http::ops::ReadinessLog;
use crate::identity::keys::KeyCache;
use crate::observer::Observer;
use crate::sealing::KeyRing;
use crate::store::SubmissionQueue;
use crate::workflow::Executor;

/// Cheap to clone (one reference count), as every layer and handler clones
/// it per request; extracted by handlers with `State`, fields reached through
/// `Deref`.
#[derive(Clone)]
pub struct AppState(Arc<App>);

impl AppState {
    /// Shares `app`.
    pub fn new(app: App) -> Self {
        Self(Arc::new(app))
    }
}

impl std::ops::Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

/// What the application shares.
pub struct App {
    /// Live configuration snapshot.
    pub config: LiveConfig,
    /// The database, once connected and migrated.
    pub db: DbSlot,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// Where API and business metrics go.
    pub observer: Arc<dyn Observer>,
    /// The rate limiter of every limited route.
    pub limiter: Arc<SlidingWindow>,
    /// Permission checks.
    pub permissions: Permissions,
    /// The identity provider's signing keys, when one is configured.
    pub identity_keys: KeyCache,
    /// GitLab, for the reads of a preview (the workflow has its own clone).
    pub gitlab: GitLabClient,
    /// What this instance last saw of the systems it calls.
    pub dependencies: Dependencies,
    /// The bounded worker pool.
    pub executor: Executor,
    /// The batch merge queue.
    pub merge_queue: MergeQueue,
    /// Records new requests, in groups under load.
    pub submissions: SubmissionQueue,
    /// Seals webhook signing secrets; `None` on MySQL without `webhooks.secret_key`.
    pub sealing: Option<Arc<KeyRing>>,
    /// What `/readyz` last answered, so changes are logged once.
    pub readiness: ReadinessLog,
}
