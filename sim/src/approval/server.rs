//! The HTTP side: `POST /approvals`, idempotent per `operationId`, with the request faults
//! applied around recording the approval.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::SimContext;
use super::announce::{announce, schedule};
use super::control::{ApprovalSnapshot, ReceivedRequest};
use super::faults::ApprovalFaultKind;

/// The request body changegate sends. Unknown fields are accepted, as a tolerant external
/// system would; the listed ones are required with these types.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApprovalRequest {
    /// A UUID, checked after parsing so that a malformed id gets its own message.
    operation_id: String,
    subject_id: String,
    target_key: String,
    requested_by: String,
    reason: String,
    params: Map<String, Value>,
    ext: Option<Map<String, Value>>,
}

/// The simulator's routes.
pub(super) fn router(ctx: SimContext) -> Router {
    Router::new()
        .route("/approvals", post(create_approval))
        .with_state(ctx)
}

/// `POST /approvals`: 201 for a new approval, 200 with the same ids for a repeat.
async fn create_approval(
    State(ctx): State<SimContext>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !authorized(&ctx, &headers) {
        let answer = error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "bad or missing token",
        );
        return record(&ctx, &headers, raw, None, answer);
    }
    let request: ApprovalRequest = match serde_json::from_value(raw.clone()) {
        Ok(request) => request,
        Err(err) => {
            let answer = error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                &err.to_string(),
            );
            return record(&ctx, &headers, raw, None, answer);
        }
    };
    let Ok(operation) = Uuid::parse_str(&request.operation_id) else {
        let answer = error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "operationId is no UUID",
        );
        return record(&ctx, &headers, raw, None, answer);
    };
    let (fault, hold) = {
        let mut state = ctx.lock();
        (
            state.faults.take_request(operation),
            state.lost_response_hold,
        )
    };
    if let Some(fault) = fault {
        tracing::debug!(%operation, ?fault, "approval simulator injects a fault");
    }
    if let Some(ApprovalFaultKind::Status(code)) = fault {
        return record(&ctx, &headers, raw, fault, status_fault(code));
    }
    let (status, approval_id, policy) = {
        let mut state = ctx.lock();
        let policy = state.policy;
        match state.approvals.iter().find(|a| a.operation_id == operation) {
            Some(existing) => (StatusCode::OK, existing.approval_id, None),
            None => {
                let approval_id = Uuid::new_v4();
                state.approvals.push(ApprovalSnapshot {
                    approval_id,
                    operation_id: operation,
                    subject_id: request.subject_id,
                    target_key: request.target_key,
                    requested_by: request.requested_by,
                    reason: request.reason,
                    params: request.params,
                    ext: request.ext,
                    decisions: Vec::new(),
                });
                (StatusCode::CREATED, approval_id, Some(policy))
            }
        }
    };
    let answer = (
        status,
        Json(json!({
            "approvalId": approval_id.to_string(),
            "operationId": operation.to_string(),
        })),
    )
        .into_response();
    let answer = record(&ctx, &headers, raw, fault, answer);
    if let Some(ApprovalFaultKind::CallbackBeforeAnswer(result)) = fault {
        // The early callback is this approval's decision, so the policy is not consulted.
        // It runs as its own task so that a client giving up does not cut it short.
        let task_ctx = ctx.clone();
        let sent = ctx.spawn(async move {
            announce(&task_ctx, operation, result).await;
        });
        if let Err(err) = sent.await {
            tracing::warn!(%err, "approval simulator's early callback did not finish");
        }
        return answer;
    }
    // A repeat changes nothing; a new approval is decided while its answer may still be on
    // the way, as the real system does not wait for its client either.
    if let Some(policy) = policy {
        schedule(&ctx, operation, policy);
    }
    match fault {
        Some(ApprovalFaultKind::Slow(delay)) => ctx.hold(delay).await,
        Some(ApprovalFaultKind::LostResponse) => ctx.hold(hold).await,
        _ => {}
    }
    answer
}

/// Whether the bearer token matches, or none is required.
fn authorized(ctx: &SimContext, headers: &HeaderMap) -> bool {
    let state = ctx.lock();
    let Some(token) = state.api_token.as_deref() else {
        return true;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    given == Some(token)
}

/// Logs the request with the status it is answered with, and passes the answer through.
fn record(
    ctx: &SimContext,
    headers: &HeaderMap,
    body: Value,
    fault: Option<ApprovalFaultKind>,
    answer: Response,
) -> Response {
    ctx.lock().requests.push(ReceivedRequest {
        body,
        status: answer.status().as_u16(),
        fault,
        traceparent: traceparent_of(headers),
    });
    answer
}

/// The W3C trace context the caller sent, if any.
fn traceparent_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// The answer of an injected status fault.
fn status_fault(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let reason = status.canonical_reason().unwrap_or("error");
    if status != StatusCode::TOO_MANY_REQUESTS {
        return error(status, "UNAVAILABLE", reason);
    }
    let mut answer = error(status, "RATE_LIMITED", reason);
    answer
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    answer
}

/// A JSON error body.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "code": code, "message": message }))).into_response()
}
