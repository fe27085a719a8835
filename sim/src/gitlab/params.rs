//! Request parsing shared by the endpoints: JSON bodies with GitLab's answers to bad input,
//! and offset pagination with GitLab's `x-*` and `Link` headers.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Query, Request};
use axum::http::HeaderValue;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::SimContext;
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

/// `page` and `per_page` (default 20, at most 100) of a list request, with the URL its
/// `Link` header points back at.
#[derive(Debug)]
pub struct PageQuery {
    page: usize,
    per_page: usize,
    /// `{base_url}{path}` as the client sent it, without the query.
    url: String,
    /// The request's other query parameters, still encoded, kept in the `Link` URLs.
    others: Vec<String>,
}

/// The numbers of [`PageQuery`], as the query carries them.
#[derive(Deserialize)]
struct PageNumbers {
    page: Option<usize>,
    per_page: Option<usize>,
}

impl FromRequestParts<SimContext> for PageQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SimContext) -> Result<Self, ApiError> {
        let Query(numbers) = Query::<PageNumbers>::from_request_parts(parts, ctx)
            .await
            .map_err(|rejection| ApiError::InvalidParam(rejection.body_text()))?;
        // Nesting strips `/api/v4` from the URI; the links must carry it.
        let uri = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(&parts.uri, |original| &original.0);
        let others = uri
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|pair| {
                let key = pair.split('=').next().unwrap_or_default();
                !pair.is_empty() && key != "page" && key != "per_page"
            })
            .map(str::to_owned)
            .collect();
        Ok(Self {
            page: numbers.page.unwrap_or(1).max(1),
            per_page: numbers.per_page.unwrap_or(20).clamp(1, 100),
            url: format!("{}{}", ctx.lock().base_url, uri.path()),
            others,
        })
    }
}

impl PageQuery {
    /// The URL of page `page`, as `Link` names it.
    fn href(&self, page: usize) -> String {
        let numbers = [
            format!("page={page}"),
            format!("per_page={}", self.per_page),
        ];
        let query: Vec<&str> = self
            .others
            .iter()
            .map(String::as_str)
            .chain(numbers.iter().map(String::as_str))
            .collect();
        format!("{}?{}", self.url, query.join("&"))
    }
}

/// One page of `items` as a JSON array, with offset pagination's headers as
/// `Gitlab::Pagination::OffsetHeaderBuilder` sends them: `x-page`, `x-per-page`,
/// `x-next-page` and `x-prev-page` (empty at the ends), `x-total`, `x-total-pages`, and
/// `Link` with `prev`, `next`, `first` and `last`.
pub fn paginate(items: Vec<Value>, query: &PageQuery) -> Response {
    let (page, per_page) = (query.page, query.per_page);
    let total = items.len();
    let total_pages = total.div_ceil(per_page).max(1);
    let body: Vec<Value> = items
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .collect();
    let next = (page < total_pages).then_some(page + 1);
    let prev = (page > 1).then_some(page - 1);
    let number = |page: Option<usize>| page.map(|page| page.to_string()).unwrap_or_default();
    let link = |page: usize, rel: &str| format!("<{}>; rel=\"{rel}\"", query.href(page));
    let links: Vec<String> = [prev.map(|p| link(p, "prev")), next.map(|p| link(p, "next"))]
        .into_iter()
        .flatten()
        .chain([link(1, "first"), link(total_pages, "last")])
        .collect();
    let mut response = Json(body).into_response();
    let headers = [
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-total", total.to_string()),
        ("x-total-pages", total_pages.to_string()),
        ("x-next-page", number(next)),
        ("x-prev-page", number(prev)),
        ("link", links.join(", ")),
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
