//! Request ids: taken from `x-request-id` when the caller sent a sane one,
//! generated otherwise, echoed on every response and visible to error bodies.
//!
//! Hand-written rather than tower-http's `SetRequestId`, which trusts any
//! incoming value: an id is copied into logs and JSON, so its length and
//! characters are bounded here.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

/// The request id header.
pub const HEADER: &str = "x-request-id";
const MAX_LEN: usize = 128;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being handled on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

fn acceptable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Middleware: assigns the id, scopes it to the request's task, sets the header.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| acceptable(id))
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), ToOwned::to_owned);
    let header = HeaderValue::from_str(&id).expect("request ids are visible ASCII");
    request.headers_mut().insert(HEADER, header.clone());
    let mut response = REQUEST_ID.scope(id, next.run(request)).await;
    response.headers_mut().insert(HEADER, header);
    response
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_short_plain_ids_are_kept() {
        assert!(super::acceptable("3f2a-77:b_c.d"));
        assert!(!super::acceptable(""));
        assert!(!super::acceptable("has space"));
        assert!(!super::acceptable("<script>"));
        assert!(!super::acceptable(&"x".repeat(129)));
    }
}
