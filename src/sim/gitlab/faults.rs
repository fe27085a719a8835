//! Fault injection and call counting. A middleware in front of every route counts the call
//! and applies the first queued fault that matches the endpoint: error statuses, 429s with
//! and without rate-limit headers, slow or lost responses, merge refusals, rebase conflicts,
//! checklist 422s. The last two need the handler's help and travel as request extensions.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use super::SimContext;
use super::error::ApiError;

/// The simulated operations, as fault scopes and call counters name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `GET /projects/:id`
    GetProject,
    /// `GET …/repository/branches`
    ListBranches,
    /// `GET …/repository/branches/:branch`
    GetBranch,
    /// `POST …/repository/branches`
    CreateBranch,
    /// `DELETE …/repository/branches/:branch`
    DeleteBranch,
    /// `GET …/repository/files/:file_path`
    GetFile,
    /// `GET …/repository/files/:file_path/raw`
    GetRawFile,
    /// `POST …/repository/commits`
    CreateCommit,
    /// `GET …/merge_requests`
    ListMergeRequests,
    /// `POST …/merge_requests`
    CreateMergeRequest,
    /// `GET …/merge_requests/:iid`
    GetMergeRequest,
    /// `PUT …/merge_requests/:iid` (edit, close, reopen)
    UpdateMergeRequest,
    /// `PUT …/merge_requests/:iid/merge`
    Merge,
    /// `PUT …/merge_requests/:iid/rebase`
    Rebase,
    /// `GET …/merge_requests/:iid/approvals`
    GetApprovals,
    /// `POST …/merge_requests/:iid/approve`
    Approve,
    /// `POST …/merge_requests/:iid/unapprove`
    Unapprove,
    /// `GET /projects/:id/approval_checklist` (checklist extension)
    GetApprovalChecklist,
    /// `GET …/merge_requests/:iid/pipelines`
    ListMergeRequestPipelines,
    /// `GET /projects/:id/pipelines/:pipeline_id`
    GetPipeline,
}

/// What a fault does to the call it hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Answers this status without applying the request: 502/503/504 with the HTML page
    /// GitLab's front proxy serves, any other code with `{"message": "<code> <reason>"}`.
    Status(u16),
    /// 429 `Retry later` with `RateLimit-*` and `Retry-After`, as GitLab's throttles send.
    RateLimited {
        /// The `Retry-After` value; `RateLimit-Reset` is now plus this, as an epoch.
        retry_after: Duration,
    },
    /// 429 `Retry later` with no rate-limit header at all (seen against real servers).
    RateLimitedBare,
    /// Applies the request, then answers after the delay.
    Slow(Duration),
    /// Applies the request, then withholds the answer for `lost_response_hold`: the client
    /// times out although the change happened.
    LostResponse,
    /// Answers the merge endpoint's refusal without merging: 405 `405 Method Not Allowed`,
    /// or 406/422 `Branch cannot be merged`.
    MergeRefused(u16),
    /// The rebase is accepted (202) but finishes with GitLab's "Rebase failed" `merge_error`.
    RebaseConflict,
    /// Approve answers the checklist extension's 422 (with the current checklist) without
    /// approving, as if the client's checklist were stale.
    ChecklistMismatch,
}

/// A fault for the next `times` calls to an endpoint (or to any endpoint).
#[derive(Clone, Debug)]
pub struct Fault {
    endpoint: Option<Endpoint>,
    kind: FaultKind,
    times: u32,
}

impl Fault {
    /// Hits the next call to `endpoint`.
    pub fn new(endpoint: Endpoint, kind: FaultKind) -> Self {
        Self {
            endpoint: Some(endpoint),
            kind,
            times: 1,
        }
    }

    /// Hits the next call to any endpoint.
    pub fn any(kind: FaultKind) -> Self {
        Self {
            endpoint: None,
            kind,
            times: 1,
        }
    }

    /// Hits the next `times` matching calls instead of one.
    pub fn times(mut self, times: u32) -> Self {
        self.times = times;
        self
    }
}

/// Queued faults and call counters.
#[derive(Debug, Default)]
pub struct Faults {
    queue: Vec<Fault>,
    calls: HashMap<Endpoint, usize>,
}

impl Faults {
    /// Queues a fault behind those already queued.
    pub fn inject(&mut self, fault: Fault) {
        if fault.times > 0 {
            self.queue.push(fault);
        }
    }

