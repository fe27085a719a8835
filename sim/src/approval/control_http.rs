//! The control API over HTTP, under `/_sim`: the methods of [`ApprovalControl`] as JSON
//! routes, so the demo (or a person with curl) can decide approvals and inject faults.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use uuid::Uuid;

use super::control::{ApprovalSimError, ApprovalSnapshot, ReceivedRequest};
use super::faults::{ApprovalFault, ApprovalFaultKind};
use super::{ApprovalControl, Decision, DecisionPolicy};
use crate::callback::CallbackDelivery;
use crate::control::{Body, ControlError, ControlResult, Param, Strikes};

/// The `/_sim` routes.
pub(super) fn router(control: ApprovalControl) -> Router {
    Router::new()
        .route("/faults", post(inject_fault).delete(clear_faults))
        .route("/callback_url", put(set_callback_url))
        .route("/policy", put(set_policy))
        .route("/approvals", get(list_approvals))
        .route("/approvals/{operation}", get(get_approval))
        .route("/approvals/{operation}/decision", post(decide))
        .route("/requests", get(list_requests))
        .route("/callbacks", get(list_callbacks))
        .with_state(control)
}

impl From<ApprovalSimError> for ControlError {
    fn from(err: ApprovalSimError) -> Self {
        Self::not_found(err.to_string())
    }
}

/// Body of `POST /_sim/faults`: `{"kind": "duplicate_callback", "operation": "<uuid>",
/// "times": 2, "probability": 0.5}`; without `operation` the fault hits any operation.
#[derive(Debug, Deserialize)]
struct InjectFault {
    operation: Option<Uuid>,
    #[serde(flatten)]
    kind: ApprovalFaultKind,
    #[serde(flatten)]
    strikes: Strikes,
}

/// `POST /_sim/faults`
async fn inject_fault(
    State(control): State<ApprovalControl>,
    Body(body): Body<InjectFault>,
) -> ControlResult<StatusCode> {
    let (times, probability) = body.strikes.checked()?;
    let mut fault = ApprovalFault::new(body.kind).times(times);
    if let Some(operation) = body.operation {
        fault = fault.for_operation(operation);
    }
    if let Some(probability) = probability {
        fault = fault.probability(probability);
    }
    control.inject(fault);
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /_sim/faults`
async fn clear_faults(State(control): State<ApprovalControl>) -> StatusCode {
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
    State(control): State<ApprovalControl>,
    Body(body): Body<CallbackUrl>,
) -> StatusCode {
    control.set_callback_url(body.url);
    StatusCode::NO_CONTENT
}

/// Body of `PUT /_sim/policy`: `{"mode": "manual"}` or
/// `{"mode": "auto", "result": "APPROVED", "delay_ms": 50}`.
#[derive(Debug, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
enum Policy {
    Auto {
        result: Decision,
        #[serde(default)]
        delay_ms: u64,
    },
    Manual,
}

/// `PUT /_sim/policy`: how approvals created from now on are decided.
async fn set_policy(
    State(control): State<ApprovalControl>,
    Body(body): Body<Policy>,
) -> StatusCode {
    control.set_policy(match body {
        Policy::Auto { result, delay_ms } => DecisionPolicy::Auto {
            result,
            delay: Duration::from_millis(delay_ms),
        },
        Policy::Manual => DecisionPolicy::Manual,
    });
    StatusCode::NO_CONTENT
}

/// `GET /_sim/approvals`
async fn list_approvals(State(control): State<ApprovalControl>) -> Json<Vec<ApprovalSnapshot>> {
    Json(control.approvals())
}

/// `GET /_sim/approvals/{operation}`
async fn get_approval(
    State(control): State<ApprovalControl>,
    Param(operation): Param<Uuid>,
) -> ControlResult<Json<ApprovalSnapshot>> {
    let approval = control.approval(operation);
    let approval = approval.ok_or(ApprovalSimError::UnknownOperation(operation))?;
    Ok(Json(approval))
}

/// Body of `POST /_sim/approvals/{operation}/decision`.
#[derive(Debug, Deserialize)]
struct Decide {
    result: Decision,
}

/// `POST /_sim/approvals/{operation}/decision`: answers once every delivery attempt has been
/// answered, with the attempts (and so with changegate's answers).
async fn decide(
    State(control): State<ApprovalControl>,
    Param(operation): Param<Uuid>,
    Body(body): Body<Decide>,
) -> ControlResult<Json<Vec<CallbackDelivery>>> {
    Ok(Json(control.decide(operation, body.result).await?))
}

/// `GET /_sim/requests`
async fn list_requests(State(control): State<ApprovalControl>) -> Json<Vec<ReceivedRequest>> {
    Json(control.requests())
}

/// `GET /_sim/callbacks`
async fn list_callbacks(State(control): State<ApprovalControl>) -> Json<Vec<CallbackDelivery>> {
    Json(control.callbacks())
}
