//! The HTTP edge: routers per trust boundary and the layer stack, in one place.

mod admin;
mod api;
mod callbacks;
pub mod client_addr;
pub mod error;
pub mod extract;
pub mod layers;
mod ops;
mod page;
pub mod request_id;
mod web;

use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::state::AppState;
use error::ApiError;

/// Request bodies above this are refused (413) when a handler reads them.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The whole application router with its layers.
pub fn router(state: AppState) -> Router {
    let request_timeout = state.config.current().server.request_timeout;
    let (api, document) = api::router(&state);
    // Serialised once: the document is fixed for the life of the process.
    let document: Arc<str> = serde_json::to_string(&document)
        .expect("the OpenAPI document serialises")
        .into();
    let router = Router::new()
        .merge(ops::router())
        .merge(api)
        .route(
            "/api/openapi.json",
            get(move || {
                let document = document.clone();
                async move { ([(CONTENT_TYPE, "application/json")], document.to_string()) }
            }),
        )
        .fallback(web::serve)
        .with_state(state);
    with_edge_layers(router, request_timeout)
}

/// The layers every route gets: request id, tracing, panic catching, the
/// request timeout and the body limit.
pub fn with_edge_layers(router: Router, request_timeout: Duration) -> Router {
    router
        // Listed innermost first: the request id wraps everything, so traces,
        // panics and timeouts all carry it.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            limit_duration(request_timeout, request, next)
        }))
        .layer(CatchPanicLayer::custom(
            |panic: Box<dyn std::any::Any + Send>| {
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                ApiError::Internal(anyhow::anyhow!("handler panicked: {detail}")).into_response()
            },
        ))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request| {
                let route = request
                    .extensions()
                    .get::<MatchedPath>()
                    .map_or("unmatched", MatchedPath::as_str);
                let request_id = request
                    .headers()
                    .get(request_id::HEADER)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                tracing::info_span!("request", method = %request.method(), route, request_id)
            }),
        )
        .layer(middleware::from_fn(request_id::assign))
}

async fn limit_duration(limit: Duration, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout.into_response(),
    }
}
