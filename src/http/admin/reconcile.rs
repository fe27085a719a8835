//! `POST /admin/v1/reconcile/run`: closes out lost deploy callbacks now,
//! with the job's own code and window (audited).

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::bodies::{OptionalReason, audited};
use super::ok::OkCode;
use crate::config::projects::Projects;
use crate::db::audit::append_audit;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{AppJson, AuthUser, Database};
use crate::jobs::{Outcome, reconcile};
use crate::state::AppState;
use crate::write_tx;

/// What a reconciliation round did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Reconciled {
    code: OkCode,
    /// How many merged requests it marked VALIDATED.
    validated: u64,
}

/// Runs one reconciliation round.
#[utoipa::path(post, path = "/admin/v1/reconcile/run", tag = "admin", operation_id = "run_reconciliation",
    request_body = OptionalReason,
    responses((status = 200, description = "What the round did", body = Reconciled)))]
pub async fn run(
    State(state): State<AppState>,
    AuthUser(caller): AuthUser,
    Database(db): Database,
    AppJson(body): AppJson<OptionalReason>,
) -> ApiResult<Json<Reconciled>> {
    body.reason()?;
    let settings = state.config.current();
    let window = &settings.reconcile;
    let projects = Projects::of(&settings);
    let validated = match reconcile::run_once(&db, &projects, window.min_age, window.max_age)
        .await
        .map_err(ApiError::internal)?
    {
        Outcome::Idle => 0,
        Outcome::Worked { done, .. } => done,
    };
    let operator = caller.identity.as_str();
    write_tx!(&db, |tx| {
        append_audit(
            tx.db(),
            operator,
            "reconcile.run",
            "deploys",
            &audited(&body, operator),
        )
        .await?;
        Ok::<_, ApiError>(())
    })
    .await?;
    Ok(Json(Reconciled {
        code: OkCode::Ok,
        validated,
    }))
}
