//! One error type for every GitLab call, carrying the real HTTP status.

use reqwest::StatusCode;

use crate::clients::http::Unreachable;

/// Why a GitLab call failed.
#[derive(Debug, thiserror::Error)]
pub enum GitLabError {
    /// GitLab answered with a non-success status (after any retries).
    #[error("GitLab answered {status}: {message}")]
    Status {
        /// The real HTTP status.
        status: StatusCode,
        /// GitLab's `message` (or `error`) text, flattened.
        message: String,
    },
    /// GitLab's rate limiter asked for a pause longer than the client waits
    /// in a call (or an earlier answer's pause is still running): nothing
    /// was done, and nothing should be asked before the pause is over.
    #[error("GitLab's rate limit asks changegate to wait {}s before calling again", .wait.as_secs())]
    Throttled {
        /// What is left of the pause.
        wait: std::time::Duration,
    },
    /// No answer within the timeout. The request may have been applied.
    #[error("GitLab did not answer in time; the request may or may not have been applied")]
    Timeout,
    /// The connection could not be made: nothing was sent.
    #[error("{}", .0.describe("GitLab"))]
    Unreachable(Unreachable),
    /// The exchange failed after connecting. The request may have been applied.
    #[error("the connection to GitLab failed: {0}")]
    Transport(String),
    /// A 2xx answer that is not the documented shape.
    #[error("unexpected GitLab answer: {0}")]
    Decode(String),
    /// changegate lacks a setting the call needs (an operator must fix it).
    #[error("changegate is not configured for GitLab: {0}")]
    NotConfigured(&'static str),
}

impl GitLabError {
    /// The HTTP status, when GitLab answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the outcome on GitLab's side is unknown (the request may have
    /// been applied): no answer in time, a connection that broke after the
    /// request went out, or a 5xx. The caller must re-read remote state
    /// before acting again.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Self::Timeout | Self::Transport(_))
            || self.status().is_some_and(|s| s.is_server_error())
    }

    /// What a waiting request says while this lasts: set only for a
    /// connection that cannot be made, which waiting alone may not cure.
    pub fn obstacle(&self) -> Option<String> {
        match self {
            Self::Throttled { wait } => Some(format!(
                "GitLab's rate limit asks changegate to wait {}s; it resumes then by itself",
                wait.as_secs().max(1)
            )),
            Self::Unreachable(failure) => Some(format!(
                "{}; changegate keeps trying: please tell the team",
                failure.describe("GitLab")
            )),
            _ => None,
        }
    }

    /// The pause GitLab's rate limiter asked for, when it asked for one
    /// longer than a call waits.
    pub fn throttled_for(&self) -> Option<std::time::Duration> {
        match self {
            Self::Throttled { wait } => Some(*wait),
            _ => None,
        }
    }

    /// Whether trying again later may succeed: the outcome is unknown, the
    /// connection failed, or GitLab is throttling. Anything else is GitLab's
    /// answer about the request itself.
    pub fn is_transient(&self) -> bool {
        self.outcome_unknown()
            || matches!(self, Self::Unreachable(_) | Self::Throttled { .. })
            || self
                .status()
                .is_some_and(|s| s == reqwest::StatusCode::TOO_MANY_REQUESTS)
    }
}
