//! Plumbing shared by the simulators' `/_sim` control APIs: JSON bodies, the one error
//! shape (`{"error": "..."}`), and the `times` / `probability` part every fault has.
//!
//! The control APIs are separate routers from the simulated APIs, so a fault or a
//! simulated quirk never touches them, and a client of the simulated API never sees them.

use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::chance::is_probability;

/// Result alias for control handlers.
pub(crate) type ControlResult<T> = Result<T, ControlError>;

/// A refused control call.
#[derive(Debug)]
pub(crate) struct ControlError {
    status: StatusCode,
    message: String,
}

impl ControlError {
    /// 400: the request cannot be carried out as written.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 404: the project, pipeline, approval, ... does not exist.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// A JSON body; anything unreadable answers 400 with serde's explanation, so a typo in a
/// field name or a fault kind is reported instead of silently ignored.
pub(crate) struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ControlError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ControlError> {
        Json::<T>::from_request(request, state)
            .await
            .map(|Json(body)| Self(body))
            .map_err(|rejection| ControlError::bad_request(rejection.body_text()))
    }
}

/// The `times` (default 1) and `probability` (default: always) of an injected fault.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub(crate) struct Strikes {
    times: Option<u32>,
    probability: Option<f64>,
}

impl Strikes {
    /// The strike count and the checked probability.
    pub(crate) fn checked(self) -> ControlResult<(u32, Option<f64>)> {
        match self.probability {
            Some(probability) if !is_probability(probability) => Err(ControlError::bad_request(
                format!("probability must be within 0.0..=1.0, got {probability}"),
            )),
            probability => Ok((self.times.unwrap_or(1), probability)),
        }
    }
}

/// A path parameter; an unreadable one (an unknown endpoint name, a non-numeric id) answers
/// 400 with the reason.
pub(crate) struct Param<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Param<T> {
    type Rejection = ControlError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ControlError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(param)| Self(param))
            .map_err(|rejection| ControlError::bad_request(rejection.body_text()))
    }
}

/// A duration in whole milliseconds, as the control API spells delays (`delay_ms`).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