    /// Drops every queued fault.
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// Calls to `endpoint` so far, faulted ones included.
    pub fn calls(&self, endpoint: Endpoint) -> usize {
        self.calls.get(&endpoint).copied().unwrap_or(0)
    }

    /// Counts a call and takes one use of the first matching fault.
    fn record(&mut self, endpoint: Endpoint) -> Option<FaultKind> {
        *self.calls.entry(endpoint).or_default() += 1;
        let position = self
            .queue
            .iter()
            .position(|fault| fault.endpoint.is_none_or(|e| e == endpoint))?;
        let fault = &mut self.queue[position];
        fault.times -= 1;
        let kind = fault.kind.clone();
        if fault.times == 0 {
            self.queue.remove(position);
        }
        Some(kind)
    }
}

/// Request extension telling the rebase handler to fail this rebase.
#[derive(Clone, Copy, Debug)]
pub struct InjectedRebaseConflict;

/// Request extension telling the approve handler to answer the checklist 422.
#[derive(Clone, Copy, Debug)]
pub struct InjectedChecklistMismatch;

/// The per-route middleware: counts the call, then applies a matching fault if any.
pub async fn intercept(
    State((ctx, endpoint)): State<(SimContext, Endpoint)>,
    mut request: Request,
    next: Next,
) -> Response {
    let (fault, hold) = {
        let mut state = ctx.lock();
        let fault = state.faults.record(endpoint);
        (fault, state.options.lost_response_hold)
    };
    let Some(fault) = fault else {
        return next.run(request).await;
    };
    tracing::debug!(?endpoint, ?fault, "gitlab simulator injects a fault");
    match fault {
        FaultKind::Status(code) => status_response(code),
        FaultKind::RateLimited { retry_after } => rate_limited(Some(retry_after)),
        FaultKind::RateLimitedBare => rate_limited(None),
        FaultKind::MergeRefused(405) => ApiError::MethodNotAllowed.into_response(),
        FaultKind::MergeRefused(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
            ApiError::CannotBeMerged(status).into_response()
        }
        FaultKind::Slow(delay) => {
            let response = next.run(request).await;
            tokio::time::sleep(delay).await;
            response
        }
        FaultKind::LostResponse => {
            let response = next.run(request).await;
            let mut released = ctx.released.clone();
            tokio::select! {
                () = tokio::time::sleep(hold) => {}
                _ = released.changed() => {}
            }
            response
        }
        FaultKind::RebaseConflict => {
            request.extensions_mut().insert(InjectedRebaseConflict);
            next.run(request).await
        }
        FaultKind::ChecklistMismatch => {
            request.extensions_mut().insert(InjectedChecklistMismatch);
            next.run(request).await
        }
    }
}

/// An error status as GitLab's stack sends it.
fn status_response(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let reason = status.canonical_reason().unwrap_or("Error");
    if matches!(code, 502..=504) {
        let page = format!(
            "<!DOCTYPE html>\n<html><head><title>GitLab is not responding ({code})</title></head>\
             <body><h1>{code}</h1><p>{reason}</p></body></html>\n"
        );
        let html = [(header::CONTENT_TYPE, "text/html; charset=utf-8")];
        return (status, html, page).into_response();
    }
    ApiError::Message(status, format!("{} {reason}", status.as_u16())).into_response()
}

/// 429 with GitLab's throttle headers when `retry_after` is given, bare otherwise.
fn rate_limited(retry_after: Option<Duration>) -> Response {
    let text = [(header::CONTENT_TYPE, "text/plain")];
    let mut response = (StatusCode::TOO_MANY_REQUESTS, text, "Retry later\n").into_response();
    let Some(retry_after) = retry_after else {
        return response;
    };
    let reset = Utc::now() + retry_after;
    let headers = [
        ("ratelimit-name", "throttle_authenticated_api".to_owned()),
        ("ratelimit-limit", "600".to_owned()),
        ("ratelimit-observed", "601".to_owned()),
        ("ratelimit-remaining", "0".to_owned()),
        ("ratelimit-reset", reset.timestamp().to_string()),
        (
            "ratelimit-resettime",
            reset.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
        ),
        ("retry-after", retry_after.as_secs().to_string()),
    ];
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
