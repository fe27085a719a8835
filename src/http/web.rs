//! The web app (SPEC §2.5): its built files are embedded in the binary and
//! served by the router's fallback. The page is never cached, so a deploy is
//! seen at the next load; content-hashed files are cached for good, since a
//! new build gives them new names. A miss is never a 500, and only a browser
//! navigating somewhere gets the page: a missing script, stylesheet or API
//! path gets the JSON 404, which a `<script>` tag cannot mistake for code.

use std::borrow::Cow;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

use super::error::ApiError;
use crate::state::AppState;

/// The output of `npm run build` in `web/`, committed so that building the
/// binary needs neither Node nor the network.
#[derive(RustEmbed)]
#[folder = "web/dist/"]
struct Assets;

const INDEX: &str = "index.html";
/// Where the build puts files whose names carry a hash of their content.
const HASHED_DIR: &str = "assets/";
/// First path segments of the server's own routes: a miss there is a wrong
/// URL in a client, never a page to navigate to.
const SERVER_ROOTS: &[&str] = &["api", "admin", "callbacks"];

const NO_STORE: &str = "no-store";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Unhashed files (e.g. the icon) keep their name across builds: revalidate.
const REVALIDATE: &str = "no-cache";

/// The page says whether to offer the demo user switcher through this tag;
/// the built file carries the "off" form.
const DEMO_IDENTITY_OFF: &str = r#"<meta name="changegate-demo-identity" content="off">"#;
const DEMO_IDENTITY_ON: &str = r#"<meta name="changegate-demo-identity" content="on">"#;

/// The router's fallback: the page, an embedded file, or the JSON 404.
pub async fn serve(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return not_found();
    }
    let path = uri.path().trim_start_matches('/');
    if path.is_empty() || path == INDEX {
        return page(&state);
    }
    let root = path.split('/').next().unwrap_or_default();
    if SERVER_ROOTS.contains(&root) {
        return not_found();
    }
    if let Some(file) = Assets::get(path) {
        return asset(path, file.data);
    }
    if is_navigation(&headers, path) {
        return page(&state);
    }
    not_found()
}

/// A browser loading a page: it asks for HTML, and the last segment has no
/// file extension (so it is an app route, not a file that went missing).
fn is_navigation(headers: &HeaderMap, path: &str) -> bool {
    let accepts_html = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/html"));
    let last = path.rsplit('/').next().unwrap_or_default();
    accepts_html && !last.contains('.')
}

fn page(state: &AppState) -> Response {
    let Some(file) = Assets::get(INDEX) else {
        return not_found();
    };
    let body = if state.config.current().web.demo_identity {
        Body::from(String::from_utf8_lossy(&file.data).replacen(
            DEMO_IDENTITY_OFF,
            DEMO_IDENTITY_ON,
            1,
        ))
    } else {
        Body::from(file.data)
    };
    (
        [
            (
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (CACHE_CONTROL, HeaderValue::from_static(NO_STORE)),
        ],
        body,
    )
        .into_response()
}

fn asset(path: &str, data: Cow<'static, [u8]>) -> Response {
    let cache = if path.starts_with(HASHED_DIR) {
        IMMUTABLE
    } else {
        REVALIDATE
    };
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type(path))),
            (CACHE_CONTROL, HeaderValue::from_static(cache)),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        ],
        Body::from(data),
    )
        .into_response()
}

fn not_found() -> Response {
    let mut response = ApiError::NotFound.into_response();
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static(NO_STORE));
    response
}

/// The media type of the kinds of file the build writes.
fn content_type(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map_or("", |(_, ext)| ext);
    match extension {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}
