//! The middleware in front of every simulated route: it counts the call, applies the first
//! queued fault that strikes, and logs the call with its answer. Rebase conflicts and
//! checklist 422s need the handler's help and travel to it as request extensions.

use std::time::Duration;

use axum::extract::{OriginalUri, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_server::ConnectionShutdown;
use chrono::Utc;

use super::SimContext;
use super::auth::token_of;
use super::error::ApiError;
use super::faults::{Endpoint, FaultKind, RecordedRequest};

/// Request extension telling the rebase handler to fail this rebase.
#[derive(Clone, Copy, Debug)]
pub struct InjectedRebaseConflict;

/// Request extension telling the approve handler to answer the checklist 422.
#[derive(Clone, Copy, Debug)]
pub struct InjectedChecklistMismatch;

/// The per-route middleware. The call is logged before a slow or lost answer is held back
/// or the connection is dropped, so the log shows what the simulator did even while the
/// client is still waiting.
pub async fn intercept(
    State((ctx, endpoint)): State<(SimContext, Endpoint)>,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().to_string();
    // Nesting strips `/api/v4` from the request's URI; the log shows what the client sent.
    let uri = request
        .extensions()
        .get::<OriginalUri>()
        .map_or(request.uri(), |original| &original.0);
    let path = uri
        .path_and_query()
        .map_or(uri.path(), |p| p.as_str())
        .to_owned();
    // Taken before the handler consumes the request: the handle on this request's
    // connection, which `Listener` (axum-server) puts on every request.
    let connection = request.extensions().get::<ConnectionShutdown>().cloned();
    let token = token_of(request.headers()).map(str::to_owned);
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let (fault, hold, user) = {
        let mut state = ctx.lock();
        let fault = state.faults.record_call(endpoint);
        let user = token.and_then(|token| state.users.username_of(&token).map(str::to_owned));
        (fault, state.options.lost_response_hold, user)
    };
    if let Some(fault) = &fault {
        tracing::debug!(?endpoint, ?fault, "gitlab simulator injects a fault");
    }
    // The answer sent, and the endpoint's own status when the call reached it.
    let (response, handled) = match &fault {
        Some(FaultKind::Status(code)) => (status_response(*code), None),
        Some(FaultKind::AppliedThenStatus(code)) => {
            // The handler's own answer is what the proxy dropped; only its effect remains.
            let handled = next.run(request).await.status().as_u16();
            (status_response(*code), Some(handled))
        }
        Some(FaultKind::RateLimited { retry_after }) => (rate_limited(Some(*retry_after)), None),
        Some(FaultKind::RateLimitedBare) => (rate_limited(None), None),
        Some(FaultKind::MergeRefused(405)) => (ApiError::MethodNotAllowed.into_response(), None),
        Some(FaultKind::MergeRefused(code)) => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
            (ApiError::CannotBeMerged(status).into_response(), None)
        }
        Some(FaultKind::RebaseConflict) => {
            request.extensions_mut().insert(InjectedRebaseConflict);
            reached(next.run(request).await)
        }
        Some(FaultKind::ChecklistMismatch) => {
            request.extensions_mut().insert(InjectedChecklistMismatch);
            reached(next.run(request).await)
        }
        None | Some(FaultKind::Slow(_) | FaultKind::LostResponse | FaultKind::AppliedThenDrop) => {
            reached(next.run(request).await)
        }
    };
    ctx.lock().faults.record_answer(RecordedRequest {
        endpoint,
        method,
        path,
        status: response.status().as_u16(),
        handled,
        user,
        fault: fault.clone(),
        traceparent,
    });
    match fault {
        Some(FaultKind::Slow(delay)) => tokio::time::sleep(delay).await,
        Some(FaultKind::AppliedThenDrop) => {
            if let Some(connection) = connection {
                drop_connection(connection).await;
            }
            // Not served by `Listener` (no connection handle): withheld like a lost answer,
            // so the client still never gets one.
            hold_back(&ctx, hold).await;
        }
        Some(FaultKind::LostResponse) => hold_back(&ctx, hold).await,
        _ => {}
    }
    response
}

/// The endpoint's own answer, sent as it is (or withheld).
fn reached(response: Response) -> (Response, Option<u16>) {
    let handled = response.status().as_u16();
    (response, Some(handled))
}

/// Holds an answer back for `hold`, or until the simulator's handle is dropped.
async fn hold_back(ctx: &SimContext, hold: Duration) {
    let mut released = ctx.released.clone();
    tokio::select! {
        () = tokio::time::sleep(hold) => {}
        _ = released.changed() => {}
    }
}

/// Closes the connection this request came on without writing any of its answer; never
/// returns.
///
/// A handler cannot do this by answering: whatever it returns, hyper writes at least the
/// status line, and an erroring body still sends the head first (HTTP/1) or a HEADERS
/// frame (HTTP/2). So the connection is aborted from outside the exchange: axum-server runs
/// each connection in a task that, besides serving it, waits on the connection's
/// [`ConnectionShutdown`] and, when asked to shut down, returns at once, dropping hyper's
/// connection and with it the socket (the kernel sends FIN, or RST when unread bytes
/// remain). The ask has to come before the handler's future finishes: if the handler
/// answered in the same poll, hyper could flush the answer before the connection task
/// looked at the shutdown. Hence this future asks, then stays pending until that task
/// drops it along with the connection.
async fn drop_connection(connection: ConnectionShutdown) {
    connection.shutdown();
    std::future::pending::<()>().await;
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
