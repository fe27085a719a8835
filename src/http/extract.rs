//! Our extractors: JSON bodies whose errors are our error JSON (naming the
//! field), the authorised caller, and the ready database.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::layers::authz::Authorized;
use crate::db::Db;
use crate::state::AppState;

/// A JSON body. Wrong content type → 415; too large → 413; malformed JSON,
/// unknown fields and wrong types → 400 naming the field.
pub struct AppJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json"
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            });
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = read_body(request, state).await?;
        // serde would read a struct from an array too; the API speaks objects.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::InvalidArgument(
                "malformed JSON: the body must be a JSON object".to_owned(),
            ));
        }
        parse_json(&bytes).map(AppJson)
    }
}

/// The whole body (within the body limit): too large → 413.
pub async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge
            } else {
                ApiError::InvalidArgument("the request body could not be read".to_owned())
            }
        })
}

/// JSON from `bytes`, one value and nothing after it but whitespace; a 400
/// that names the field (or says the JSON is malformed).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        ApiError::InvalidArgument(if inner.is_syntax() || inner.is_eof() || path == "." {
            format!("malformed JSON: {inner}")
        } else {
            format!("field `{path}`: {inner}")
        })
    })?;
    // A second value would be ignored: what the client meant is unclear.
    deserializer
        .end()
        .map_err(|err| ApiError::InvalidArgument(format!("malformed JSON: {err}")))?;
    Ok(value)
}

/// The caller, as authorised by the route's authz layer.
pub struct AuthUser(pub Authorized);

impl<S: Send + Sync> FromRequestParts<S> for AuthUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Authorized>()
            .cloned()
            .map(AuthUser)
            // A route without the authz layer is a wiring mistake: fail closed.
            .ok_or(ApiError::Unauthenticated)
    }
}

/// The database, or 503 while it is not ready.
pub struct Database(pub Db);

impl FromRequestParts<AppState> for Database {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        state
            .db
            .get()
            .cloned()
            .map(Database)
            .ok_or(ApiError::NotReady)
    }
}

/// Query parameters whose errors are our error JSON (400 naming the problem).
pub struct AppQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for AppQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| AppQuery(value))
            .map_err(|rejection| {
                let text: String = rejection.body_text().chars().take(200).collect();
                ApiError::InvalidArgument(format!("query string: {text}"))
            })
    }
}
