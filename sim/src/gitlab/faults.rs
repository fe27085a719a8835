//! The faults the GitLab simulator can inject (error statuses before or after applying
//! the request, 429s with and without rate-limit headers, slow or lost responses, dropped
//! connections, merge refusals, rebase conflicts, checklist 422s), their queue, the call counters and the log
//! of requests received. The middleware that applies them is in `intercept.rs`.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chance::{Budget, Budgeted, FaultQueue};
use crate::control::millis;

/// The simulated operations, as fault scopes, call counters and the request log name them
/// (`snake_case` in the control API, e.g. `create_merge_request`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `GET /projects/:id`
    GetProject,
    /// `GET …/repository/branches`
    ListBranches,
    /// `GET …/repository/branches/:branch`
    GetBranch,
    /// `POST …/repository/branches`
    CreateBranch,
    /// `DELETE …/repository/branches/:branch`
    DeleteBranch,
    /// `GET …/repository/tree`
    GetTree,
    /// `GET …/repository/files/:file_path`
    GetFile,
    /// `HEAD …/repository/files/:file_path` (the file's `X-Gitlab-*` headers only)
    GetFileMetadata,
    /// `GET …/repository/files/:file_path/raw`
    GetRawFile,
    /// `GET …/repository/commits`
    ListCommits,
    /// `POST …/repository/commits`
    CreateCommit,
    /// `GET …/repository/commits/:sha`
    GetCommit,
    /// `GET …/merge_requests`
    ListMergeRequests,
    /// `POST …/merge_requests`
    CreateMergeRequest,
    /// `GET …/merge_requests/:iid`
    GetMergeRequest,
    /// `PUT …/merge_requests/:iid` (edit, close, reopen)
    UpdateMergeRequest,
    /// `PUT …/merge_requests/:iid/merge`
    Merge,
    /// `PUT …/merge_requests/:iid/rebase`
    Rebase,
    /// `GET …/merge_requests/:iid/approvals`
    GetApprovals,
    /// `POST …/merge_requests/:iid/approve`
    Approve,
    /// `POST …/merge_requests/:iid/unapprove`
    Unapprove,
    /// `GET /projects/:id/approval_checklist` (checklist extension)
    GetApprovalChecklist,
    /// `GET …/merge_requests/:iid/pipelines`
    ListMergeRequestPipelines,
    /// `GET /projects/:id/pipelines`
    ListProjectPipelines,
    /// `GET /projects/:id/pipelines/:pipeline_id`
    GetPipeline,
    /// `GET /projects/:id/pipelines/:pipeline_id/test_report`
    GetPipelineTestReport,
    /// `POST /projects/:id/pipelines/:pipeline_id/retry`
    RetryPipeline,
    /// `POST /projects/:id/pipelines/:pipeline_id/cancel`
    CancelPipeline,
}

/// What a fault does to the call it hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Answers this status without applying the request: 502/503/504 with the HTML page
    /// GitLab's front proxy serves, any other code with `{"message": "<code> <reason>"}`.
    Status(u16),
    /// Applies the request, then answers this status as [`FaultKind::Status`] does: what
    /// a client sees when GitLab finished the change but its front proxy gave up waiting
    /// (502/503/504 with the proxy's HTML page).
    AppliedThenStatus(u16),
    /// 429 `Retry later` with `RateLimit-*` and `Retry-After`, as GitLab's throttles send.
    RateLimited {
        /// The `Retry-After` value; `RateLimit-Reset` is now plus this, as an epoch.
        retry_after: Duration,
    },
    /// 429 `Retry later` with no rate-limit header at all (seen against real servers).
    RateLimitedBare,
    /// Applies the request, then answers after the delay.
    Slow(Duration),
    /// Applies the request, then withholds the answer for `lost_response_hold`: the client
    /// times out although the change happened.
    LostResponse,
    /// Applies the request, then closes the connection without writing a byte of the
    /// answer: the client sees the connection end mid-exchange (hyper's "connection closed
    /// before message completed", or a reset) although the change happened, as when a load
    /// balancer or GitLab's front proxy is restarted. Over HTTP/2 every other request on the
    /// same connection is cut off with it, as a real dropped connection does.
    AppliedThenDrop,
    /// Answers the merge endpoint's refusal without merging: 405 `405 Method Not Allowed`,
    /// or 406/422 `Branch cannot be merged`.
    MergeRefused(u16),
    /// The rebase is accepted (202) but finishes with GitLab's "Rebase failed" `merge_error`.
    RebaseConflict,
    /// Approve answers the checklist extension's 422 (with the current checklist) without
    /// approving, as if the client's checklist were stale.
    ChecklistMismatch,
}

/// The control API's spelling of [`FaultKind`]: `{"kind": "status", "status": 503}`,
/// `{"kind": "slow", "delay_ms": 400}`, ... One definition serves injecting faults and
/// reporting them in the request log.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum FaultKindJson {
    Status { status: u16 },
    AppliedThenStatus { status: u16 },
    RateLimited { retry_after_secs: u64 },
    RateLimitedBare,
    Slow { delay_ms: u64 },
    LostResponse,
    AppliedThenDrop,
    MergeRefused { status: u16 },
    RebaseConflict,
    ChecklistMismatch,
}

