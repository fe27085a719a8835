//! Callback bodies whose Standard Webhooks signature is checked over the
//! exact bytes received, before anything is parsed.

use std::marker::PhantomData;

use axum::extract::{FromRequest, Request};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;

use crate::config::Settings;
use crate::http::error::ApiError;
use crate::http::extract::{parse_json, read_body};
use crate::signature::{DEFAULT_TOLERANCE, WebhookSecret, verify};
use crate::state::AppState;

/// A caller with its own signing secret.
pub trait Sender: Send + Sync + 'static {
    /// Its name, for logs.
    const NAME: &'static str;
    /// Its secret in the configuration.
    fn secret(settings: &Settings) -> Option<&SecretString>;
}

/// The approval system (`approval.callback_secret`).
pub struct ApprovalSystem;

impl Sender for ApprovalSystem {
    const NAME: &'static str = "approval";
    fn secret(settings: &Settings) -> Option<&SecretString> {
        settings.approval.callback_secret.as_ref()
    }
}

/// The deploy pipeline (`deploy.callback_secret`).
pub struct DeployPipeline;

impl Sender for DeployPipeline {
    const NAME: &'static str = "deploy";
    fn secret(settings: &Settings) -> Option<&SecretString> {
        settings.deploy_callback_secret.as_ref()
    }
}

/// A JSON body signed by `S`. A missing, stale (±5 min) or wrong signature,
/// or no configured secret, is 401 and the body is never parsed.
pub struct SignedJson<T, S>(pub T, pub PhantomData<S>);

impl<T: DeserializeOwned, S: Sender> FromRequest<AppState> for SignedJson<T, S> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let secret = {
            let settings = state.config.load();
            let Some(secret) = S::secret(&settings) else {
                tracing::warn!(
                    sender = S::NAME,
                    "callback refused: no callback secret is configured"
                );
                return Err(ApiError::BadSignature);
            };
            WebhookSecret::parse(secret.expose_secret()).map_err(|err| {
                tracing::error!(
                    sender = S::NAME,
                    "callback refused: the configured secret is unusable: {err}"
                );
                ApiError::BadSignature
            })?
        };
        let headers = request.headers().clone();
        let body = read_body(request, state).await?;
        let now = chrono::Utc::now().timestamp();
        if let Err(err) = verify(&[secret], &headers, &body, now, DEFAULT_TOLERANCE) {
            tracing::info!(sender = S::NAME, "callback refused: {err}");
            return Err(ApiError::BadSignature);
        }
        parse_json(&body).map(|value| SignedJson(value, PhantomData))
    }
}
