//! Request parsing shared by the endpoints: JSON bodies with GitLab's answers to bad input,
//! and offset pagination with GitLab's `x-*` headers.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;

/// A JSON request body. An empty body reads as `{}` (every parameter absent), malformed JSON
/// answers GitLab's `Invalid json`, and a type mismatch answers a Grape-style `{"error"}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError::InvalidParam(rejection.body_text()))?;
        let value = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Object(Default::default())
        } else {
            serde_json::from_slice(&bytes).map_err(|_| ApiError::InvalidJson)?
        };
        serde_json::from_value(value)
            .map(JsonBody)
            .map_err(|err| ApiError::InvalidParam(err.to_string()))
    }
}

/// `page` and `per_page` (default 20, at most 100).
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    page: Option<usize>,
    per_page: Option<usize>,
}

/// One page of `items` as a JSON array, with `x-page`, `x-per-page`, `x-total`,
/// `x-total-pages`, `x-next-page` and `x-prev-page` (empty at the ends, as GitLab sends).
pub fn paginate(items: Vec<Value>, query: &PageQuery) -> Response {
    let per_page = query.per_page.unwrap_or(20).clamp(1, 100);
    let page = query.page.unwrap_or(1).max(1);
    let total = items.len();
    let total_pages = total.div_ceil(per_page).max(1);
    let body: Vec<Value> = items
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .collect();
    let next = if page < total_pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let prev = if page > 1 {
        (page - 1).to_string()
    } else {
        String::new()
    };
    let mut response = Json(body).into_response();
    let headers = [
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-total", total.to_string()),
        ("x-total-pages", total_pages.to_string()),
        ("x-next-page", next),
        ("x-prev-page", prev),
    ];
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// A required, non-blank string parameter, or Grape's `"<name> is missing"` / `"is empty"`.
pub fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, ApiError> {
    match value.as_deref() {
        None => Err(ApiError::InvalidParam(format!("{name} is missing"))),
        Some(value) if value.trim().is_empty() => {
            Err(ApiError::InvalidParam(format!("{name} is empty")))
        }
        Some(value) => Ok(value),
    }
}