impl From<FaultKindJson> for FaultKind {
    fn from(json: FaultKindJson) -> Self {
        match json {
            FaultKindJson::Status { status } => Self::Status(status),
            FaultKindJson::AppliedThenStatus { status } => Self::AppliedThenStatus(status),
            FaultKindJson::RateLimited { retry_after_secs } => Self::RateLimited {
                retry_after: Duration::from_secs(retry_after_secs),
            },
            FaultKindJson::RateLimitedBare => Self::RateLimitedBare,
            FaultKindJson::Slow { delay_ms } => Self::Slow(Duration::from_millis(delay_ms)),
            FaultKindJson::LostResponse => Self::LostResponse,
            FaultKindJson::AppliedThenDrop => Self::AppliedThenDrop,
            FaultKindJson::MergeRefused { status } => Self::MergeRefused(status),
            FaultKindJson::RebaseConflict => Self::RebaseConflict,
            FaultKindJson::ChecklistMismatch => Self::ChecklistMismatch,
        }
    }
}

impl From<&FaultKind> for FaultKindJson {
    fn from(kind: &FaultKind) -> Self {
        match *kind {
            FaultKind::Status(status) => Self::Status { status },
            FaultKind::AppliedThenStatus(status) => Self::AppliedThenStatus { status },
            FaultKind::RateLimited { retry_after } => Self::RateLimited {
                retry_after_secs: retry_after.as_secs(),
            },
            FaultKind::RateLimitedBare => Self::RateLimitedBare,
            FaultKind::Slow(delay) => Self::Slow {
                delay_ms: millis(delay),
            },
            FaultKind::LostResponse => Self::LostResponse,
            FaultKind::AppliedThenDrop => Self::AppliedThenDrop,
            FaultKind::MergeRefused(status) => Self::MergeRefused { status },
            FaultKind::RebaseConflict => Self::RebaseConflict,
            FaultKind::ChecklistMismatch => Self::ChecklistMismatch,
        }
    }
}

impl Serialize for FaultKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FaultKindJson::from(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FaultKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        FaultKindJson::deserialize(deserializer).map(Self::from)
    }
}

/// A fault for the next `times` calls to an endpoint (or to any endpoint), each struck with
/// an optional probability.
#[derive(Clone, Debug)]
pub struct Fault {
    endpoint: Option<Endpoint>,
    kind: FaultKind,
    budget: Budget,
}

impl Fault {
    /// Hits the next call to `endpoint`.
    pub fn new(endpoint: Endpoint, kind: FaultKind) -> Self {
        Self {
            endpoint: Some(endpoint),
            kind,
            budget: Budget::ONCE,
        }
    }

    /// Hits the next call to any endpoint.
    pub fn any(kind: FaultKind) -> Self {
        Self {
            endpoint: None,
            kind,
            budget: Budget::ONCE,
        }
    }

    /// Hits the next `times` matching calls instead of one.
    pub fn times(mut self, times: u32) -> Self {
        self.budget = self.budget.with_times(times);
        self
    }

    /// Hits each matching call only with `probability`, drawn from the simulator's seeded
    /// generator ([`GitLabSimOptions::fault_seed`](super::GitLabSimOptions::fault_seed)); a
    /// call it spares may still meet the faults queued behind it. `times` still caps the
    /// hits.
    ///
    /// # Panics
    /// If `probability` is not within `0.0..=1.0`.
    pub fn probability(mut self, probability: f64) -> Self {
        self.budget = self.budget.with_probability(probability);
        self
    }
}

impl Budgeted for Fault {
    fn budget(&mut self) -> &mut Budget {
        &mut self.budget
    }
}

/// One call to the simulated API, as the request log keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordedRequest {
    /// Which operation was called.
    pub endpoint: Endpoint,
    /// The HTTP method.
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    /// The status answered (for a lost response or a dropped connection: the one the
    /// client never saw).
    pub status: u16,
    /// The endpoint's own status when the call reached it, so that whatever it does was
    /// done, even if a fault then replaced or withheld the answer; `None` when a fault
    /// answered in its place and nothing happened.
    pub handled: Option<u16>,
    /// The caller's username, when its token names a user.
    pub user: Option<String>,
    /// The fault that hit the call.
    pub fault: Option<FaultKind>,
    /// The `traceparent` header it came with, if any (left out of the
    /// JSON when none, as before calls were traced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Queued faults, call counters and the request log.
#[derive(Debug)]
pub struct Faults {
    queue: FaultQueue<Fault>,
    calls: HashMap<Endpoint, usize>,
    requests: Vec<RecordedRequest>,
}

impl Faults {
    /// No faults; probabilities draw from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            queue: FaultQueue::new(seed),
            calls: HashMap::new(),
            requests: Vec::new(),
        }
    }

    /// Queues a fault behind those already queued.
    pub fn inject(&mut self, fault: Fault) {
        self.queue.push(fault);
    }

    /// Drops every queued fault.
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// Calls to `endpoint` so far, faulted ones included.
    pub fn calls(&self, endpoint: Endpoint) -> usize {
        self.calls.get(&endpoint).copied().unwrap_or(0)
    }

    /// Every call answered so far, in the order answered.
    pub fn requests(&self) -> &[RecordedRequest] {
        &self.requests
    }

    /// Counts a call and takes one strike of the first matching fault that strikes.
    pub fn record_call(&mut self, endpoint: Endpoint) -> Option<FaultKind> {
        *self.calls.entry(endpoint).or_default() += 1;
        let fault = self
            .queue
            .take(|fault| fault.endpoint.is_none_or(|e| e == endpoint))?;
        Some(fault.kind)
    }

    /// Logs a call once its answer is known.
    pub fn record_answer(&mut self, request: RecordedRequest) {
        self.requests.push(request);
    }
}
