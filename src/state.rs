//! The state every handler and worker shares.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::authz::Permissions;
use crate::config::LiveConfig;
use crate::db::DbSlot;
use crate::http::layers::limiter::SlidingWindow;
use crate::observer::Observer;
use crate::workflow::Executor;

/// Cheap to clone; extracted by handlers with `State`.
#[derive(Clone)]
pub struct AppState {
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
    /// The bounded worker pool.
    pub executor: Executor,
}
