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
use tower::ServiceBuilder;
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

/// The layers every route gets: request id and request timeout, tracing,
/// panic catching and the body limit.
pub fn with_edge_layers(router: Router, request_timeout: Duration) -> Router {
    // One `layer` call with the whole stack: axum boxes each route once per
    // call and clones every box on every request, so four calls cost four
    // boxes per request where one costs one. Listed outermost first: the
    // request id wraps everything, so traces, panics and timeouts carry it.
    router.layer(
        ServiceBuilder::new()
            .layer(middleware::from_fn(move |request: Request, next: Next| {
                identified_and_bounded(request_timeout, request, next)
            }))
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
                    // At debug: the id reaches every logged line without a
                    // span (telemetry::WithRequestId), and a span on every
                    // request costs more than the rest of the edge layers.
                    tracing::debug_span!("request", method = %request.method(), route, request_id)
                }),
            )
            .layer(CatchPanicLayer::custom(
                |panic: Box<dyn std::any::Any + Send>| {
                    let detail = panic
                        .downcast_ref::<&str>()
                        .map(|text| (*text).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    ApiError::Internal(anyhow::anyhow!("handler panicked: {detail}"))
                        .into_response()
                },
            ))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES)),
    )
}

/// The request id and the request timeout in one middleware: each layer in
/// the chain costs a boxed future and a service clone per request.
async fn identified_and_bounded(limit: Duration, request: Request, next: Next) -> Response {
    request_id::assign(request, |request| async move {
        match tokio::time::timeout(limit, next.run(request)).await {
            Ok(response) => response,
            Err(_) => ApiError::Timeout.into_response(),
        }
    })
    .await
}
