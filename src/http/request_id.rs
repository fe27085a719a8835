//! Request ids: taken from `x-request-id` when the caller sent a sane one,
//! generated otherwise, echoed on every response and visible to error bodies.
//!
//! Hand-written rather than tower-http's `SetRequestId`, which trusts any
//! incoming value: an id is copied into logs and JSON, so its length and
//! characters are bounded here.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use tokio::task::futures::TaskLocalFuture;

/// The request id header.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");
const MAX_LEN: usize = 128;

tokio::task_local! {
    // The header value itself: cloning it shares its bytes, and only an
    // error answer needs the id as text.
    static REQUEST_ID: HeaderValue;
}

/// The id of the request being handled on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID
        .try_with(|id| id.to_str().map(ToOwned::to_owned))
        .ok()?
        .ok()
}

fn acceptable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// The id of `request`: the one it sent if that is acceptable, else a new
/// one, written into its headers so every later layer sees the same id.
pub fn of(request: &mut Request) -> HeaderValue {
    match request.headers().get(&HEADER) {
        Some(sent) if sent.to_str().is_ok_and(acceptable) => sent.clone(),
        _ => {
            let mut text = uuid::Uuid::encode_buffer();
            let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
            let header = HeaderValue::from_str(id).expect("a UUID is visible ASCII");
            request.headers_mut().insert(HEADER, header.clone());
            header
        }
    }
}

/// Runs `future` with `id` as the [`current`] request id.
pub fn scope<F: Future>(id: HeaderValue, future: F) -> TaskLocalFuture<HeaderValue, F> {
    REQUEST_ID.scope(id, future)
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
