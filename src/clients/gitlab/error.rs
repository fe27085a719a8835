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

    /// Whether trying again later may succeed: anything but a verdict
    /// that waiting cannot help.
    pub fn is_transient(&self) -> bool {
        !matches!(self.class(), FailureClass::Permanent(_))
    }

    /// What this failure means for the step that made the call: the one
    /// classification every GitLab call goes through.
    pub fn class(&self) -> FailureClass {
        match self {
            Self::Throttled { wait } => FailureClass::Waiting(*wait),
            Self::Unreachable(failure) if failure.is_certificate() => {
                FailureClass::Permanent(Permanent::Certificate(*failure))
            }
            Self::Unreachable(failure) => FailureClass::Unreachable(*failure),
            Self::Timeout | Self::Transport(_) => FailureClass::Transient,
            Self::Status { status, .. }
                if status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS =>
            {
                FailureClass::Transient
            }
            // The token is refused, or lacks the rights (doc/api/rest/troubleshooting.md,
            // "Status codes"; lib/api/helpers.rb `unauthorized!`, `forbidden!`).
            Self::Status { status, .. }
                if *status == StatusCode::UNAUTHORIZED || *status == StatusCode::FORBIDDEN =>
            {
                FailureClass::Permanent(Permanent::AccessDenied)
            }
            // `not_found!('Project')` (lib/api/helpers.rb `find_project!`): the
            // project is gone, renamed, or invisible to the token.
            Self::Status { status, message }
                if *status == StatusCode::NOT_FOUND && message.starts_with("404 Project") =>
            {
                FailureClass::Permanent(Permanent::ProjectNotFound)
            }
            Self::Status { .. } | Self::Decode(_) => FailureClass::Permanent(Permanent::Refused),
            Self::NotConfigured(_) => FailureClass::Permanent(Permanent::NotConfigured),
        }
    }
}

/// How a failed call to another system is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Try again after a backoff; an outcome-unknown write is re-read first.
    Transient,
    /// A durable wait: nothing is asked before the pause is over.
    Waiting(std::time::Duration),
    /// No connection could be made: tried again until the outage has lasted
    /// `workflow.unreachable_deadline`, then permanent.
    Unreachable(Unreachable),
    /// Waiting cannot help: the step fails, and the requester is told to
    /// contact the team.
    Permanent(Permanent),
}

/// Why waiting cannot help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permanent {
    /// The server's certificate is not accepted: a setting or the server
    /// must change first.
    Certificate(Unreachable),
    /// A 401 or 403: the token is refused or lacks a right.
    AccessDenied,
    /// The project does not exist for the token.
    ProjectNotFound,
    /// changegate lacks a setting the call needs.
    NotConfigured,
    /// GitLab's answer about the request itself (each step tells what it means).
    Refused,
}

impl Permanent {
    /// The metric label of a failure about the system rather than the
    /// request, counted and logged as such; `None` for a refusal of the request.
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Self::Certificate(failure) => Some(failure.reason()),
            Self::AccessDenied => Some("access_denied"),
            Self::ProjectNotFound => Some("project_not_found"),
            Self::NotConfigured => Some("not_configured"),
            Self::Refused => None,
        }
    }
}
