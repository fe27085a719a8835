//! `GET /admin/v1/health/dependencies`: what this instance last saw of the
//! systems it calls. Not part of `/readyz`: an unreachable GitLab must not
//! take every instance out of the load balancer.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use crate::clients::health::DependencyView;
use crate::state::AppState;

/// The answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependenciesView {
    /// GitLab, the approval system, the permission service and the
    /// identity provider, in that order, as seen by the instance that
    /// answers.
    pub dependencies: Vec<DependencyView>,
}

/// Whether the last call to each system succeeded, when, and the last error.
#[utoipa::path(get, path = "/admin/v1/health/dependencies", tag = "admin", operation_id = "get_dependencies",
    responses((status = 200, description = "The last outcome per system", body = DependenciesView)))]
pub async fn get_dependencies(State(state): State<AppState>) -> Json<DependenciesView> {
    Json(DependenciesView {
        dependencies: state.dependencies.report(),
    })
}
