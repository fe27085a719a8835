//! The HTTP edge: routers per trust boundary and the layer stack, in one place.

mod admin;
mod api;
mod callbacks;
pub mod client_addr;
mod edge;
pub mod error;
pub mod extract;
pub mod layers;
pub mod ops;
mod page;
mod reason;
pub mod request_id;
mod web;

use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;

use crate::state::AppState;
use edge::EdgeLayer;
use error::ApiError;

/// Request bodies above this are refused (413) when a handler reads them.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The whole application router with its layers.
pub fn router(state: AppState) -> Router {
    let request_timeout = state.config.current().server.request_timeout;
    let edge = EdgeLayer::new(request_timeout).continuing_traces_from(state.config.clone());
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
        // axum adds the `Allow` header to this answer.
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .fallback(web::serve)
        .with_state(state);
    with_edge(router, edge)
}

/// The layers every route gets: request id and request timeout, tracing
/// (continuing no caller's trace), panic catching and the body limit.
pub fn with_edge_layers(router: Router, request_timeout: Duration) -> Router {
    with_edge(router, EdgeLayer::new(request_timeout))
}

fn with_edge(router: Router, edge: EdgeLayer) -> Router {
    // One `layer` call with the whole stack: axum boxes each route once per
    // call and clones every box on every request, so four calls cost four
    // boxes per request where one costs one. Listed outermost first: the
    // request id wraps everything, so traces, panics and timeouts carry it.
    router.layer(
        ServiceBuilder::new()
            .layer(edge)
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
