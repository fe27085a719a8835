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

/// `page` and `per_page` of a list request as GitLab reads them, with the URL its `Link`
/// header points back at. `lib/api/pagination_params.rb` declares both as Grape
/// `Integer`s (`"page is invalid"` otherwise) and refuses `per_page=0` (`except_values:
/// [0]`, `"per_page has a value not allowed"`); Kaminari then reads a page below 1 as the
/// first, ignores a negative `per_page` (the default 20 stays) and caps it at
/// `max_per_page`, 100. The feature flag `only_positive_pagination_values`, which refuses
/// values below 1 instead, is off by default (`spec/requests/api/commits_spec.rb` tests
/// both).
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
    page: Option<String>,
    per_page: Option<String>,
}

/// Kaminari's default and largest page sizes (`config/initializers/kaminari_config.rb`).
const DEFAULT_PER_PAGE: usize = 20;
const MAX_PER_PAGE: usize = 100;

/// A Grape `Integer` parameter: `None` when absent.
fn integer(value: Option<&str>, name: &str) -> Result<Option<i64>, ApiError> {
    value
        .map(|value| {
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| ApiError::InvalidParam(format!("{name} is invalid")))
        })
        .transpose()
}

impl FromRequestParts<SimContext> for PageQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SimContext) -> Result<Self, ApiError> {
        let Query(numbers) = Query::<PageNumbers>::from_request_parts(parts, ctx)
            .await
            .map_err(|rejection| ApiError::InvalidParam(rejection.body_text()))?;
        let page = integer(numbers.page.as_deref(), "page")?;
        let per_page = integer(numbers.per_page.as_deref(), "per_page")?;
        if per_page == Some(0) {
            let message = "per_page has a value not allowed";
            return Err(ApiError::InvalidParam(message.to_owned()));
        }
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
        let positive = |value: Option<i64>| {
            value
                .filter(|value| *value > 0)
                .map(|value| usize::try_from(value).unwrap_or(usize::MAX))
        };
        Ok(Self {
            page: positive(page).unwrap_or(1),
            per_page: positive(per_page)
                .unwrap_or(DEFAULT_PER_PAGE)
                .min(MAX_PER_PAGE),
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

    /// The items before the requested page.
    fn offset(&self) -> usize {
        (self.page - 1).saturating_mul(self.per_page)
    }
}

/// One page of `items` as a JSON array, with offset pagination's headers as
/// `Gitlab::Pagination::OffsetHeaderBuilder` sends them: `x-page`, `x-per-page`,
/// `x-next-page` and `x-prev-page` (empty at the ends), `x-total`, `x-total-pages`, and
/// `Link` with `prev`, `next`, `first` and `last`. Past the last page Kaminari is "out of
/// range" and names neither a next nor a previous page.
pub fn paginate(items: &[Value], query: &PageQuery) -> Response {
    let page = query.page;
    let total = items.len();
    let pages = total.div_ceil(query.per_page);
    let in_range = page <= pages;
    let body = items
        .iter()
        .skip(query.offset())
        .take(query.per_page)
        .cloned()
        .collect();
    let next = (page < pages).then_some(page + 1);
    let prev = (page > 1 && in_range).then_some(page - 1);
    // At least one page, however few items (`total_pages` in offset_pagination.rb).
    page_response(body, query, next, prev, Some((total, pages.max(1))))
}

/// One page of a list GitLab does not count, as `GET …/repository/commits` answers
/// (`lib/api/commits.rb`): it asks Gitaly for one page only, tells Kaminari the total is
/// one more than what it has seen (`offset + commits.size + 1`), and paginates with
/// `exclude_total_headers: true, without_count: true`. So there is no `x-total`,
/// `x-total-pages` or `last` link, and a full page always names a next page, even when
/// nothing follows it. `items` is the whole list; the page is cut here.
pub fn paginate_uncounted(items: Vec<Value>, query: &PageQuery) -> Response {
    let page = query.page;
    let body: Vec<Value> = items
        .into_iter()
        .skip(query.offset())
        .take(query.per_page)
        .collect();
    let next = (body.len() == query.per_page).then_some(page + 1);
    let prev = (page > 1).then_some(page - 1);
    page_response(body, query, next, prev, None)
}

/// `body` as a JSON array with the pagination headers; `counted`: the total and the
/// number of pages, for `x-total`, `x-total-pages` and the `last` link.
fn page_response(
    body: Vec<Value>,
    query: &PageQuery,
    next: Option<usize>,
    prev: Option<usize>,
    counted: Option<(usize, usize)>,
) -> Response {
    let number = |page: Option<usize>| page.map(|page| page.to_string()).unwrap_or_default();
    let link = |page: usize, rel: &str| format!("<{}>; rel=\"{rel}\"", query.href(page));
    let links: Vec<String> = [
        prev.map(|p| link(p, "prev")),
        next.map(|p| link(p, "next")),
        Some(link(1, "first")),
        counted.map(|(_, pages)| link(pages, "last")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut headers = vec![
        ("x-page", query.page.to_string()),
        ("x-per-page", query.per_page.to_string()),
        ("x-next-page", number(next)),
        ("x-prev-page", number(prev)),
        ("link", links.join(", ")),
    ];
    if let Some((total, pages)) = counted {
        headers.push(("x-total", total.to_string()));
        headers.push(("x-total-pages", pages.to_string()));
    }
    let mut response = Json(body).into_response();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// Grape's `Boolean` coercion: `None` when absent.
pub fn boolean(value: Option<&str>, name: &str) -> Result<Option<bool>, ApiError> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None => Ok(None),
        Some("1" | "true" | "t" | "yes" | "y" | "on") => Ok(Some(true)),
        Some("0" | "false" | "f" | "no" | "n" | "off") => Ok(Some(false)),
        Some(_) => Err(ApiError::InvalidParam(format!("{name} is invalid"))),
    }
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
