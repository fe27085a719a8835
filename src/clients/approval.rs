//! The external approval system: changegate asks it to approve a request and
//! learns the decision later from a signed callback.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Serialize;

use super::http::{CallError, SystemClient};

/// What the approval system receives.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest<'a> {
    /// The operation the decision is for (echoed in the callback).
    pub operation_id: &'a str,
    /// Subject.
    pub subject_id: &'a str,
    /// Target.
    pub target_key: &'a str,
    /// Who asked.
    pub requested_by: &'a str,
    /// Why.
    pub reason: &'a str,
    /// Requested parameters.
    pub params: &'a serde_json::Value,
    /// `{"mrId": iid}` in the MR-first flow, where the MR exists already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext: Option<serde_json::Value>,
}

/// Why a request did not reach the approval system.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// It answered with a client error: sending it again will not help.
    #[error("the approval system refused the request (HTTP {0})")]
    Refused(StatusCode),
    /// It kept failing (5xx, 429 or no connection) through every retry.
    #[error("the approval system is unavailable: {0}")]
    Unavailable(String),
    /// No answer in time: the request may have arrived.
    #[error("the approval system did not answer in time")]
    Timeout,
}

/// Sends approval requests over HTTP; cheap to clone.
#[derive(Clone)]
pub struct ApprovalClient {
    http: SystemClient,
}

impl ApprovalClient {
    /// A client sending through `http`.
    pub fn new(http: SystemClient) -> Self {
        Self { http }
    }

    /// POSTs `request` to `url`, retrying 5xx, 429 and connection failures
    /// up to `retries` times with exponential backoff. The approval system
    /// is idempotent per operation, so a repeat after an unclear failure is
    /// safe; a timeout is not retried, because the answer is then unknown
    /// rather than negative.
    pub async fn request(
        &self,
        url: &str,
        timeout: Duration,
        retries: u32,
        request: &ApprovalRequest<'_>,
    ) -> Result<(), ApprovalError> {
        let mut pause = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            let sent = self
                .http
                .send(
                    self.http
                        .request(reqwest::Method::POST, url)
                        .timeout(timeout)
                        .json(request),
                )
                .await;
            let failure = match sent {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) => {
                    let status = response.status();
                    if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
                        return Err(ApprovalError::Refused(status));
                    }
                    format!("HTTP {status}")
                }
                Err(CallError::Timeout) => return Err(ApprovalError::Timeout),
                Err(err) => err.to_string(),
            };
            if attempt >= retries {
                return Err(ApprovalError::Unavailable(failure));
            }
            tracing::debug!(attempt, "approval request failed, retrying: {failure}");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
            attempt += 1;
        }
    }
}
