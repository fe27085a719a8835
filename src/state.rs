//! The state every handler and worker shares.

use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::LiveConfig;
use crate::db::DbSlot;

/// Cheap to clone; extracted by handlers with `State`.
#[derive(Clone)]
pub struct AppState {
    /// Live configuration snapshot.
    pub config: LiveConfig,
    /// The database, once connected and migrated.
    pub db: DbSlot,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}
