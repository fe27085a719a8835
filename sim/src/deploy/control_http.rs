//! The control API over HTTP, under `/_sim`: the methods of [`DeployControl`] as JSON
//! routes, so the demo can lose, duplicate or reorder deploy callbacks on demand.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;

use super::{DeployControl, DeployFault, DeployFaultKind, NoticedMerge, ProjectField};
use crate::callback::CallbackDelivery;
use crate::control::{Body, ControlResult, Strikes};

/// The `/_sim` routes.
pub(super) fn router(control: DeployControl) -> Router {
    Router::new()
        .route("/faults", post(inject_fault).delete(clear_faults))
        .route("/callback_url", put(set_callback_url))
        .route("/send_operation_ids", put(set_send_operation_ids))
        .route("/project_field", put(set_project_field))
        .route("/merges", get(list_merges))
        .route("/callbacks", get(list_callbacks))
        .with_state(control)
}

/// Body of `POST /_sim/faults`: `{"kind": "delay", "delay_ms": 800, "times": 2,
/// "probability": 0.5}`.
#[derive(Debug, Deserialize)]
struct InjectFault {
    #[serde(flatten)]
    kind: DeployFaultKind,
    #[serde(flatten)]
    strikes: Strikes,
}

/// `POST /_sim/faults`
async fn inject_fault(
    State(control): State<DeployControl>,
    Body(body): Body<InjectFault>,
) -> ControlResult<StatusCode> {
    let (times, probability) = body.strikes.checked()?;
    let fault = DeployFault::new(body.kind).times(times);
    control.inject(match probability {
        Some(probability) => fault.probability(probability),
        None => fault,
    });
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /_sim/faults`
async fn clear_faults(State(control): State<DeployControl>) -> StatusCode {
    control.clear_faults();
    StatusCode::NO_CONTENT
}

/// Body of `PUT /_sim/callback_url`.
#[derive(Debug, Deserialize)]
struct CallbackUrl {
    url: String,
}

/// `PUT /_sim/callback_url`
async fn set_callback_url(
    State(control): State<DeployControl>,
    Body(body): Body<CallbackUrl>,
) -> StatusCode {
    control.set_callback_url(body.url);
    StatusCode::NO_CONTENT
}

/// Body of `PUT /_sim/send_operation_ids`.
#[derive(Debug, Deserialize)]
struct SendOperationIds {
    send: bool,
}

/// `PUT /_sim/send_operation_ids`
async fn set_send_operation_ids(
    State(control): State<DeployControl>,
    Body(body): Body<SendOperationIds>,
) -> StatusCode {
    control.set_send_operation_ids(body.send);
    StatusCode::NO_CONTENT
}

/// Body of `PUT /_sim/project_field`: `{"field": "path" | "id" | "omitted"}`.
#[derive(Debug, Deserialize)]
struct SetProjectField {
    field: ProjectField,
}

/// `PUT /_sim/project_field`
async fn set_project_field(
    State(control): State<DeployControl>,
    Body(body): Body<SetProjectField>,
) -> StatusCode {
    control.set_project_field(body.field);
    StatusCode::NO_CONTENT
}

/// `GET /_sim/merges`
async fn list_merges(State(control): State<DeployControl>) -> Json<Vec<NoticedMerge>> {
    Json(control.merges())
}

/// `GET /_sim/callbacks`
async fn list_callbacks(State(control): State<DeployControl>) -> Json<Vec<CallbackDelivery>> {
    Json(control.callbacks())
}
